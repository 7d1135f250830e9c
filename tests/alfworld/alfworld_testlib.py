"""Helpers shared by the ALFWorld adapter tests (constants and game copying).

Real games come from the repository itself: ``tests/data/alfworld/json_2.1.1`` holds 15 real ALFWorld games
(MIT, see ``tests/data/alfworld/README.md``), so no test needs a folder outside the clone. The larger sample
in ``../shared/alfworld`` (54 games), when it sits beside the clone, is used only by the tests that
deliberately sweep every game they can find; without it they sweep the vendored games instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The real games vendored into the repository (always present).
VENDORED_JSON = REPO_ROOT / "tests" / "data" / "alfworld" / "json_2.1.1"
#: The optional larger sample beside the clone (54 games); only the sweeps use it.
SHARED_JSON = REPO_ROOT.parent / "shared" / "alfworld" / "json_2.1.1"

#: One real game per task type (valid_unseen where its walkthrough uses raw PDDL ids, else valid_seen).
ONE_PER_TYPE: dict[str, str] = {
    "pick_and_place_simple": "valid_unseen/pick_and_place_simple-Mug-None-Desk-308",
    "look_at_obj_in_light": "valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308",
    "pick_clean_then_place_in_recep": "valid_unseen/pick_clean_then_place_in_recep-SoapBar-None-Cabinet-424",
    "pick_heat_then_place_in_recep": "valid_seen/pick_heat_then_place_in_recep-Apple-None-DiningTable-26",
    "pick_cool_then_place_in_recep": "valid_seen/pick_cool_then_place_in_recep-Cup-None-Microwave-17",
    "pick_two_obj_and_place": "valid_unseen/pick_two_obj_and_place-SoapBar-None-Cabinet-424",
}
SMALL_GAME = "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323"
OTHER_SMALL_GAME = "valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308"
#: Train-split games: no ``walkthrough`` key (ALFWorld's planner has to solve them).
TRAIN_GAMES: tuple[str, ...] = (
    "valid_train/pick_and_place_simple-AlarmClock-None-Desk-307",
    "valid_train/look_at_obj_in_light-Book-None-DeskLamp-302",
    "valid_train/pick_two_obj_and_place-Book-None-Desk-302",
)


def vendored_json() -> Path:
    """The vendored ``json_2.1.1`` folder; a clear failure (not a skip) when the checkout lacks it."""
    if not VENDORED_JSON.is_dir():
        pytest.fail(
            f"the vendored ALFWorld games are missing from {VENDORED_JSON}; restore tests/data/alfworld"
        )
    return VENDORED_JSON


def sweep_json() -> Path:
    """Where the sweeps over every game look: ``../shared`` when present (54 games), else the vendored 15."""
    return SHARED_JSON if SHARED_JSON.is_dir() else vendored_json()


def needs_alfworld() -> None:
    pytest.importorskip("textworld", reason="needs the alfworld extra: pip install 'tempo-rl[alfworld]'")
    pytest.importorskip("alfworld", reason="needs the alfworld extra: pip install 'tempo-rl[alfworld]'")


def copy_game(rel_task_dir: str, dest_root: Path) -> Path:
    """Copy the vendored ``<split>/<task-dir>`` (all trials) under ``dest_root/json_2.1.1``; return its
    game.tw-pddl."""
    src = vendored_json() / rel_task_dir
    if not src.is_dir():
        pytest.fail(f"{rel_task_dir} is not one of the vendored games in {VENDORED_JSON}")
    dst = dest_root / "json_2.1.1" / rel_task_dir
    if not dst.exists():
        shutil.copytree(src, dst)
        for p in dst.rglob("*"):
            p.chmod(0o644 if p.is_file() else 0o755)
        dst.chmod(0o755)
    return next(dst.rglob("game.tw-pddl"))
