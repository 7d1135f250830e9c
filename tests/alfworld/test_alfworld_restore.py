"""Verified restore of ALFWorld states: fast branches, generic path, divergence detection, check-replay."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from tempo_rl.envs.recorder import RecordedEnv
from tempo_rl.envs.restore import ReplayDivergenceError, restore
from tempo_rl.envs.snapshot import EnvSpec, Snapshot, observation_digest


def _play(game: Path, depth: int, seed: int = 0, max_steps: int = 50) -> tuple[RecordedEnv, list[Snapshot]]:
    """Random non-help play; returns the (open) env and a snapshot at every depth 0..depth."""
    from tempo_rl.envs.alfworld.env import AlfworldEnv

    spec = EnvSpec(name="alfworld", kwargs={"game_file": str(game), "max_steps": max_steps})
    env = RecordedEnv(AlfworldEnv(str(game), max_steps=max_steps), spec)
    rng = random.Random(seed)
    obs = env.reset()
    snaps = [env.snapshot()]
    for i in range(depth):
        choices = [a for a in obs.admissible_actions if a != "help"]
        action = rng.choice(choices) if i % 5 else "Jump Around"  # some inadmissible steps too
        obs = env.step(action).observation
        snaps.append(env.snapshot())
    return env, snaps


@pytest.fixture()
def game_copy(small_game: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "g" / "game.tw-pddl"
    dst.parent.mkdir()
    shutil.copyfile(small_game, dst)
    shutil.copyfile(small_game.parent / "traj_data.json", dst.parent / "traj_data.json")
    return dst


def test_fast_branches_verify_at_several_depths_and_are_independent(game_copy: Path) -> None:
    from tempo_rl.envs.alfworld.branching import restore_branches

    env, snaps = _play(game_copy, 14)
    try:
        for depth in (0, 1, 6, 14):
            snap = snaps[depth]
            branches = restore_branches(snap, 2, verify=True)
            try:
                for b in branches:
                    assert b.last_observation.text == snap.last_observation
                    assert b.last_observation.admissible_actions == snap.last_admissible
                    assert b.round_index == depth and b.snapshot().id == snap.id
                    assert b.state_fingerprint() == snap.state_digests[-1]
                a, b = branches
                admissible = [x for x in a.last_observation.admissible_actions if x.startswith("go to")]
                a.step(admissible[0])
                assert b.state_fingerprint() == snap.state_digests[-1], "stepping one branch moved the other"
                # a restored branch continues exactly like the original did
                if depth < 14:
                    nxt = snaps[depth + 1]
                    r = b.step(nxt.actions[-1])
                    assert observation_digest(r.observation) == nxt.observation_digests[-1]
                    assert b.state_fingerprint() == nxt.state_digests[-1]
            finally:
                for br in branches:
                    br.close()
    finally:
        env.close()


def test_fast_restore_without_memo_replays_with_text(game_copy: Path) -> None:
    from tempo_rl.envs.alfworld.branching import restore_branches
    from tempo_rl.envs.alfworld.fast import operator_memo

    env, snaps = _play(game_copy, 8, seed=1)
    env.close()
    operator_memo().clear()  # as if the snapshot came from another process
    (branch,) = restore_branches(Snapshot.from_json(snaps[8].to_json()), 1)
    try:
        assert branch.last_observation.text == snaps[8].last_observation
        assert len(operator_memo()) >= 8  # the text replay refilled it
    finally:
        branch.close()


def test_generic_restore_works_through_the_registry(game_copy: Path) -> None:
    env, snaps = _play(game_copy, 5, seed=2)
    env.close()
    restored = restore(snaps[5], verify=True)
    try:
        assert restored.last_observation.text == snaps[5].last_observation
        assert restored.state_fingerprint() == snaps[5].state_digests[-1]
    finally:
        restored.close()


def test_swapped_game_file_is_detected(game_copy: Path, other_small_game: Path) -> None:
    from tempo_rl.envs.alfworld.branching import restore_branches

    env, snaps = _play(game_copy, 6, seed=3)
    env.close()
    shutil.copyfile(other_small_game, game_copy)  # another game under the same path
    with pytest.raises(ReplayDivergenceError) as fast_err:
        restore_branches(snaps[6], 2)
    assert fast_err.value.step == 0 and fast_err.value.kind in ("state", "observation")
    with pytest.raises(ReplayDivergenceError) as generic_err:
        restore(snaps[6], verify=True)
    assert generic_err.value.step == 0


def test_tampered_state_digest_names_the_step(game_copy: Path) -> None:
    from tempo_rl.envs.alfworld.branching import restore_branches

    env, snaps = _play(game_copy, 7, seed=4)
    env.close()
    snap = snaps[7]
    states = list(snap.state_digests or ())
    states[4] = "0" * 32
    bad = snap.model_copy(update={"state_digests": tuple(states)})
    with pytest.raises(ReplayDivergenceError) as err:
        restore_branches(bad, 1)
    assert err.value.step == 4 and err.value.kind == "state"
    first = list(snap.observation_digests)
    first[0] = "e" * 32
    with pytest.raises(ReplayDivergenceError) as err0:
        restore_branches(snap.model_copy(update={"observation_digests": tuple(first)}), 1)
    assert err0.value.step == 0 and err0.value.kind == "observation"
    digests = list(snap.observation_digests)
    digests[7] = "f" * 32
    with pytest.raises(ReplayDivergenceError) as err2:
        restore_branches(snap.model_copy(update={"observation_digests": tuple(digests)}), 1)
    assert err2.value.step == 7 and err2.value.kind == "observation"


def test_check_replay_passes_on_an_alfworld_game(game_copy: Path) -> None:
    from tempo_rl.envs.check import check_replay

    report = check_replay(
        EnvSpec(name="alfworld", kwargs={"game_file": str(game_copy)}),
        steps=12,
        trials=1,
        restores=2,
        continue_steps=2,
    )
    assert report.ok, report.divergences
    assert report.replay_restores >= 1
