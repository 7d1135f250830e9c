"""Replayable text environments: the contract, snapshots, verified restore, built-in envs and adapters.

Write an adapter by subclassing :class:`ReplayableEnv` (``reset(seed)`` and ``step(action)``; optionally
``privileged_info``, ``fork``, ``walkthrough``, ``state_fingerprint``, ``close``), register it with
:func:`register`, and everything else works: :func:`make` builds a :class:`RecordedEnv` that can
:meth:`~RecordedEnv.snapshot` at any step, and :func:`restore` / :func:`restore_branches` rebuild verified
live copies. See ``docs/environments.md``.

Built-in names: ``knights`` (:mod:`tempo_rl.envs.knights`), ``keydoor`` (:mod:`tempo_rl.envs.keydoor`),
``crossings`` (:mod:`tempo_rl.envs.crossings`),
``textworld`` (:mod:`tempo_rl.envs.textworld_adapter`, needs the ``alfworld`` extra) and ``gymnasium``
(:mod:`tempo_rl.envs.gymnasium_adapter`, needs the ``gymnasium`` extra). Importing this package imports
neither TextWorld nor Gymnasium.
"""

from tempo_rl.envs.check import ReplayCheckReport, check_replay
from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult
from tempo_rl.envs.recorder import RecordedEnv
from tempo_rl.envs.registry import (
    UnknownEnvError,
    available,
    get_factory,
    make,
    parse_spec,
    register,
    unregister,
)
from tempo_rl.envs.restore import (
    ForkCache,
    ReplayDivergenceError,
    SnapshotMismatchError,
    restore,
    restore_branches,
)
from tempo_rl.envs.snapshot import SNAPSHOT_FORMAT_VERSION, EnvSpec, Snapshot, observation_digest

__all__ = [
    "SNAPSHOT_FORMAT_VERSION",
    "EnvSpec",
    "ForkCache",
    "Observation",
    "RecordedEnv",
    "ReplayCheckReport",
    "ReplayDivergenceError",
    "ReplayableEnv",
    "Snapshot",
    "SnapshotMismatchError",
    "StepResult",
    "UnknownEnvError",
    "available",
    "check_replay",
    "get_factory",
    "make",
    "observation_digest",
    "parse_spec",
    "register",
    "restore",
    "restore_branches",
    "unregister",
]
