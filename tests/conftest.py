"""Suite-wide fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _env_registry_is_restored() -> Iterator[None]:
    """Envs a test registers (the README's and the docs' examples do) must not outlive it: the coverage checks
    that list the registry would otherwise depend on the order tests run in."""
    from tempo_rl.envs import registry

    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)
