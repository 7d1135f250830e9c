"""Offline game generator: all six task types, truthful solvability, determinism, env + restore on them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from alfworld_testlib import needs_alfworld

from tempo_rl.envs.alfworld.data import TASK_TYPES, discover_games


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    needs_alfworld()
    from tempo_rl.envs.alfworld.generator import generate_games

    out = tmp_path_factory.mktemp("generated")
    return out, generate_games(out, per_type=1, seed=11)


def test_all_six_task_types_are_generated_solvable_and_discoverable(generated: tuple[Path, list]) -> None:
    out, games = generated
    assert sorted(g.task_type for g in games) == sorted(TASK_TYPES)
    found = discover_games(out)
    assert found.counts() == {"train": dict.fromkeys(TASK_TYPES, 1)}
    for g in games:
        data = json.loads(g.game_file.read_text())
        assert data["solvable"] is True and g.solvable
        assert data["walkthrough"] == list(g.walkthrough) and g.walkthrough
        assert "UNKNOWN GOAL" not in data["grammar"]
        assert f"Your task is to: {g.task}" in data["grammar"]
        traj = json.loads((g.game_file.parent / "traj_data.json").read_text())
        assert traj["task_type"] == g.task_type
        assert traj["pddl_params"]["object_target"].lower() in g.task


def test_walkthroughs_win_in_the_env_and_restore_verifies(generated: tuple[Path, list]) -> None:
    from tempo_rl.envs.alfworld.branching import restore_branches
    from tempo_rl.envs.alfworld.env import AlfworldEnv
    from tempo_rl.envs.recorder import RecordedEnv
    from tempo_rl.envs.snapshot import EnvSpec

    _, games = generated
    for g in games:
        spec = EnvSpec(name="alfworld", kwargs={"game_file": str(g.game_file)})
        env = RecordedEnv(AlfworldEnv(g.game_file), spec)
        try:
            obs = env.reset()
            assert obs.info["task"] == g.task
            assert env.walkthrough() == g.walkthrough
            for command in g.walkthrough[:-1]:
                assert command in obs.admissible_actions
                obs = env.step(command).observation
            snap = env.snapshot()
            last = env.step(g.walkthrough[-1])
            assert last.terminated and last.reward == 1.0
        finally:
            env.close()
        (branch,) = restore_branches(snap, 1)
        try:
            assert branch.last_observation.text == snap.last_observation
            assert branch.step(g.walkthrough[-1]).terminated
        finally:
            branch.close()


def test_generation_is_deterministic_per_seed(tmp_path: Path) -> None:
    needs_alfworld()
    from tempo_rl.envs.alfworld.generator import generate_game

    a = generate_game("pick_and_place_simple", 5, tmp_path / "a")
    b = generate_game("pick_and_place_simple", 5, tmp_path / "b")
    c = generate_game("pick_and_place_simple", 6, tmp_path / "c")
    digest = [hashlib.sha256(g.game_file.read_bytes()).hexdigest() for g in (a, b, c)]
    assert digest[0] == digest[1] != digest[2]


def test_task_sentence_and_bad_input() -> None:
    from tempo_rl.envs.alfworld.generator import generate_game, task_sentence

    assert task_sentence("pick_two_obj_and_place", "CreditCard", "Safe") == "put two creditcard in safe."
    assert task_sentence("look_at_obj_in_light", "Book", variant=1) == "examine the book with the desklamp."
    with pytest.raises(ValueError, match="unknown task type"):
        task_sentence("pick_and_eat", "Apple")
    with pytest.raises(ValueError, match="unknown task type"):
        generate_game("pick_and_eat", 0, "/nonexistent")
    with pytest.raises(ValueError, match="seed"):
        generate_game("pick_and_place_simple", -1, "/nonexistent")


def test_an_unsolvable_game_is_marked_so(tmp_path: Path) -> None:
    """Without canContain(parent, target) no plan exists: solvable stays false and discovery skips the game.

    (Fast Downward proves this goal statically unreachable, so TextWorld cannot even load the game: the env
    raises an error naming the file, and the generator reports it unsolvable.)"""
    needs_alfworld()
    from tempo_rl.envs.alfworld.data import AlfworldDataError
    from tempo_rl.envs.alfworld.env import AlfworldEnv
    from tempo_rl.envs.alfworld.generator import _plan_and_verify, generate_game

    g = generate_game("pick_and_place_simple", 3, tmp_path)
    data = json.loads(g.game_file.read_text())
    pair = f"(canContain {g.pddl_params['parent_target']}Type {g.pddl_params['object_target']}Type)"
    assert pair in data["pddl_problem"]
    data["pddl_problem"] = data["pddl_problem"].replace(pair, "")
    g.game_file.write_text(json.dumps(data))
    walkthrough, won = _plan_and_verify(g.game_file)
    assert walkthrough == () and won is False
    with pytest.raises(AlfworldDataError, match="unsolvable"):
        AlfworldEnv(g.game_file)
    data["solvable"], data["walkthrough"] = won, list(walkthrough)
    g.game_file.write_text(json.dumps(data))
    other = generate_game("look_at_obj_in_light", 3, tmp_path)
    found = discover_games(tmp_path)
    assert [x.game_file for x in found.games] == [other.game_file]
    assert found.skipped == {"unsolvable": 1}


def test_a_game_that_cannot_load_names_its_file(tmp_path: Path) -> None:
    needs_alfworld()
    from tempo_rl.envs.alfworld.data import AlfworldDataError
    from tempo_rl.envs.alfworld.env import AlfworldEnv
    from tempo_rl.envs.alfworld.generator import generate_game

    g = generate_game("pick_and_place_simple", 4, tmp_path)
    data = json.loads(g.game_file.read_text())
    data["pddl_problem"] = data["pddl_problem"].replace(
        "(:goal", "(:goal (and (objectType ?o NopeType))) (:x"
    )
    g.game_file.write_text(json.dumps(data))
    with pytest.raises(AlfworldDataError, match=r"cannot load ALFWorld game .*game\.tw-pddl"):
        AlfworldEnv(g.game_file)
