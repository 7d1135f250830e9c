"""Crossings: rules pinned on a hand-played trail, the slow way's exact cost, the critic-only note, the oracle
against breadth-first search, seeded determinism and no leaks into the actor's text."""

from __future__ import annotations

import itertools
import random
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.envs import check_replay, make
from tempo_rl.envs.crossings import Crossing, CrossingsEnv


def _seed0() -> CrossingsEnv:
    """T = 16: slack 3, 13 rooms, 2 rivers, detour 2. Seed 0: a river in room 2 (bridge quick, shown ford
    first) and in room 6 (ford quick)."""
    env = CrossingsEnv(horizon=16, state_note=True)
    env.reset(0)
    assert (env.rooms, env.crossings, env.detour) == (13, 2, 2)
    assert env.layout() == (
        Crossing(1, "bridge", ("ford", "bridge")),
        Crossing(5, "ford", ("bridge", "ford")),
    )
    return env


def test_pinned_walk_with_one_slow_way() -> None:
    env = _seed0()
    r = env.step("go on")
    assert (
        r.observation.text == "You go on. Room 2 of 13. A river. Ways across: ford, bridge. Steps left: 15."
    )
    assert r.observation.admissible_actions == ("take ford", "take bridge")
    assert r.observation.privileged_state == "Spare steps: 3. Rivers ahead: 2."
    r = env.step("take ford")  # the slow way: 2 extra steps along the bank
    assert r.observation.text == (
        "The ford is a long way round. Room 2 of 13. A river bank. Steps to the far side: 2. Steps left: 14."
    )
    assert r.observation.admissible_actions == ("go on",)
    assert r.observation.privileged_state == "Spare steps: 1. Rivers ahead: 1."
    assert env.step("go on").observation.text.startswith("You walk the bank. Room 2 of 13.")
    r = env.step("go on")
    assert r.observation.text == "You reach the far side. Room 3 of 13. A trail. Steps left: 12."
    assert r.observation.privileged_state == "Spare steps: 1. Rivers ahead: 1."
    for _ in range(3):
        env.step("go on")
    r = env.step("take ford")  # the quick way in room 6
    assert r.observation.text == "You cross by the ford. Room 7 of 13. A trail. Steps left: 8."
    for _ in range(6):
        r = env.step("go on")
    assert r.observation.text == "You go on. Room 13 of 13. The camp is ahead. Steps left: 2."
    r = env.step("go on")
    assert r.terminated and not r.truncated and r.reward == 1.0 and r.info == {"won": True}
    assert (
        r.observation.text == "You reach the camp. You win. Room 13 of 13. The camp is ahead. Steps left: 1."
    )
    assert r.observation.admissible_actions is None and r.observation.privileged_state is None
    after = env.step("go on")
    assert after.observation.text.startswith("The episode is over.") and after.reward == 0.0


def test_two_slow_ways_lose_silently_at_the_step_limit() -> None:
    env = _seed0()
    env.step("go on")
    assert env.step("take ford").observation.privileged_state == "Spare steps: 1. Rivers ahead: 1."
    env.step("go on")
    env.step("go on")
    for _ in range(3):
        env.step("go on")
    r = env.step("take bridge")  # slow in room 6: 2 more steps than the 1 spare
    assert r.observation.privileged_state == "The camp is out of reach."
    assert "out of reach" not in r.observation.text and "lose" not in r.observation.text.lower()
    while not r.done:
        r = env.step("go on")
    assert r.truncated and not r.terminated and r.reward == 0.0
    assert env.expert_action() is None


def test_refusals_cost_a_step() -> None:
    env = _seed0()
    assert env.step("take bridge").observation.text.startswith("Nothing happens. Room 1 of 13.")
    env.step("go on")
    assert env.step("go on").observation.text.startswith("The river blocks the way. Room 2 of 13.")
    assert env.step("  TAKE   Bridge ").observation.text.startswith("You cross by the bridge. Room 3 of 13.")
    assert env.spare_steps() == 1  # 2 refused steps of the 3 spare


