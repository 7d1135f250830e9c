"""The TextWorld adapter on a game generated at test time with TextWorld's own generator."""

from __future__ import annotations

import pytest

from tempo_rl.envs import ReplayDivergenceError, check_replay, make, restore, restore_branches
from tempo_rl.envs.textworld_adapter import clean_feedback

pytest.importorskip("textworld", reason="TextWorld is not installed (pip install 'tempo-rl[alfworld]')")


def test_clean_feedback_drops_banner_and_status_line():
    raw = "\n\n  ____  \n |  $$ \\\n\nWelcome!\n\n-= Kitchen =-\nA kitchen.\n\n\n>   -= Kitchen =-0/2"
    assert clean_feedback(raw) == "Welcome!\n-= Kitchen =-\nA kitchen."


def test_reset_text_admissible_task_and_walkthrough_wins(z8_game):
    env = make("textworld", path=str(z8_game))
    obs = env.reset(0)
    assert obs.text.startswith("Welcome to") and "$$" not in obs.text and "\n>" not in obs.text
    assert obs.admissible_actions and "look" in obs.admissible_actions
    assert obs.info["task"] and obs.info["task"] in obs.text
    walkthrough = env.walkthrough()
    assert walkthrough and env.privileged_info() and ", ".join(walkthrough) in (env.privileged_info() or "")
    total = 0.0
    for action in walkthrough:
        assert action in (env.last_observation.admissible_actions or ())
        result = env.step(action)
        total += result.reward
    assert result.terminated and result.info["won"] and total == obs.info["max_score"]
    # an unknown command is the game's feedback, never an exception
    other = make("textworld", path=str(z8_game))
    other.reset()
    assert other.step("xyzzy frobnicate").observation.text


def test_restore_fork_and_fingerprint(z8_game):
    env = make("textworld", path=str(z8_game), max_steps=100)
    env.reset(0)
    for action in [*(env.walkthrough() or ())[:-1], "inventory", "look", "examine xyzzy"]:
        env.step(action)
    assert not env.done
    snap = env.snapshot()
    assert snap.state_digests is not None and all(d is not None for d in snap.state_digests)
    restored = restore(snap)
    assert restored.snapshot() == snap and restored.state_fingerprint() == env.state_fingerprint()
    a, b = restore_branches(snap, 2)
    action = next(x for x in a.last_observation.admissible_actions or () if x.startswith("go "))
    a.step(action)
    assert b.snapshot() == snap and a.state_fingerprint() != b.state_fingerprint()
    for branch in (restored, a, b):
        branch.close()
    tampered = snap.model_copy(update={"state_digests": (*snap.state_digests[:-1], "bogus")})
    with pytest.raises(ReplayDivergenceError) as info:
        restore(tampered)
    assert info.value.kind == "state" and info.value.step == snap.round_index


def test_check_replay_passes_on_a_generated_game(z8_game):
    report = check_replay(f"textworld:path={z8_game},max_steps=60", steps=30, trials=2, seed=3)
    assert report.ok, report.summary()
    assert report.replay_restores >= 2 and report.fork_restores >= 2


def test_missing_game_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="tw-make"):
        make("textworld", path=str(tmp_path / "nope.z8"))
