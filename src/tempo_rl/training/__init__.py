"""Training: configs, the MacroStepTrainer (TEMPO, a GRPO baseline and GiGPO), runs and checkpoints.

Entry points:

* :func:`train_run` (``tempo-rl train``): a whole run in a run directory, resumable after a crash;
* :class:`TempoTrainer` / :class:`GrpoTrainer` / :class:`GigpoTrainer`: the update loops on top of :class:`MacroStepTrainer`, for users
  who assemble their own components (:class:`TrainerComponents`);
* :func:`load_config` / :class:`TrainConfig`: pydantic configs from TOML with ``key=value`` overrides;
* :mod:`tempo_rl.training.types`: the trainer's contract (:class:`StoredState`, :class:`StartState`, the store
  and env-pool Protocols, :class:`TrainerComponents`).

The rollout loop itself is :func:`tempo_rl.rollout.run_branches`.

Names are imported lazily (importing this package imports no optional dependency).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ConfigError": "tempo_rl.training.config",
    "TrainConfig": "tempo_rl.training.config",
    "load_config": "tempo_rl.training.config",
    "MacroStepTrainer": "tempo_rl.training.trainer",
    "StartState": "tempo_rl.training.types",
    "TrainerComponents": "tempo_rl.training.types",
    "TrainerState": "tempo_rl.training.trainer",
    "TrainerOptions": "tempo_rl.training.options",
    "TempoTrainer": "tempo_rl.training.tempo",
    "GrpoTrainer": "tempo_rl.training.grpo",
    "GigpoTrainer": "tempo_rl.training.gigpo",
    "warm_start": "tempo_rl.training.warmstart",
    "build_trainer": "tempo_rl.training.run",
    "train_run": "tempo_rl.training.run",
    "StateStore": "tempo_rl.training.store",
    "StoredState": "tempo_rl.training.types",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tempo_rl.training' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
