"""KeyDoor's critic-only lock note (``state_note=True``): pinned on a hand-played ``keydoor_rule`` game, checked
against the exact reachability count on random play, and kept out of the actor's text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.envs.keydoor import KeyDoorEnv

#: the mechanism benchmark's keydoor_rule corridor: 2 locks, both need blue, 2 colours
RULE = {"horizon": 48, "keys": 2, "colours": 2, "clue_gap": 0, "lock_gap": 8, "clue_at_key": True}


def _rule_env(**extra: object) -> KeyDoorEnv:
    return KeyDoorEnv(**RULE, lock_colour="blue", **extra)  # type: ignore[arg-type]


def test_walkthrough_notes() -> None:
    env = _rule_env(state_note=True)
    obs = env.reset(seed=3)
    assert obs.privileged_state == "The right keys are still to take."
    notes = {}
    for action in env.walkthrough() or ():
        result = env.step(action)
        notes[action] = result.observation.privileged_state
        if action == "take blue" and env._carried == ["blue"]:
            assert result.observation.privileged_state == "The right keys are still to take."
        if action == "take blue" and env._carried == ["blue", "blue"]:
            assert result.observation.privileged_state == "The carried keys fit every lock."
        if action == "open door" and sum(env._opened) == 1:
            assert result.observation.privileged_state == "The carried keys fit every lock."
        if action == "open door" and sum(env._opened) == 2:
            assert result.observation.privileged_state == "Every lock is open."
    assert env._won
    assert notes["go on"] is None  # the last step left through the exit: no note on an ended episode


def test_a_wrong_key_is_noted_at_once() -> None:
    env = _rule_env(state_note=True)
    obs = env.reset(seed=3)
    while "take red" not in (obs.admissible_actions or ("take red",)):
        obs = env.step("go on").observation
    obs = env.step("take red").observation
    assert obs.privileged_state == "The exit is unreachable."
    assert env.shortest_exit_steps() is None


def test_off_by_default_and_never_in_the_text() -> None:
    plain = _rule_env()
    assert plain.reset(seed=0).privileged_state is None
    assert all(plain.step(a).observation.privileged_state is None for a in (plain.walkthrough() or ()))
    noted = _rule_env(state_note=True)
    obs = noted.reset(seed=0)
    for action in noted.walkthrough() or ():
        assert obs.privileged_state is None or obs.privileged_state not in obs.text
        assert "lock" not in obs.text.lower().replace("locked", "")  # the actor reads no note
        obs = noted.step(action).observation


def test_bad_state_note_is_refused() -> None:
    with pytest.raises(ValueError, match="state_note must be true or false"):
        KeyDoorEnv(state_note="yes")  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    lock_colour=st.sampled_from(["random", "blue", "independent"]),
    picks=st.lists(st.integers(0, 9), min_size=1, max_size=60),
)
def test_note_matches_reachability(seed: int, lock_colour: str, picks: list[int]) -> None:
    """On random admissible play: "unreachable" exactly when no plan reaches the exit whatever the steps
    (:meth:`KeyDoorEnv.shortest_exit_steps` is None), "fit every closed lock" exactly when no more key is
    needed, and "Every lock is open." exactly when none is closed."""
    env = KeyDoorEnv(**RULE, lock_colour=lock_colour, state_note=True)  # type: ignore[arg-type]
    obs = env.reset(seed=seed)
    for pick in picks:
        if obs.admissible_actions is None:
            assert obs.privileged_state is None
            break
        note = obs.privileged_state or ""
        assert (note == "The exit is unreachable.") == (env.shortest_exit_steps() is None)
        closed, deficit, _ = env._key_deficit()
        assert (note == "Every lock is open.") == (closed == 0)
        assert (note == "The carried keys fit every lock.") == (closed > 0 and deficit == 0)
        actions = obs.admissible_actions
        obs = env.step(actions[pick % len(actions)]).observation
