"""check-replay plays what agents really send: inadmissible commands and free text, with a configurable share.

The blind spot it closes: an env whose state changes at random only after an action it rejects passes a check
of admissible actions alone (``invalid_share=0``), and is caught as soon as rejected actions are played.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tempo_rl.cli import main
from tempo_rl.envs import Observation, ReplayableEnv, StepResult, check_replay, register, unregister
from tempo_rl.envs.check import FREE_TEXT, invalid_action
from tempo_rl.rollout.tool_call import INVALID_ACTION

ADMISSIBLE = ("turn left", "turn right", "push dial")
_NOISE = random.SystemRandom()  # unseeded on purpose: what no replay can reproduce


class SlipperyDial(ReplayableEnv):
    """Deterministic on its admissible actions; a rejected action jolts the dial to a random position."""

    def reset(self, seed: int | None = None) -> Observation:
        self.dial = 0 if seed is None else seed % 10
        return self._obs("A dial.")

    def _obs(self, text: str) -> Observation:
        return Observation(f"{text} The dial shows {self.dial}.", ADMISSIBLE)

    def step(self, action: str) -> StepResult:
        if action == "turn left":
            self.dial = (self.dial - 1) % 10
        elif action == "turn right":
            self.dial = (self.dial + 1) % 10
        elif action != "push dial":
            self.dial = _NOISE.randrange(10**9)  # the hidden bug: only behind a rejected action
            return StepResult(self._obs("Nothing happens."))
        return StepResult(self._obs("Click."))


class RaisingDial(SlipperyDial):
    """Breaks the contract the other way: raises on a rejected action instead of returning feedback."""

    def step(self, action: str) -> StepResult:
        if action not in ADMISSIBLE:
            raise ValueError(f"unknown command {action!r}")
        return super().step(action)


@pytest.fixture
def dial_envs():
    register("test-slippery-dial", SlipperyDial, overwrite=True)
    register("test-raising-dial", RaisingDial, overwrite=True)
    yield
    unregister("test-slippery-dial")
    unregister("test-raising-dial")


def test_admissible_play_alone_misses_the_nondeterminism(dial_envs):
    """The old blind spot, kept by ``invalid_share=0``: only admissible actions, so the env looks exact."""
    report = check_replay("test-slippery-dial", steps=40, trials=5, invalid_share=0.0)
    assert report.ok, report.summary()
    assert report.invalid_actions == 0 and report.steps_played == 200 and report.replay_restores > 0


def test_rejected_actions_catch_the_nondeterminism_and_name_step_and_action(dial_envs):
    report = check_replay("test-slippery-dial", steps=40, trials=5, invalid_share=0.2)
    assert not report.ok and report.invalid_actions > 0
    replayed = [d for d in report.divergences if d.method == "replay"]
    assert replayed, report.summary()
    for d in replayed:
        assert d.step >= 1 and d.action is not None and d.action not in ADMISSIBLE  # a rejected action
        assert f"at step {d.step} after action {d.action!r}" in d.message
    # the actions are drawn from the seed: the same check finds the same divergences at the same places
    again = check_replay("test-slippery-dial", steps=40, trials=5, invalid_share=0.2)
    where = [(d.trial, d.depth, d.method, d.step, d.action) for d in report.divergences]
    assert [(d.trial, d.depth, d.method, d.step, d.action) for d in again.divergences] == where
    assert again.invalid_actions == report.invalid_actions and again.steps_played == report.steps_played


def test_an_env_that_raises_on_a_rejected_action_is_reported_at_that_step(dial_envs):
    assert check_replay("test-raising-dial", steps=30, trials=3, invalid_share=0.0).ok
    report = check_replay("test-raising-dial", steps=30, trials=3, invalid_share=0.3)
    played = [d for d in report.divergences if d.method == "play"]
    assert len(played) == 3  # every trial stops at its first rejected action
    for d in played:
        assert d.action not in ADMISSIBLE and d.step == d.depth + 1
        assert f"raised on the rejected action {d.action!r} at step {d.step}" in d.message
        assert "ValueError: unknown command" in d.message


def test_cli_option_sets_the_share(dial_envs, capsys):
    assert main(["check-replay", "test-slippery-dial", "--steps", "30", "--invalid-share", "0"]) == 0
    assert "of which 0 invalid" in capsys.readouterr().out
    code = main(["check-replay", "test-slippery-dial", "--steps", "30", "--invalid-share", "0.25", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and not out["ok"] and out["invalid_actions"] > 0
    first = out["divergences"][0]
    assert first["step"] >= 1 and first["action"] not in ADMISSIBLE
    assert main(["check-replay", "keydoor", "--invalid-share", "1.5"]) == 2
    assert "--invalid-share 1.5 is not a finite number >= 0 and <= 1" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["keydoor", "keydoor:horizon=60", "knights", "arc-stub"])
def test_deterministic_envs_pass_with_rejected_actions(spec):
    report = check_replay(spec, steps=60, trials=3, invalid_share=0.4)
    assert report.ok, report.summary()
    assert report.invalid_actions > 0 and report.replay_restores >= 3


@pytest.mark.parametrize("share", [-0.1, 1.01, float("nan")])
def test_a_share_outside_0_1_is_refused(share):
    with pytest.raises(ValueError, match=r"invalid_share in \[0, 1\]"):
        check_replay("keydoor", invalid_share=share)


def test_free_text_holds_the_rollouts_unreadable_tool_call_sentinel():
    assert INVALID_ACTION in FREE_TEXT


_WORDS = st.sampled_from(["go", "take", "open", "look", "north", "key", "door", "red", "help"])


@given(
    admissible=st.lists(
        st.one_of(st.lists(_WORDS, min_size=1, max_size=3).map(" ".join), st.sampled_from(FREE_TEXT)),
        max_size=12,
        unique=True,
    ),
    seed=st.integers(0, 2**32),
)
def test_an_invalid_action_is_never_admissible(admissible, seed):
    assume(not set(FREE_TEXT) <= set(admissible))
    action = invalid_action(tuple(admissible), random.Random(seed))
    assert action not in admissible
    assert action == invalid_action(tuple(admissible), random.Random(seed))  # drawn from the seed alone
