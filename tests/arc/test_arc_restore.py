"""Restore of the ARC stub env: by verified replay and by native fork, both exact and independent."""

from __future__ import annotations

import random

import pytest

from tempo_rl.envs import ForkCache, ReplayDivergenceError, Snapshot, make, restore, restore_branches
from tempo_rl.envs.arc import ArcStubEnv
from tempo_rl.envs.recorder import RecordedEnv


def random_walk(env: RecordedEnv, rng: random.Random, steps: int) -> None:
    """Play ``steps`` actions: mostly admissible ones, some junk, stopping early if the episode ends."""
    for _ in range(steps):
        if env.done:
            return
        options = [*(env.last_observation.admissible_actions or ()), "ACTION6 0 0", "not an action"]
        env.step(rng.choice(options))


def continuation(env: RecordedEnv, actions: list[str]) -> list[tuple[str, float, bool, bool, str | None]]:
    out = []
    for action in actions:
        result = env.step(action)
        out.append(
            (
                result.observation.text,
                result.reward,
                result.terminated,
                result.truncated,
                env.state_fingerprint(),
            )
        )
    return out


@pytest.mark.parametrize("seed", range(6))
def test_replay_and_fork_restore_the_same_state(seed: int) -> None:
    rng = random.Random(seed)
    env = make("arc-stub", levels=2, max_steps=60)
    env.reset(seed)
    cache = ForkCache()
    random_walk(env, rng, rng.randrange(1, 25))
    snapshot = Snapshot.from_json(env.snapshot().to_json())  # through JSON, as the state store keeps it
    assert cache.put(env)

    replayed = restore(snapshot)  # fresh env, reset(seed), replay, every digest verified
    forked = restore(snapshot, cache=cache)  # native fork: a deep copy of the game object
    assert cache.stats.hits == 1
    for restored in (replayed, forked):
        assert restored.last_observation == env.last_observation
        assert restored.state_fingerprint() == env.state_fingerprint()
        assert restored.actions == env.actions

    tail = [
        rng.choice(["ACTION1", "ACTION2", "ACTION3", "ACTION4", "ACTION5", "ACTION7", "ACTION6 36 36"])
        for _ in range(8)
    ]
    if not env.done:
        expected = continuation(env, tail)
        assert continuation(replayed, tail) == expected
        assert continuation(forked, tail) == expected


def test_fork_is_independent() -> None:
    env = ArcStubEnv(scale=8)
    env.reset(3)
    env.step("ACTION1")
    before = (env.frame, env.state_fingerprint(), env.steps)
    clone = env.fork()
    assert clone.supports_fork and clone.state_fingerprint() == before[1]
    clone.step("ACTION6 28 20")  # wrong tile: removes it and costs a life in the clone only
    clone.step("ACTION3")
    assert (env.frame, env.state_fingerprint(), env.steps) == before
    assert clone.state_fingerprint() != before[1]


def test_restore_branches_forks_independent_copies() -> None:
    env = make("arc-stub", scale=8)
    env.reset(1)
    random_walk(env, random.Random(0), 5)
    snapshot = env.snapshot()
    branches = restore_branches(snapshot, 3)
    assert all(b.last_observation == env.last_observation for b in branches)
    branches[0].step("ACTION1")
    branches[0].step("ACTION1")
    assert branches[1].state_fingerprint() == branches[2].state_fingerprint() == env.state_fingerprint()


def test_tampered_snapshot_is_refused() -> None:
    env = make("arc-stub", scale=8)
    env.reset(2)
    for action in ("ACTION1", "ACTION4", "ACTION2"):
        env.step(action)
    data = env.snapshot().model_dump()
    data["actions"] = ("ACTION1", "ACTION3", "ACTION2")  # a different history than the recorded digests
    with pytest.raises(ReplayDivergenceError) as info:
        restore(Snapshot.model_validate(data))
    assert info.value.step == 2


def test_a_different_seed_is_refused() -> None:
    env = make("arc-stub", scale=8)
    env.reset(2)
    env.step("ACTION1")
    data = env.snapshot().model_dump()
    data["seed"] = 3
    with pytest.raises(ReplayDivergenceError):
        restore(Snapshot.model_validate(data))
