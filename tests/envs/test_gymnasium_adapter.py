"""The Gymnasium adapter: FrozenLake/Taxi presets, user text maps, seeded replay of stochastic envs."""

from __future__ import annotations

import pytest

from tempo_rl.envs import check_replay, make, register, restore, restore_branches, unregister

gymnasium = pytest.importorskip(
    "gymnasium", reason="Gymnasium is not installed (pip install 'tempo-rl[gymnasium]')"
)

from tempo_rl.envs.gymnasium_adapter import GymnasiumEnv  # noqa: E402


def test_frozenlake_text_and_dynamics_pinned():
    env = make("gymnasium:id=FrozenLake-v1,is_slippery=false")
    obs = env.reset(0)
    assert obs.text == (
        "Task: Walk from S to G over the frozen lake without falling into a hole H. "
        "Lake map: SFFF FHFH FFFH HFFG. You are at row 1 column 1."
    )
    assert obs.admissible_actions == ("move left", "move down", "move right", "move up")
    assert obs.info["task"].startswith("Walk from S to G")
    r = env.step("move right")
    assert (
        r.observation.text == "Lake map: SFFF FHFH FFFH HFFG. You are at row 1 column 2." and r.reward == 0.0
    )
    r = env.step("Move  DOWN")  # normalised; (2, 2) is a hole
    assert r.terminated and r.reward == 0.0 and "row 2 column 2" in r.observation.text
    win = make("gymnasium:id=FrozenLake-v1,is_slippery=false")
    win.reset(0)
    for action in ("move down", "move down", "move right", "move right", "move down", "move right"):
        r = win.step(action)
    assert r.terminated and r.reward == 1.0


def test_unknown_text_is_feedback_not_an_exception():
    env = make("gymnasium", id="FrozenLake-v1", is_slippery=False, max_steps=2)
    env.reset(0)
    r = env.step("fly north")
    assert r.observation.text.startswith("Unknown action 'fly north'. Use one of: move left, move down")
    assert r.info["admissible"] is False and not r.done
    assert env.step("fly").truncated  # the extra step limit still counts refused actions


def test_slippery_frozenlake_replays_from_seed_and_forks():
    env = make("gymnasium:id=FrozenLake-v1")
    env.reset(7)
    for action in ("move right", "move down", "move right", "move down", "move left"):
        if env.done:
            break
        env.step(action)
    snap = env.snapshot()
    assert snap.state_digests is not None  # the preset fingerprints position + RNG state
    restored = restore(snap)
    assert restored.snapshot() == snap and restored.state_fingerprint() == env.state_fingerprint()
    branches = restore_branches(snap, 3)
    assert all(b.supports_fork for b in branches)
    report = check_replay("gymnasium:id=FrozenLake-v1", steps=30, trials=3)
    assert report.ok and report.fork_restores > 0, report.summary()


def test_taxi_preset_text():
    env = make("gymnasium:id=Taxi-v4")
    obs = env.reset(3)
    row, col, _passenger, destination = env.env._gym.unwrapped.decode(env.env._last_obs)  # type: ignore[attr-defined]
    names = ("red", "green", "yellow", "blue")
    assert f"Taxi at row {row + 1} column {col + 1}." in obs.text
    assert f"Destination: the {names[destination]} stand." in obs.text
    assert obs.admissible_actions == (
        "move south",
        "move north",
        "move east",
        "move west",
        "pick up",
        "drop off",
    )
    assert check_replay("gymnasium:id=Taxi-v4", steps=40, trials=2).ok


def test_user_supplied_text_maps_and_registration():
    def cliff_text(obs, env):
        return f"You stand on cell {int(obs)} of the cliff path."

    def factory() -> GymnasiumEnv:
        return GymnasiumEnv(
            "CliffWalking-v1", obs_to_text=cliff_text, actions=("up", "right", "down", "left")
        )

    register("test-cliff", factory, overwrite=True)
    try:
        env = make("test-cliff")
        assert env.reset(0).text == "Task: Play CliffWalking-v1. You stand on cell 36 of the cliff path."
        env.step("up")
        env.step("right")
        assert env.last_observation.text == "You stand on cell 25 of the cliff path."
        assert not env.supports_fork  # no preset: fork is opt-in
        assert restore(env.snapshot()).last_observation.text == "You stand on cell 25 of the cliff path."
    finally:
        unregister("test-cliff")


def test_bad_gymnasium_arguments():
    with pytest.raises(ValueError, match=r"gymnasium\.make"):
        make("gymnasium", id="NoSuchEnv-v0")
    with pytest.raises(ValueError, match=r"4 actions but 2"):
        GymnasiumEnv("FrozenLake-v1", actions=("a", "b"))
    with pytest.raises(ValueError, match="text_to_action"):
        GymnasiumEnv("MountainCarContinuous-v0")
