"""KeyDoor's critic-only lock note (``state_note=True``): pinned on a hand-played ``keydoor_rule`` game, checked
against the exact shortest-exit count on random play, and kept out of the actor's text."""

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
    """Seed 3's walkthrough is 42 steps of the 48: 6 spare steps at every state along it."""
    env = _rule_env(state_note=True)
    obs = env.reset(seed=3)
    assert len(env.walkthrough() or ()) == 42
    assert obs.privileged_state == "The right keys are still to take. Spare steps: 6."
    notes = {}
    for action in env.walkthrough() or ():
        result = env.step(action)
        note = result.observation.privileged_state
        notes[action] = note
        if action == "take blue" and env._carried == ["blue"]:
            assert note == "The right keys are still to take. Spare steps: 6."
        if action == "take blue" and env._carried == ["blue", "blue"]:
            assert note == "The carried keys fit every lock. Spare steps: 6."
        if action == "open door" and sum(env._opened) == 1:
            assert note == "The carried keys fit every lock. Spare steps: 6."
        if action == "open door" and sum(env._opened) == 2:
            assert note == "Every lock is open. Spare steps: 6."
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


def test_each_wasted_step_spends_a_spare_one_and_the_seventh_loses_the_game() -> None:
    """At seed 3's first room only ``go on`` is admissible; ``open door`` there wastes a step (the walk's 42 steps
    stay ahead): 6 -> 5 -> ... -> 0 spare steps, then the exit is out of reach although the keys are still
    there to take."""
    env = _rule_env(state_note=True)
    obs = env.reset(seed=3)
    assert obs.admissible_actions == ("go on",)
    for spare in (5, 4, 3, 2, 1, 0):
        obs = env.step("open door").observation
        assert obs.privileged_state == f"The right keys are still to take. Spare steps: {spare}."
    obs = env.step("open door").observation
    assert obs.privileged_state == "The exit is unreachable."
    assert env.shortest_exit_steps() == 42  # reachable without the step limit, not within it
    assert env.oracle_value(48) == 0.0


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


@settings(max_examples=60)
@given(
    seed=st.integers(0, 10_000),
    lock_colour=st.sampled_from(["random", "blue", "independent"]),
    picks=st.lists(st.integers(0, 9), min_size=1, max_size=60),
)
def test_note_matches_the_shortest_exit(seed: int, lock_colour: str, picks: list[int]) -> None:
    """On random admissible play: "unreachable" exactly when the oracle's value is 0 (no plan reaches the exit
    in the steps left, :meth:`KeyDoorEnv.oracle_value`); otherwise the spare steps are the steps left less
    :meth:`KeyDoorEnv.shortest_exit_steps`, after "fit every lock" exactly when no more key is needed and
    "Every lock is open." exactly when none is closed."""
    env = KeyDoorEnv(**RULE, lock_colour=lock_colour, state_note=True)  # type: ignore[arg-type]
    obs = env.reset(seed=seed)
    for pick in picks:
        if obs.admissible_actions is None:
            assert obs.privileged_state is None
            break
        note = obs.privileged_state or ""
        steps_left = env.horizon - env._steps
        assert (note == "The exit is unreachable.") == (env.oracle_value(steps_left) == 0.0)
        if note != "The exit is unreachable.":
            need = env.shortest_exit_steps()
            assert need is not None
            assert note.endswith(f" Spare steps: {steps_left - need}.")
            closed, deficit, _ = env._key_deficit()
            assert note.startswith("Every lock is open.") == (closed == 0)
            assert note.startswith("The carried keys fit every lock.") == (closed > 0 and deficit == 0)
            assert note.startswith("The right keys are still to take.") == (deficit > 0)
        actions = obs.admissible_actions
        obs = env.step(actions[pick % len(actions)]).observation
