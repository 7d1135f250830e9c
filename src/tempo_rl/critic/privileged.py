"""How much privileged information the critic gets: a per-update rate, and a warning at the start of training.

TEMPO's critic is only as good as what it sees; an env whose games carry no privileged information (ALFWorld's
train split has no walkthroughs) still trains, but the critic then judges from the public history alone. Two
things make that visible:

* :class:`PrivilegedInfoTally` counts, over one update, the start states whose ``privileged_info`` is a
  non-blank string; :meth:`PrivilegedInfoTally.pop_metrics` gives
  ``critic/privileged_info_rate = states with privileged info / start states`` (a fraction in [0, 1]; NaN for
  an update without start states) and starts the next count. Every boundary, endpoint and TD state inherits
  the privileged info of the start it came from, so this is also the share of critic prompts that hold it.
* :func:`warn_missing_privileged_info` checks the training games before the first update and emits a
  :class:`PrivilegedInfoWarning` naming how many lack it and what to do. An env class can answer cheaply with
  ``privileged_info_available(**kwargs) -> bool`` (a static method; ALFWorld's reads the game file and the
  planner cache, no game is loaded) and say what to do in a ``privileged_info_hint`` string; otherwise the first
  training game is built, reset and asked.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tempo_rl.envs.games import GAME_KWARG, game_file_pattern

__all__ = [
    "PRIVILEGED_INFO_RATE",
    "PrivilegedInfoCoverage",
    "PrivilegedInfoTally",
    "PrivilegedInfoWarning",
    "has_privileged_info",
    "privileged_info_coverage",
    "warn_missing_privileged_info",
]

#: The metric key logged by every update.
PRIVILEGED_INFO_RATE = "critic/privileged_info_rate"


class PrivilegedInfoWarning(UserWarning):
    """Some training games give the critic no privileged information."""


def has_privileged_info(text: str | None) -> bool:
    """True for a non-blank string (what a critic prompt would show), False for None or whitespace."""
    return isinstance(text, str) and bool(text.strip())


class PrivilegedInfoTally:
    """Counts start states with and without privileged information, per update (not thread-safe)."""

    def __init__(self) -> None:
        self.states = 0
        self.with_info = 0

    def observe(self, privileged_info: str | None) -> None:
        """Count one start state with this ``privileged_info``."""
        self.states += 1
        self.with_info += int(has_privileged_info(privileged_info))

    def clear(self) -> None:
        """Forget what was counted (e.g. the starts of an evaluation between updates)."""
        self.states = self.with_info = 0

    def pop_metrics(self) -> dict[str, float]:
        """``{critic/privileged_info_rate: with_info / states}`` (NaN when no state was counted); then clear."""
        rate = self.with_info / self.states if self.states else math.nan
        self.clear()
        return {PRIVILEGED_INFO_RATE: rate}


@dataclass(frozen=True)
class PrivilegedInfoCoverage:
    """Which training games give the critic privileged information.

    Attributes:
        checked: games checked.
        missing: the games (game files, or ``name:seed`` for seeded envs) without privileged information.
        exhaustive: every training game was checked (a folder of games and a cheap check), rather than the
            first one only.
        hint: what to do about the missing ones (from the env class), or ``""``.
    """

    checked: int
    missing: tuple[str, ...]
    exhaustive: bool
    hint: str = ""

    @property
    def rate(self) -> float:
        """Games with privileged information / games checked (NaN when none was checked)."""
        return (self.checked - len(self.missing)) / self.checked if self.checked else math.nan


class _EnvConfigLike(Protocol):
    name: str
    kwargs: dict[str, Any]
    games_dir: str | None

    def train_game(self, index: int) -> tuple[Any, int]: ...


def privileged_info_coverage(
    env: _EnvConfigLike, *, make_env: Callable[[Any, int], Any] | None = None
) -> PrivilegedInfoCoverage:
    """Check the training games of ``env`` (a :class:`~tempo_rl.training.config.EnvConfig`).

    With ``env.games_dir`` and an env class that has ``privileged_info_available``, every game file is
    checked that way; otherwise the first training game is built with ``make_env(spec, seed)`` (default: the
    registry's ``make`` and ``reset(seed)``) and its ``privileged_info()`` read.
    """
    from tempo_rl.envs.registry import get_factory

    factory = get_factory(env.name)
    cheap = getattr(factory, "privileged_info_available", None)
    hint = str(getattr(factory, "privileged_info_hint", "") or "")
    if env.games_dir is not None and callable(cheap):
        files = sorted(str(p) for p in Path(env.games_dir).glob(game_file_pattern(env.name)) if p.is_file())
        missing = tuple(f for f in files if not cheap(**{**env.kwargs, GAME_KWARG: f}))
        return PrivilegedInfoCoverage(len(files), missing, exhaustive=True, hint=hint)
    spec, seed = env.train_game(0)
    built = make_env(spec, seed) if make_env is not None else _make_and_reset(spec, seed)
    try:
        text = built.privileged_info()
    finally:
        built.close()
    game = str(spec.kwargs.get(GAME_KWARG) or f"{spec.name}:{seed}")
    missing_one: Sequence[str] = () if has_privileged_info(text) else (game,)
    return PrivilegedInfoCoverage(1, tuple(missing_one), exhaustive=False, hint=hint)


def _make_and_reset(spec: Any, seed: int) -> Any:
    from tempo_rl.envs.registry import make

    env = make(spec)
    env.reset(seed)
    return env


def warn_missing_privileged_info(
    env: _EnvConfigLike, *, make_env: Callable[[Any, int], Any] | None = None
) -> PrivilegedInfoCoverage | None:
    """Warn (:class:`PrivilegedInfoWarning`) when training games lack privileged information.

    Returns the coverage, or None when it could not be checked (the env failed to build: training reports
    that error itself, so the check never stops a run).
    """
    try:
        coverage = privileged_info_coverage(env, make_env=make_env)
    except Exception:  # a broken env or data folder: the trainer's own start reports it properly
        return None
    if not coverage.missing:
        return coverage
    where = f" in {env.games_dir}" if env.games_dir is not None else ""
    if coverage.exhaustive:
        head = f"{len(coverage.missing)} of {coverage.checked} training games{where}"
        examples = ", ".join(coverage.missing[:3]) + (", ..." if len(coverage.missing) > 3 else "")
        head += f" ({examples})"
    else:
        head = f"the first training game ({coverage.missing[0]}) of env {env.name!r}"
    message = (
        f"{head} give the critic no privileged information: it will judge from the public history alone "
        f"(critic/privileged_info_rate logs the share per update)."
    )
    if coverage.hint:
        message += " " + coverage.hint + "."
    warnings.warn(message, PrivilegedInfoWarning, stacklevel=2)
    return coverage
