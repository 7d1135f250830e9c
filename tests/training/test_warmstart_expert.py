"""``warmstart.expert``: demonstrations that imitate the reset-state walkthrough, or the env's expert recovering
from the noisy steps (``ReplayableEnv.expert_action``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")

from benchmark_runs import load_benchmark

from tempo_rl.envs import ReplayableEnv
from tempo_rl.envs.keydoor import KeyDoorEnv
from tempo_rl.training.config import ConfigError, load_config
from tempo_rl.training.warmstart import demonstration_datums

# the weighted (expert) actions of a demo Datum, in order
_expert_actions = load_benchmark("warmstart_demos").expert_actions

CONFIG = """
algorithm = "tempo"

[env]
name = "keydoor"
kwargs = { horizon = 48, keys = 2, colours = 2, clue_gap = 0, lock_gap = 8, clue_at_key = true }

[backend]
kind = "local"
hidden_size = 32
num_layers = 1
num_heads = 2
vocab_size = 512
max_positions = 4096

[tempo]
max_rounds = 48
macro_rounds = 8

[sampling]
critic_answer = "sampled"
max_tokens = 24
critic_max_prompt_tokens = 400
max_trajectory_tokens = 4000

[warmstart]
episodes = 500
noise = 0.1

[kl]
coef = 0.0

[run]
loggers = []
"""


def _trainer(tmp_path: Path, expert: str, noise: float = 0.1) -> tuple[Any, Any]:
    from tempo_rl.training.run import build_trainer

    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG)
    config = load_config(path, [f'warmstart.expert="{expert}"', f"warmstart.noise={noise}"])
    return config, build_trainer(config, tmp_path / f"run-{expert}")


class SlipOnce:
    """An RNG whose only noisy step is the ``at``-th one (0-based), which takes the last admissible action
    (``go back`` in KeyDoor whenever the room is not the first)."""

    def __init__(self, at: int) -> None:
        self.calls = 0
        self.at = at

    def random(self) -> float:
        self.calls += 1
        return 0.0 if self.calls == self.at + 1 else 1.0

    def integers(self, low: int, high: int | None = None) -> int:
        return low - 1 if high is None else low


def test_recovering_demo_is_the_experts_recovery_after_a_slip(tmp_path: Path) -> None:
    """One noisy ``go back`` at step 3: the recovering demo goes on with exactly the actions
    ``expert_action`` gives from there (``go on`` first) to the exit; the walkthrough demo stops where the
    shifted walkthrough's next action is no longer admissible."""
    config, trainer = _trainer(tmp_path, "recovering")
    seed = config.env.train_game(0)[1]
    (demo,) = demonstration_datums(trainer, (config.env.spec(), seed), SlipOnce(at=3))  # type: ignore[arg-type]

    env = KeyDoorEnv(**config.env.kwargs)
    obs = env.reset(seed)
    expected, won = [], False
    for step in range(48):
        action = env.expert_action()
        assert action is not None
        if step == 3:
            action = (obs.admissible_actions or ())[-1]  # the slip SlipOnce picks
            assert action == "go back"
        else:
            expected.append(action)
        result = env.step(action)
        obs = result.observation
        if result.terminated:
            won = True
            break
    assert won and expected[3] == "go on"  # the recovery: walk back into the room the slip left
    assert _expert_actions(demo) == expected

    _, walk_trainer = _trainer(tmp_path, "walkthrough")
    (walk,) = demonstration_datums(walk_trainer, (config.env.spec(), seed), SlipOnce(at=3))  # type: ignore[arg-type]
    shown = _expert_actions(walk)
    assert shown == expected[: len(shown)] and len(shown) < len(expected)  # it stops before the exit


def test_recovering_demos_reach_the_locks_that_walkthrough_demos_stop_short_of(tmp_path: Path) -> None:
    """At T = 48 with noise 0.1, most walkthrough demos stop before the first lock; recovering ones get there."""
    config, rec = _trainer(tmp_path, "recovering")
    _, walk = _trainer(tmp_path, "walkthrough")
    games = [(config.env.spec(), config.env.train_game(i)[1]) for i in range(12)]
    opened = {}
    for name, trainer in (("recovering", rec), ("walkthrough", walk)):
        rng = np.random.default_rng(0)
        demos = [demonstration_datums(trainer, g, rng)[0] for g in games]
        opened[name] = sum("open door" in _expert_actions(d) for d in demos)
    assert opened["recovering"] >= 10 and opened["walkthrough"] <= 6, opened


def test_recovering_needs_an_expert_action(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, trainer = _trainer(tmp_path, "recovering")
    monkeypatch.setattr(KeyDoorEnv, "expert_action", lambda self: None)
    with pytest.raises(ValueError, match=r"expert_action\(\).*warmstart.expert = 'walkthrough'"):
        demonstration_datums(trainer, (config.env.spec(), 1), np.random.default_rng(0))


def test_warmstart_expert_is_validated(tmp_path: Path) -> None:
    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG)
    assert load_config(path).warmstart.expert == "recovering"  # the library default (measured best)
    with pytest.raises(ConfigError, match="expert"):
        load_config(path, ['warmstart.expert="dagger"'])


def test_expert_action_is_part_of_the_env_contract() -> None:
    """Optional (default None), and a recorded env answers with its wrapped env's expert."""
    from tempo_rl.envs import make

    env = make("keydoor", horizon=12, keys=1, colours=2)
    env.reset(seed=3)
    inner = KeyDoorEnv(horizon=12, keys=1, colours=2)
    inner.reset(3)
    assert env.expert_action() == inner.expert_action() == inner.walkthrough()[0]  # type: ignore[index]

    class NoExpert(KeyDoorEnv):
        expert_action = ReplayableEnv.expert_action

    plain = NoExpert(horizon=12, keys=1, colours=2)
    plain.reset(3)
    assert plain.expert_action() is None
