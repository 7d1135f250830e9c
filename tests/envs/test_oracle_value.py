"""``ReplayableEnv.oracle_value``: exact optimal values of keydoor, knights and arc-stub states, pinned on
hand-worked states, and checked against a brute-force breadth-first search over forks."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.envs import make
from tempo_rl.envs.arc.stub import ArcStubEnv
from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult
from tempo_rl.envs.keydoor import KeyDoorEnv
from tempo_rl.envs.knights import KnightsEnv
from tempo_rl.envs.recorder import RecordedEnv


def _play(env: ReplayableEnv, actions: list[str]) -> None:
    for action in actions:
        env.step(action)


# ---------------------------------------------------------------------------------------------- contract


class _Plain(ReplayableEnv):
    def reset(self, seed: int | None = None) -> Observation:
        return Observation("start")

    def step(self, action: str) -> StepResult:
        return StepResult(Observation("same"))


def test_default_is_unknown_and_recorded_env_forwards() -> None:
    assert _Plain().oracle_value(3) is None
    recorded = make("keydoor", horizon=16, keys=1, colours=2, clue_gap=0)
    assert isinstance(recorded, RecordedEnv)
    recorded.reset(seed=0)
    assert recorded.oracle_value(16) == 1.0
    assert recorded.oracle_value(12) == 0.0


@pytest.mark.parametrize("bad", [-1, 1.5, None, True, "3"])
def test_steps_left_must_be_a_non_negative_int(bad: object) -> None:
    env = KeyDoorEnv(horizon=16, keys=1, colours=2)
    env.reset(0)
    with pytest.raises(ValueError, match="steps_left"):
        env.oracle_value(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="steps_left"):
        _Plain().oracle_value(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- keydoor


def _keydoor_one_key() -> KeyDoorEnv:
    """Seed 0: room 1 clue(red), 2 key (blue, red), 3-9 empty, 10 lock(red), 11 exit; the walkthrough is 13
    steps (10 'go on' to the exit room, one through it, one take, one open)."""
    env = KeyDoorEnv(horizon=16, keys=1, colours=2, clue_gap=0)
    env.reset(0)
    assert [r.kind for r in env.layout()] == ["clue", "key"] + ["plain"] * 7 + ["lock", "exit"]
    assert env.layout()[1].colour == "red"
    return env


def test_keydoor_reset_needs_the_walkthrough_length() -> None:
    env = _keydoor_one_key()
    assert env.shortest_exit_steps() == 13 == len(env.walkthrough() or ())
    assert env.oracle_value(16) == 1.0
    assert env.oracle_value(13) == 1.0
    assert env.oracle_value(12) == 0.0  # not enough steps to reach the exit
    assert env.oracle_value(0) == 0.0


def test_keydoor_right_key_wrong_key_and_the_env_limit() -> None:
    right = _keydoor_one_key()
    _play(right, ["go on", "take red"])
    # room 2 -> 11: 9 'go on', 1 through the exit, 1 'open door'
    assert right.shortest_exit_steps() == 11
    assert right.oracle_value(14) == 1.0 and right.oracle_value(11) == 1.0
    assert right.oracle_value(10) == 0.0

    wrong = _keydoor_one_key()
    _play(wrong, ["go on", "take blue"])
    assert wrong.shortest_exit_steps() is None
    assert wrong.oracle_value(14) == 0.0

    wasted = _keydoor_one_key()
    _play(wasted, ["wait"] * 4)  # 4 steps used: the env's own limit leaves 12 < 13
    assert wasted.oracle_value(100) == 0.0


def test_keydoor_a_wrong_key_can_open_a_later_lock() -> None:
    """Seed 0, two keys: locks need blue then red. Taking red at the first key room is wrong for lock 1 but
    opens lock 2; the second key room can still supply blue, so the exit stays reachable (the expert plan,
    which insists on each lock's own key room, calls it lost)."""
    env = KeyDoorEnv(horizon=24, keys=2, colours=2, clue_gap=0, lock_gap=0)
    env.reset(0)
    kinds = [(r.kind, r.colour) for r in env.layout()]
    assert kinds[9] == ("lock", "blue") and kinds[12] == ("lock", "red") and kinds[16] == ("exit", "")
    _play(env, ["go on", "take red"])
    assert env.expert_action() is None  # the old plan gives up
    # p = q = 1 (key room 9 is ahead): 15 'go on' to room 17, 1 through, 1 take, 2 opens
    assert env.shortest_exit_steps() == 19
    assert env.oracle_value(22) == 1.0 and env.oracle_value(19) == 1.0 and env.oracle_value(18) == 0.0
    _play(env, ["go on"] * 7 + ["take red"])  # both keys red: lock 1 (blue) can never open
    assert env.oracle_value(14) == 0.0


def test_keydoor_skipped_key_costs_the_walk_back() -> None:
    env = KeyDoorEnv(horizon=24, keys=2, colours=2, clue_gap=0, lock_gap=0)
    env.reset(0)
    _play(env, ["go on", "go on"])  # at room 3, key room 2 skipped
    # back 1 to room 2, then 15 'go on' to room 17, 1 through, 2 takes, 2 opens
    assert env.shortest_exit_steps() == 21
    assert env.oracle_value(22) == 1.0 and env.oracle_value(21) == 1.0 and env.oracle_value(20) == 0.0


def test_keydoor_over_is_worth_zero() -> None:
    env = _keydoor_one_key()
    _play(env, list(env.walkthrough() or ()))
    assert env._won
    assert env.oracle_value(10) == 0.0


def _key(env: KeyDoorEnv) -> tuple[object, ...]:
    return (env._room, tuple(sorted(env._carried)), tuple(env._taken), tuple(env._opened), env._done)


def _bfs_exit_steps(env: KeyDoorEnv, limit: int) -> int | None:
    """Fewest steps to a win by breadth-first search over forks (state = everything but the step count); the
    forks' step limit is lifted (the layout is already drawn), so the search measures distance alone."""
    root = env.fork()
    root.horizon = 200
    frontier = deque([(root, 0)])
    seen = {_key(env)}
    while frontier:
        node, depth = frontier.popleft()
        if depth >= limit or node._done:
            continue
        for action in (*node._admissible(), "go back"):
            child = node.fork()
            result = child.step(action)
            if result.reward > 0:
                return depth + 1
            if _key(child) not in seen:
                seen.add(_key(child))
                frontier.append((child, depth + 1))
    return None


@settings(max_examples=40)
@given(
    seed=st.integers(0, 50),
    keys=st.integers(1, 2),
    colours=st.integers(2, 3),
    moves=st.lists(st.integers(0, 4), max_size=8),
)
def test_keydoor_oracle_matches_breadth_first_search(
    seed: int, keys: int, colours: int, moves: list[int]
) -> None:
    env = KeyDoorEnv(horizon=20, keys=keys, colours=colours)
    env.reset(seed)
    for m in moves:
        actions = (*env._admissible(), "go back")
        if env._done:
            break
        env.step(actions[m % len(actions)])
    expected = None if env._done else _bfs_exit_steps(env, 40)
    assert env.shortest_exit_steps() == expected
    budget = env.horizon - env._steps
    assert env.oracle_value(100) == (1.0 if expected is not None and expected <= budget else 0.0)


# ---------------------------------------------------------------------------------------------- knights


def _knights() -> KnightsEnv:
    """4x4, fixed b2 (which attacks a4, c4, d3, d1), 2 pieces to place, 6 steps, verdict only when full."""
    env = KnightsEnv(size=4, preplaced=1, place=2, max_steps=6, feedback="final")
    env.reset(0)
    assert env._fixed == {(1, 1)}
    return env


def test_knights_reset_needs_two_placements() -> None:
    env = _knights()
    assert env.shortest_solve_steps() == 2
    assert env.oracle_value(6) == 1.0 and env.oracle_value(2) == 1.0 and env.oracle_value(1) == 0.0


def test_knights_keeps_the_good_piece_and_swaps_the_bad_one() -> None:
    env = _knights()
    _play(env, ["place d1", "place a1"])  # d1 conflicts with b2; a1 is fine
    assert not env._done
    # keep a1: remove d1, place one more (e.g. d2) = 2 steps
    assert env.shortest_solve_steps() == 2
    assert env.oracle_value(4) == 1.0 and env.oracle_value(2) == 1.0 and env.oracle_value(1) == 0.0


def test_knights_both_pieces_bad_needs_four_steps_and_the_limit_counts() -> None:
    env = _knights()
    _play(env, ["place d1", "place d3"])  # both attack b2 (not each other)
    assert env.shortest_solve_steps() == 4  # 2 removals + 2 placements
    assert env.oracle_value(4) == 1.0 and env.oracle_value(3) == 0.0
    env.step("nonsense")  # 3 steps used: the env's 6-step limit leaves 3 < 4
    assert env.oracle_value(10) == 0.0


def test_knights_solved_is_worth_zero() -> None:
    env = _knights()
    _play(env, list(env.walkthrough() or ()))
    assert env._won and env.oracle_value(6) == 0.0


# ---------------------------------------------------------------------------------------------- arc-stub


def test_arc_stub_one_level_per_step() -> None:
    env = ArcStubEnv(levels=2, scale=8, max_steps=30)
    env.reset(3)
    assert env.oracle_value(30) == 1.0
    assert env.oracle_value(1) == 0.5  # one click completes one level
    assert env.oracle_value(0) == 0.0
    first, _second = env.walkthrough() or ()
    env.step(first)
    assert env.game.level_index == 1
    assert env.oracle_value(29) == 0.5


def test_arc_stub_wrong_tiles_game_over_and_the_step_limit() -> None:
    env = ArcStubEnv(levels=2, scale=8, max_steps=30, lives=2)
    env.reset(3)
    key = env.game.level.key_cell()
    wrong = [cell for cell in sorted(env.game.tiles) if cell != key]
    env.step(f"ACTION6 {wrong[0][1] * 8 + 4} {wrong[0][0] * 8 + 4}")
    assert env.game.lives == 1
    assert env.oracle_value(29) == 1.0  # a life lost costs nothing if the key tile is clicked next
    env.step(f"ACTION6 {wrong[1][1] * 8 + 4} {wrong[1][0] * 8 + 4}")
    assert env.game.levels_left() == 0 and env.oracle_value(28) == 0.0  # GAME_OVER

    late = ArcStubEnv(levels=2, scale=8, max_steps=30)
    late.reset(3)
    _play(late, ["ACTION7"] * 29)  # one step left before the env's limit
    assert late.oracle_value(5) == 0.5


def _bfs_solve_steps(env: KnightsEnv, limit: int) -> int | None:
    """Fewest steps to a solved board by breadth-first search over forks (state = the placed set)."""
    root = env.fork()
    root.max_steps = 10_000  # lift the step limit: the search measures distance alone
    frontier = deque([(root, 0)])
    seen = {frozenset(root._placed)}
    while frontier:
        node, depth = frontier.popleft()
        if depth >= limit or node._done:
            continue
        for action in node._admissible():
            child = node.fork()
            if child.step(action).reward > 0:
                return depth + 1
            key = frozenset(child._placed)
            if key not in seen:
                seen.add(key)
                frontier.append((child, depth + 1))
    return None


@settings(max_examples=25)
@given(
    seed=st.integers(0, 30),
    place=st.integers(1, 3),
    feedback=st.sampled_from(["immediate", "final"]),
    moves=st.lists(st.integers(0, 200), max_size=5),
)
def test_knights_oracle_matches_breadth_first_search(
    seed: int, place: int, feedback: str, moves: list[int]
) -> None:
    env = KnightsEnv(size=4, preplaced=1, place=place, max_steps=4 * place + 5, feedback=feedback)  # type: ignore[arg-type]
    env.reset(seed)
    for m in moves:
        if env._done:
            break
        actions = env._admissible()
        env.step(actions[m % len(actions)])
    expected = None if env._done else _bfs_solve_steps(env, 12)
    assert env.shortest_solve_steps() == expected
    budget = env.max_steps - env._steps
    assert env.oracle_value(100) == (1.0 if expected is not None and expected <= budget else 0.0)
