"""Backend configuration (pydantic data model only; the clients are built by :mod:`tempo_rl.backends.factory`).

``BackendConfig`` is a discriminated union on ``kind`` (``"local"`` | ``"pytrio"`` | ``"tinker"``), so a TOML
table such as ``[backend] kind = "pytrio" base_model = "..." lora_rank = 32`` validates into the right class.
This module is a leaf: it imports nothing else from tempo-rl, so every other backend module may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "AnyBackendConfig",
    "BackendConfig",
    "LocalBackendConfig",
    "PyTrioBackendConfig",
    "RetryConfig",
    "TinkerBackendConfig",
    "parse_backend_config",
]


class RetryConfig(BaseModel):
    """Timeouts and retries of every backend's calls (seconds), applied by :mod:`tempo_rl.backends.factory`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    result_timeout_s: float = Field(
        default=600.0, gt=0, description="wait at most this long for any one result"
    )
    max_attempts: int = Field(default=5, ge=1, description="tries per call (1 = no retry)")
    backoff_initial_s: float = Field(default=1.0, ge=0, description="first retry delay; doubles each retry")
    backoff_max_s: float = Field(default=30.0, ge=0, description="cap on one retry delay")
    jitter: float = Field(default=0.1, ge=0, le=1, description="relative random jitter of each delay")


class LocalBackendConfig(BaseModel):
    """The offline torch backend: a tiny model built in code (default) or a local checkpoint directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local"] = "local"
    model_path: str | None = Field(
        default=None, description="local HF checkpoint dir; None builds the tiny model"
    )
    tokenizer_path: str | None = Field(
        default=None, description="saved tokenizer dir; None: model_path's or build one"
    )
    vocab_size: int = Field(
        default=1024, ge=264, description="target vocabulary of a tokenizer built in-process"
    )
    hidden_size: int = Field(default=64, ge=8)
    num_layers: int = Field(default=2, ge=1)
    num_heads: int = Field(default=4, ge=1)
    intermediate_size: int | None = Field(default=None, ge=8)
    max_positions: int = Field(default=8192, ge=16)
    lora_rank: int = Field(default=0, ge=0, description="0 = train all weights; >0 = peft LoRA of this rank")
    lora_alpha: float | None = None
    seed: int = 0
    device: str = Field(
        default="auto", description="'auto' (CUDA when present), 'cpu', 'cuda', 'cuda:1', ..."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    num_threads: int | None = Field(
        default=None,
        ge=1,
        description="torch CPU threads (None: 1 for a small model on CPU, else torch's default)",
    )
    state_dir: str = "checkpoints"
    max_batch_rows: int = Field(default=64, ge=1)
    max_tokens_per_chunk: int = Field(default=16384, ge=16)
    prefix_cache_bytes: int | None = Field(
        default=None,
        ge=0,
        description="KV prefix cache budget per sampling client, bytes (reuses the KV of prompt prefixes "
        "across turns, branches and critic samples); None: 1/8 of the device's memory; 0: off",
    )
    retry: RetryConfig = Field(default_factory=RetryConfig)


class PyTrioBackendConfig(BaseModel):
    """PyTRIO (``pip install 'tempo-rl[pytrio]'``): a LoRA training client on a hosted base model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["pytrio"] = "pytrio"
    base_model: str = "Qwen/Qwen3-4B"
    lora_rank: int = Field(default=32, ge=4, le=64)
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True
    base_url: str | None = Field(
        default=None, description="service URL (else PYTRIO_BASE_URL / trio login config)"
    )
    tokenizer_path: str | None = Field(
        default=None,
        description="local tokenizer dir of base_model: tempo-rl tokenizes with it, and pytrio's "
        "forward_backward takes its vocabulary size from it instead of downloading the tokenizer",
    )
    telemetry: bool = False
    retry: RetryConfig = Field(default_factory=RetryConfig)
    stub: bool = Field(
        default=False,
        description="offline: serve the calls with tempo_rl.backends.testing's recording stub (real pytrio "
        "types, every call checked) over a local model built from stub_local; for tests and CI",
    )
    stub_local: LocalBackendConfig | None = None


class TinkerBackendConfig(BaseModel):
    """Tinker (``pip install 'tempo-rl[tinker]'``): like PyTRIO, through an adapter for API differences."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["tinker"] = "tinker"
    base_model: str = "Qwen/Qwen3-4B-Instruct-2507"
    lora_rank: int = Field(default=32, ge=1)
    seed: int | None = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True
    base_url: str | None = None
    tokenizer_path: str | None = None
    retry: RetryConfig = Field(default_factory=RetryConfig)
    stub: bool = Field(default=False, description="offline: the recording Tinker stub over a local model")
    stub_local: LocalBackendConfig | None = None


#: any one backend config (the plain union, for annotations)
AnyBackendConfig = LocalBackendConfig | PyTrioBackendConfig | TinkerBackendConfig
#: the union tagged by ``kind`` (for pydantic fields such as ``TrainConfig.backend``)
BackendConfig = Annotated[AnyBackendConfig, Field(discriminator="kind")]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(BackendConfig)


def parse_backend_config(data: Mapping[str, Any] | AnyBackendConfig) -> AnyBackendConfig:
    """Validate a mapping (e.g. a TOML table; ``kind`` defaults to ``"local"``) into the config class named by
    its ``kind``; a config object is returned as it is."""
    if isinstance(data, (LocalBackendConfig, PyTrioBackendConfig, TinkerBackendConfig)):
        return data
    mapping = dict(data)
    mapping.setdefault("kind", "local")
    result: AnyBackendConfig = _ADAPTER.validate_python(mapping)
    return result
