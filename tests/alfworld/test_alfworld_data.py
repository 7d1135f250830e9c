"""Discovery of ALFWorld games on disk: layout, filters, skips, ids, shuffling (no TextWorld needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alfworld_testlib import TRAIN_GAMES, vendored_json
from hypothesis import given
from hypothesis import strategies as st

from tempo_rl.envs.alfworld.data import (
    TASK_TYPES,
    AlfworldDataError,
    GameRecord,
    count_by_split_and_type,
    default_data_root,
    discover_games,
    read_game_file,
    resolve_split_dirs,
    shuffle_games,
    take_batch,
)


def _write_game(
    root: Path,
    split: str,
    task_dir: str,
    trial: str = "trial_T1",
    *,
    task_type: str | None = None,
    solvable: bool = True,
    walkthrough: list[str] | None = None,
    corrupt: bool = False,
    traj: bool = True,
) -> Path:
    d = root / "json_2.1.1" / split / task_dir / trial
    d.mkdir(parents=True)
    game = {
        "pddl_domain": "(define (domain d))",
        "grammar": "g",
        "pddl_problem": "(define (problem p))",
        "solvable": solvable,
    }
    if walkthrough is not None:
        game["walkthrough"] = walkthrough
    (d / "game.tw-pddl").write_text("{not json" if corrupt else json.dumps(game))
    if traj:
        tt = task_type or task_dir.split("-")[0]
        (d / "traj_data.json").write_text(
            json.dumps({"task_type": tt, "pddl_params": {"object_target": "Mug"}})
        )
    return d / "game.tw-pddl"


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    _write_game(tmp_path, "valid_seen", "pick_and_place_simple-Mug-None-Desk-1", walkthrough=["go to desk 1"])
    _write_game(tmp_path, "valid_seen", "look_at_obj_in_light-Box-None-DeskLamp-2")
    _write_game(tmp_path, "valid_seen", "pick_two_obj_and_place-Pen-None-Desk-3", solvable=False)
    _write_game(tmp_path, "valid_seen", "pick_heat_then_place_in_recep-Apple-None-Fridge-4", corrupt=True)
    _write_game(tmp_path, "valid_seen", "pick_and_place_simple-Mug-None-Desk-5", traj=False)
    _write_game(tmp_path, "valid_unseen", "pick_cool_then_place_in_recep-AppleSliced-None-Fridge-6")
    _write_game(tmp_path, "valid_unseen", "pick_and_place_with_movable_recep-Pen-Bowl-Desk-7")
    _write_game(
        tmp_path, "valid_unseen", "pick_clean_then_place_in_recep-Cloth-None-Drawer-8", trial="trial_B"
    )
    _write_game(
        tmp_path, "valid_unseen", "pick_clean_then_place_in_recep-Cloth-None-Drawer-8", trial="trial_A"
    )
    _write_game(tmp_path, "train", "pick_and_place_simple-Odd-None-Desk-9", task_type="not_a_task_type")
    return tmp_path


def test_discovery_keeps_playable_games_and_counts_every_skip(tree: Path) -> None:
    found = discover_games(tree)
    assert [g.id for g in found.games] == [
        "valid_seen:look_at_obj_in_light-Box-None-DeskLamp-2/trial_T1",
        "valid_seen:pick_and_place_simple-Mug-None-Desk-1/trial_T1",
        "valid_unseen:pick_clean_then_place_in_recep-Cloth-None-Drawer-8/trial_A",
        "valid_unseen:pick_clean_then_place_in_recep-Cloth-None-Drawer-8/trial_B",
    ]
    assert found.skipped == {
        "unsolvable": 1,
        "corrupt": 1,
        "missing_traj_data": 1,
        "movable_or_sliced": 2,
        "task_type": 1,
    }
    assert any("Apple-None-Fridge-4" in f for f in found.skipped_files["corrupt"])
    by_id = {g.id: g for g in found.games}
    simple = by_id["valid_seen:pick_and_place_simple-Mug-None-Desk-1/trial_T1"]
    assert simple.has_walkthrough and simple.task_type == "pick_and_place_simple"
    assert simple.pddl_params == {"object_target": "Mug"}
    assert not by_id["valid_seen:look_at_obj_in_light-Box-None-DeskLamp-2/trial_T1"].has_walkthrough
    assert found.counts()["valid_unseen"]["pick_clean_then_place_in_recep"] == 2
    assert found.counts()["valid_seen"] == {
        **dict.fromkeys(TASK_TYPES, 0),
        "pick_and_place_simple": 1,
        "look_at_obj_in_light": 1,
    }


def test_root_json_folder_and_split_folder_give_the_same_ids(tree: Path) -> None:
    a = [g.id for g in discover_games(tree, "valid_unseen").games]
    b = [g.id for g in discover_games(tree / "json_2.1.1", "valid_unseen").games]
    c = [g.id for g in discover_games(tree / "json_2.1.1" / "valid_unseen").games]
    assert a == b == c and len(a) == 2
    with pytest.raises(AlfworldDataError, match="valid_unseen"):
        discover_games(tree / "json_2.1.1" / "valid_unseen", "valid_seen")


def test_task_type_filter_and_unknown_type(tree: Path) -> None:
    found = discover_games(tree, task_types=["look_at_obj_in_light"])
    assert [g.task_type for g in found.games] == ["look_at_obj_in_light"]
    with pytest.raises(AlfworldDataError, match="unknown task type"):
        discover_games(tree, task_types=["pick_and_eat"])


def test_strict_mode_names_the_corrupt_file(tree: Path) -> None:
    with pytest.raises(AlfworldDataError, match=r"Apple-None-Fridge-4.*game\.tw-pddl.*not valid JSON"):
        discover_games(tree, "valid_seen", strict=True)


def test_missing_and_empty_data_dirs_explain_the_fix(tmp_path: Path) -> None:
    with pytest.raises(AlfworldDataError, match=r"does not exist.*tempo-rl data alfworld.*ALFWORLD_DATA"):
        discover_games(tmp_path / "nope")
    with pytest.raises(AlfworldDataError, match=r"no ALFWorld data.*json_2.1.1"):
        discover_games(tmp_path)
    (tmp_path / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    with pytest.raises(AlfworldDataError, match="no playable ALFWorld game"):
        discover_games(tmp_path)
    with pytest.raises(AlfworldDataError, match="unknown split"):
        resolve_split_dirs(tmp_path, ["test"])


def test_read_game_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "game.tw-pddl"
    bad.write_text(json.dumps({"pddl_domain": "d", "grammar": "g"}))
    with pytest.raises(AlfworldDataError, match=r"game\.tw-pddl.*pddl_problem"):
        read_game_file(bad)
    bad.write_text(json.dumps({"pddl_domain": "d", "grammar": "g", "pddl_problem": "p", "walkthrough": "x"}))
    with pytest.raises(AlfworldDataError, match="walkthrough"):
        read_game_file(bad)
    with pytest.raises(AlfworldDataError, match="does not exist"):
        read_game_file(tmp_path / "missing.tw-pddl")


def test_default_root_respects_alfworld_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    assert default_data_root() == tmp_path
    monkeypatch.delenv("ALFWORLD_DATA")
    assert default_data_root() == Path("~/.cache/alfworld").expanduser()


def test_vendored_games_counts() -> None:
    """The vendored real games: one per task type in valid_seen and in valid_unseen, three train games."""
    found = discover_games(vendored_json())
    counts = found.counts()
    assert counts["valid_seen"] == dict.fromkeys(TASK_TYPES, 1)
    assert counts["valid_unseen"] == dict.fromkeys(TASK_TYPES, 1)
    assert sum(counts["valid_train"].values()) == len(TRAIN_GAMES) == 3
    assert not found.skipped
    assert all(g.has_walkthrough for g in found.games if g.split != "valid_train")
    assert not any(g.has_walkthrough for g in found.games if g.split == "valid_train")
    assert all(g.pddl_params.get("object_target") for g in found.games)  # trimmed traj_data keeps the goal


def _records(n: int) -> list[GameRecord]:
    return [
        GameRecord(
            id=f"s:{i}",
            split="s",
            task_type=TASK_TYPES[i % 6],
            game_file=Path(f"/g{i}"),
            traj_file=Path(f"/t{i}"),
            has_walkthrough=True,
        )
        for i in range(n)
    ]


@given(st.integers(1, 30), st.integers(0, 2**31 - 1))
def test_shuffle_is_a_seeded_permutation(n: int, seed: int) -> None:
    games = _records(n)
    a, b = shuffle_games(games, seed), shuffle_games(games, seed)
    assert a == b and sorted(g.id for g in a) == sorted(g.id for g in games)
    assert [g.id for g in games] == [f"s:{i}" for i in range(n)]  # input untouched


@given(st.integers(1, 12), st.integers(0, 50), st.integers(1, 40))
def test_take_batch_cycles(n: int, start: int, size: int) -> None:
    games = _records(n)
    batch = take_batch(games, start, size)
    assert len(batch) == size
    assert [g.id for g in batch] == [f"s:{(start + i) % n}" for i in range(size)]


def test_take_batch_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one game"):
        take_batch([], 0, 1)
    with pytest.raises(ValueError, match="size >= 1"):
        take_batch(_records(2), 0, 0)


def test_count_by_split_and_type_lists_all_six_types() -> None:
    counts = count_by_split_and_type(_records(8))
    assert counts == {"s": {t: (2 if i < 2 else 1) for i, t in enumerate(TASK_TYPES)}}


def test_importing_the_adapter_imports_no_heavy_dependency() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tempo_rl.envs, tempo_rl.envs.alfworld, tempo_rl.envs.alfworld.env, "
        "tempo_rl.envs.alfworld.branching, tempo_rl.envs.alfworld.generator, tempo_rl.envs.alfworld.planning, "
        "tempo_rl.critic.privileged, tempo_rl.cli.data; "
        "heavy = ('textworld', 'alfworld', 'fast_downward', 'gymnasium', 'torch'); "
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
