"""Lazy imports of optional dependencies with an actionable error message."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependencyError(ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` that fixes it."""


def require(module: str, extra: str, *, package: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError` naming the extra that provides it.

    Args:
        module: dotted module name to import, e.g. ``"torch"``.
        extra: the tempo-rl extra that installs it, e.g. ``"local"``.
        package: the distribution name when it differs from the module name (for the message only).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised through callers
        name = package or module.split(".")[0]
        raise MissingDependencyError(
            f"{name!r} is required for this feature but is not installed. "
            f"Install it with: pip install 'tempo-rl[{extra}]'"
        ) from exc