@pytest.mark.parametrize("horizon", [12, 16, 24, 48, 100])
def test_walkthrough_wins_on_every_layout_and_fits_the_slack(horizon: int) -> None:
    for seed in range(30):
        env = CrossingsEnv(horizon=horizon, quick="random")
        env.reset(seed)
        plan = env.walkthrough() or ()
        assert len(plan) == env.rooms == horizon - max(3, horizon // 8)
        rooms = [c.room for c in env.layout()]
        assert len(rooms) == env.crossings and rooms[0] > 0 and rooms[-1] < env.rooms - 1
        assert all(b - a >= 2 for a, b in itertools.pairwise(rooms))  # never side by side
        for action in plan:
            assert env.expert_action() == action
            result = env.step(action)
        assert result.terminated and result.reward == 1.0


def test_a_fixed_quick_way_changes_nothing_else_and_random_draws_both() -> None:
    for seed in range(20):
        drawn, fixed = CrossingsEnv(48), CrossingsEnv(48, quick="bridge")
        drawn.reset(seed)
        fixed.reset(seed)
        assert [(c.room, c.shown) for c in drawn.layout()] == [(c.room, c.shown) for c in fixed.layout()]
        assert {c.quick for c in fixed.layout()} == {"bridge"}
    quick = []
    for seed in range(50):
        env = CrossingsEnv(48)
        env.reset(seed)
        quick += [c.quick for c in env.layout()]
    assert 0.35 < quick.count("bridge") / len(quick) < 0.65


def test_random_ways_win_about_five_in_sixteen_and_the_rule_always() -> None:
    """T = 48: 4 rivers, detour 4, 6 spare steps: a coin toss at each river wins when at most one of the four
    is slow, 5/16 of the time."""
    wins = 0
    for seed in range(800):
        env, rng = CrossingsEnv(48, quick="bridge"), random.Random(seed)
        obs = env.reset(seed)
        while not env._done:
            actions = obs.admissible_actions or ()
            obs = env.step(rng.choice(actions)).observation
        wins += env._won
    assert abs(wins / 800 - 5 / 16) < 0.05


def test_observations_leak_nothing_and_the_note_is_off_by_default() -> None:
    env = CrossingsEnv(48)
    obs = env.reset(7)
    texts = [obs.text]
    while not env._done:
        result = env.step(env.expert_action() or "go on")
        texts.append(result.observation.text)
        assert result.observation.privileged_state is None
    assert all("quick" not in t and "detour" not in t and len(t.split()) < 30 for t in texts)
    assert "quick" in (env.privileged_info() or "")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"horizon": 11}, "horizon must be an int in 12..200"),
        ({"horizon": True}, "horizon must be an int"),
        ({"horizon": 16, "crossings": 6}, "crossings must be an int in 1..5 for horizon 16"),
        ({"crossings": 0}, "crossings must be an int in 1.."),
        ({"detour": 0}, "detour must be an int >= 1"),
        ({"quick": "boat"}, "quick must be 'random', 'bridge' or 'ford'"),
        ({"state_note": "yes"}, "state_note must be true or false"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CrossingsEnv(**kwargs)  # type: ignore[arg-type]


def _bfs_win_steps(env: CrossingsEnv, limit: int) -> int | None:
    """Fewest steps to a win by breadth-first search over forks, the step limit lifted."""
    root = env.fork()
    root.horizon = 400
    frontier = deque([(root, 0)])
    seen = {(root._room, root._bank)}
    while frontier:
        node, depth = frontier.popleft()
        if depth >= limit or node._done:
            continue
        for action in ("go on", "take bridge", "take ford"):
            child = node.fork()
            if child.step(action).reward > 0:
                return depth + 1
            if (child._room, child._bank) not in seen:
                seen.add((child._room, child._bank))
                frontier.append((child, depth + 1))
    return None


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 50), moves=st.lists(st.integers(0, 3), max_size=14), steps_left=st.integers(0, 20))
def test_oracle_matches_breadth_first_search(seed: int, moves: list[int], steps_left: int) -> None:
    env = CrossingsEnv(horizon=16, detour=3)
    env.reset(seed)
    for m in moves:
        if env._done:
            break
        env.step(("go on", "take bridge", "take ford", "wait")[m])
    expected = None if env._done else _bfs_win_steps(env, 60)
    assert env.shortest_exit_steps() == expected
    before = env.state_fingerprint()
    budget = min(steps_left, env.horizon - env._steps)
    assert env.oracle_value(steps_left) == (1.0 if expected is not None and expected <= budget else 0.0)
    assert env.state_fingerprint() == before


def test_registered_restores_by_replay_and_forks_independently() -> None:
    report = check_replay("crossings:horizon=24,quick=bridge", steps=24, trials=3)
    assert report.ok, report
    assert type(make("crossings").env).__name__ == "CrossingsEnv"
    env = CrossingsEnv(24)
    env.reset(2)
    env.step("go on")
    copy = env.fork()
    copy.step("take ford")
    assert copy.state_fingerprint() != env.state_fingerprint()
    assert env.reset(2) == CrossingsEnv(24).reset(2)
