"""Shared pieces of the reliability tests: a tiny local-backend config, and the scripted policy of
:mod:`tempo_rl.testing.policies` (real LocalTrainingClient updates, meaningful sampled answers)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from tempo_rl.testing.policies import ScriptedPolicy, innermost_client, use_scripted_policy
from tempo_rl.training.config import TrainConfig, validate_config

__all__ = ["REPO", "TINY", "ScriptedPolicy", "local_client", "tiny_config", "use_scripted_policy"]

REPO = Path(__file__).resolve().parents[2]

TINY = """
algorithm = "tempo"

[env]
name = "keydoor"
kwargs = { horizon = 12, keys = 1, colours = 2 }

[backend]
kind = "local"
hidden_size = 16
num_layers = 1
num_heads = 2
vocab_size = 1024
max_positions = 2048

[tempo]
max_rounds = 12
macro_rounds = 4
branches = 2
critic_samples = 2
endpoint_samples = 1
states_per_batch = 2
warmup_updates = 1
warmup_games_per_batch = 1
td_updates = 2
prefix_correction = "off"

[sampling]
critic_answer = "sampled"
max_tokens = 48
critic_max_tokens = 16
critic_max_prompt_tokens = 1500
max_trajectory_tokens = 1600
show_remaining_steps = false

[optim]
learning_rate = 1e-3

[workers]
step_timeout_s = 5.0

[kl]
coef = 0.0

[run]
loggers = []
checkpoint_every = 1
"""


def tiny_config(**sections: dict[str, Any]) -> TrainConfig:
    """The tiny config with ``section={field: value}`` overrides merged in."""
    data = tomllib.loads(TINY)
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return validate_config(data)


def local_client(trainer: Any) -> Any:
    """The real LocalTrainingClient under every wrapper."""
    client = innermost_client(trainer)
    assert type(client).__name__ == "LocalTrainingClient", type(client)
    return client
