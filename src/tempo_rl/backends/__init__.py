"""Model backends behind one PyTRIO-shaped protocol: local torch (offline), PyTRIO and Tinker.

Importing this package needs only numpy and pydantic; torch, pytrio and tinker are imported by the backend
that needs them (:mod:`tempo_rl.backends.local`, :mod:`tempo_rl.backends.pytrio`,
:mod:`tempo_rl.backends.tinker`). Start with :func:`create_clients` (:mod:`tempo_rl.backends.factory`); the
config classes (:mod:`tempo_rl.backends.config`) are plain data.
"""

from __future__ import annotations

from tempo_rl.backends.config import (
    AnyBackendConfig,
    BackendConfig,
    LocalBackendConfig,
    PyTrioBackendConfig,
    RetryConfig,
    TinkerBackendConfig,
    parse_backend_config,
)
from tempo_rl.backends.factory import create_clients
from tempo_rl.backends.types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    LossFn,
    SampledSequence,
    SampleResult,
    SamplingClient,
    SamplingParams,
    Tokenizer,
    TrainingClient,
)
from tempo_rl.backends.validation import DatumError, validate_datum, validate_datums

__all__ = [
    "AdamParams",
    "AnyBackendConfig",
    "BackendConfig",
    "Datum",
    "DatumError",
    "ForwardBackwardOutput",
    "LocalBackendConfig",
    "LossFn",
    "PyTrioBackendConfig",
    "RetryConfig",
    "SampleResult",
    "SampledSequence",
    "SamplingClient",
    "SamplingParams",
    "TinkerBackendConfig",
    "Tokenizer",
    "TrainingClient",
    "create_clients",
    "parse_backend_config",
    "validate_datum",
    "validate_datums",
]
