"""Test-only tools: fault injection (:mod:`tempo_rl.testing.faults`) and scripted policies
(:mod:`tempo_rl.testing.policies`).

Nothing here is imported by the library itself; it exists so that tests (yours too) can prove that a training
run survives crashed and hung envs, diverging replays, backend errors and model-output garbage.
"""

from __future__ import annotations

__all__ = ["faults", "policies"]
