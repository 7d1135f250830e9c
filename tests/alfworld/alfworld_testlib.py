"""Helpers shared by the ALFWorld adapter tests (constants and game copying)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
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
OTHER_SMALL_GAME = "valid_seen/look_at_obj_in_light-CD-None-DeskLamp-320"


def shared_or_skip() -> Path:
    if not SHARED_JSON.is_dir():
        pytest.skip(f"real ALFWorld games not found at {SHARED_JSON} (CI places ../shared beside the clone)")
    return SHARED_JSON


def needs_alfworld() -> None:
    pytest.importorskip("textworld", reason="needs the alfworld extra: pip install 'tempo-rl[alfworld]'")
    pytest.importorskip("alfworld", reason="needs the alfworld extra: pip install 'tempo-rl[alfworld]'")


def copy_game(rel_task_dir: str, dest_root: Path) -> Path:
    """Copy ``<split>/<task-dir>`` (all trials) under ``dest_root/json_2.1.1``; return its game.tw-pddl."""
    src = shared_or_skip() / rel_task_dir
    if not src.is_dir():
        pytest.skip(f"{src} is missing from the shared games")
    dst = dest_root / "json_2.1.1" / rel_task_dir
    if not dst.exists():
        shutil.copytree(src, dst)
        for p in dst.rglob("*"):
            p.chmod(0o644 if p.is_file() else 0o755)
        dst.chmod(0o755)
    return next(dst.rglob("game.tw-pddl"))
