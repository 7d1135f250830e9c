"""Everything about a config that can be checked before the first file of a run is written.

:func:`preflight` runs after the config validated (``tempo_rl.training.config``) and before the run directory is
touched. It checks

* the backend: its config parses; for the local backend's built-in model, that ``backend.hidden_size`` is a
  multiple of ``backend.num_heads``; and that one turn fits in the model's positions (``sampling.max_tokens`` <
  positions: a longer turn could never be sampled);
* the env, built once from ``env.name`` / ``env.kwargs`` and reset on the first training game, then stepped
  once (its expert's first action, else its first admissible action, else ``"look"``): reset must return an
  :class:`~tempo_rl.envs.core.Observation` whose ``text`` is a ``str``, ``step`` a
  :class:`~tempo_rl.envs.core.StepResult`. Reset and step run on a worker with ``workers.step_timeout_s``; a
  call that raises or times out is tried again on a fresh env (up to 3 tries), so a flaky env is not refused.

Each problem raises :class:`~tempo_rl.training.config.ConfigError` naming the field and the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tempo_rl.backends.config import AnyBackendConfig
from tempo_rl.training.config import ConfigError, TrainConfig

__all__ = ["model_positions", "preflight"]

_TRIES = 3


def model_positions(backend: AnyBackendConfig | Mapping[str, Any]) -> int | None:
    """The local model's positions (the longest sequence it can hold), when known without loading it.

    Raises:
        ConfigError: the built-in model's width is not a multiple of its heads, or ``backend.model_path`` does
            not exist.
    """
    from tempo_rl.backends.config import LocalBackendConfig, parse_backend_config

    cfg = parse_backend_config(backend)
    if not isinstance(cfg, LocalBackendConfig):
        return None
    if cfg.model_path is None:
        if cfg.hidden_size % cfg.num_heads:
            raise ConfigError(
                f"backend.num_heads = {cfg.num_heads} does not divide backend.hidden_size = {cfg.hidden_size}; "
                "each head takes hidden_size / num_heads dimensions: choose num_heads among the divisors of "
                f"hidden_size (e.g. {_divisor_near(cfg.hidden_size, cfg.num_heads)})"
            )
        return cfg.max_positions
    path = Path(cfg.model_path)
    if not path.is_dir():
        raise ConfigError(
            f"backend.model_path {str(path)!r} is not a directory; point it at a local checkpoint"
        )
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        value = json.loads((path / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
        return int(value) if value else None
    return None


def _divisor_near(n: int, k: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - k), d))


def _check_budgets(config: TrainConfig) -> None:
    positions = model_positions(config.backend)
    if positions is None:
        return
    s = config.sampling
    fix = "lower it or raise backend.max_positions"
    if s.max_tokens >= positions:
        raise ConfigError(
            f"sampling.max_tokens = {s.max_tokens} does not fit in the model's {positions} positions "
            f"(backend.max_positions); {fix}"
        )


def _contract(what: str, value: Any, expected: type, name: str) -> None:
    if not isinstance(value, expected):
        raise ConfigError(
            f"env {name!r} breaks the ReplayableEnv contract: {what} is a {type(value).__name__} ({value!r:.60}), "
            f"not a {expected.__name__}; fix the adapter (see docs/tutorial-adapter.md)"
        )


def _check_env(config: TrainConfig) -> None:
    from tempo_rl.envs import make
    from tempo_rl.envs.core import Observation, StepResult
    from tempo_rl.envs.registry import UnknownEnvError
    from tempo_rl.envs.workers import EnvWorkerError, EnvWorkerPool

    spec, seed = config.env.train_game(0)
    name = spec.name
    last: Exception | None = None
    pool = EnvWorkerPool(max_workers=1, step_timeout_s=config.workers.step_timeout_s)
    loop = asyncio.new_event_loop()
    try:
        for _ in range(_TRIES):
            try:
                env = make(spec)
            except UnknownEnvError as exc:
                raise ConfigError(
                    f"env.name: {exc.args[0] if exc.args else exc}; register your env first (`tempo-rl train "
                    "--import MODULE` imports the module that calls tempo_rl.envs.register)"
                ) from None
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"env.kwargs: {exc}") from None
            raw = env.env  # the adapter itself: its results are checked before any wrapper reads them
            try:
                obs = loop.run_until_complete(pool.call(raw, "reset", seed))
                _contract("reset()'s result", obs, Observation, name)
                _contract("the observation text", obs.text, str, name)
                plan = list(loop.run_until_complete(pool.call(raw, "walkthrough")) or ())
                admissible = list(obs.admissible_actions or ())
                action = plan[0] if plan else admissible[0] if admissible else "look"
                _contract("an admissible action", action, str, name)
                result = loop.run_until_complete(pool.call(raw, "step", action))
                _contract("step()'s result", result, StepResult, name)
                _contract("the observation of step()'s result", result.observation, Observation, name)
                _contract("the observation text after step()", result.observation.text, str, name)
                return
            except EnvWorkerError as exc:
                cause = exc.__cause__
                if isinstance(cause, (AttributeError, TypeError)):  # a wrong type inside the env wrapper
                    raise ConfigError(
                        f"env {name!r} breaks the ReplayableEnv contract: {cause}; fix the adapter (see "
                        "docs/tutorial-adapter.md)"
                    ) from None
                last = exc  # raised or hung: maybe transient, try a fresh env
            finally:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(pool.call(raw, "close"))
    finally:
        loop.close()
        pool.close()
    raise ConfigError(
        f"env {name!r} failed {_TRIES} times in a row on its first training game (seed {seed}) before training: "
        f"{last}; fix the env or its env.kwargs"
    )


def preflight(config: TrainConfig) -> None:
    """Check the backend's budgets and build, reset and step the env once (see the module docstring).

    Writes nothing.

    Raises:
        ConfigError: the first problem found, naming the field and the fix.
    """
    _check_budgets(config)
    _check_env(config)
