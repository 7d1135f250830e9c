"""Trainer options that code passes to :func:`~tempo_rl.training.run.build_trainer`, not a config file.

A :class:`~tempo_rl.training.config.TrainConfig` holds what a library user sets. A few settings exist for
studies of the method instead: a critic design measured in ``benchmarks/mechanism.py`` and run by
``tempo-rl race`` (the critic's own step size, a shorter critic history, an answer prefix, a warm-start
cool-down), or an oracle critic made noisy on purpose. They are :class:`TrainerOptions`, given to
``build_trainer(config, run_dir, options=...)``; a run's ``config.toml`` does not hold them, so code that uses
them builds its trainers itself (the race, the benchmarks).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["TrainerOptions"]


@dataclass(frozen=True)
class TrainerOptions:
    """Settings of a trainer beyond its config (defaults: the library's behaviour).

    Attributes:
        critic_history_turns: show the generative critic only the last this many (action, observation) turns,
            besides the initial observation (None: all; 1: the last action and the current observation).
        critic_answer_prefix: text the generative critic's turn starts with, written into its prompt (e.g.
            ``"<value>"``: the model then writes only the number and ``"</value>"``).
        critic_learning_rate: Adam's step size for the critic's own weights (``tempo.critic_weights = "own"``;
            None: ``optim.learning_rate``).
        warmstart_cooldown: the share of the warm start's optimiser steps, at the end, over which its step size
            falls linearly towards 0 (:func:`~tempo_rl.training.warmstart.cooldown_learning_rate`; 0: constant).
        oracle_flip_prob: ``tempo.critic = "oracle"``: the probability that one estimate is R_max - V* instead
            of V* (binary values).
        oracle_noise_sigma: ``tempo.critic = "oracle"``: the standard deviation of Gaussian noise added to each
            estimate, then clipped to [0, R_max] (R_max units).
    """

    critic_history_turns: int | None = None
    critic_answer_prefix: str = ""
    critic_learning_rate: float | None = None
    warmstart_cooldown: float = 0.0
    oracle_flip_prob: float = 0.0
    oracle_noise_sigma: float = 0.0

    def __post_init__(self) -> None:
        checks = {
            "critic_history_turns": self.critic_history_turns is None or self.critic_history_turns >= 0,
            "critic_learning_rate": self.critic_learning_rate is None or self.critic_learning_rate > 0,
            "warmstart_cooldown": 0.0 <= self.warmstart_cooldown <= 1.0,
            "oracle_flip_prob": 0.0 <= self.oracle_flip_prob <= 1.0,
            "oracle_noise_sigma": 0.0 <= self.oracle_noise_sigma < float("inf"),
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"TrainerOptions.{name} = {getattr(self, name)!r} is out of range")

    def as_dict(self) -> dict[str, Any]:
        """The options by name (for a cache key or a record)."""
        return dataclasses.asdict(self)
