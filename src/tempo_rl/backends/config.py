"""Backend configuration (pydantic) and the one factory the trainer calls: :func:`create_clients`.

``BackendConfig`` is a discriminated union on ``kind`` (``"local"`` | ``"pytrio"`` | ``"tinker"``), so a TOML
table such as ``[backend] kind = "pytrio" base_model = "..." lora_rank = 32`` validates into the right class.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

    from tempo_rl.backends.types import SamplingClient, Tokenizer, TrainingClient

__all__ = [
    "BackendConfig",
    "LocalBackendConfig",
    "PyTrioBackendConfig",
    "RetryConfig",
    "TinkerBackendConfig",
    "create_clients",
    "parse_backend_config",
]


class RetryConfig(BaseModel):
    """Timeouts and retries for remote services (seconds)."""

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
        default=None, description="local tokenizer dir (avoids the modelscope download)"
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


BackendConfig = Annotated[
    LocalBackendConfig | PyTrioBackendConfig | TinkerBackendConfig, Field(discriminator="kind")
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(BackendConfig)


def parse_backend_config(
    data: dict[str, Any],
) -> LocalBackendConfig | PyTrioBackendConfig | TinkerBackendConfig:
    """Validate a mapping (e.g. a TOML table) into the config class named by its ``kind``."""
    result: LocalBackendConfig | PyTrioBackendConfig | TinkerBackendConfig = _ADAPTER.validate_python(data)
    return result


def _local_tokenizer(cfg: LocalBackendConfig, corpus: Iterable[str] | None) -> Any:
    from tempo_rl.backends.local.tokenizer import build_tokenizer, load_tokenizer

    if cfg.tokenizer_path is not None:
        return load_tokenizer(cfg.tokenizer_path)
    if cfg.model_path is not None and (Path(cfg.model_path) / "tokenizer.json").is_file():
        return load_tokenizer(cfg.model_path)
    return build_tokenizer(corpus or (), vocab_size=cfg.vocab_size)


def create_local_clients(
    cfg: LocalBackendConfig, *, tokenizer: Tokenizer | None = None, corpus: Iterable[str] | None = None
) -> tuple[TrainingClient, SamplingClient]:
    """Build the local training client and a sampling client on its initial weights."""
    from tempo_rl._optional import require
    from tempo_rl.backends.local.client import LocalTrainingClient
    from tempo_rl.backends.local.model import apply_lora, build_tiny_model, load_model, resolve_device

    torch = require("torch", "local")
    tok = tokenizer if tokenizer is not None else _local_tokenizer(cfg, corpus)
    if cfg.model_path is not None:
        model = load_model(cfg.model_path, dtype=cfg.dtype)
    else:
        model = build_tiny_model(
            len(tok),
            hidden_size=cfg.hidden_size,
            num_layers=cfg.num_layers,
            num_heads=cfg.num_heads,
            intermediate_size=cfg.intermediate_size,
            max_positions=cfg.max_positions,
            seed=cfg.seed,
        )
        if cfg.dtype != "float32":
            model = model.to(getattr(torch, cfg.dtype))
    if cfg.lora_rank > 0:
        model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha)
    training = LocalTrainingClient(
        model,
        tok,
        device=resolve_device(cfg.device),
        seed=cfg.seed,
        state_dir=cfg.state_dir,
        max_tokens_per_chunk=cfg.max_tokens_per_chunk,
        max_batch_rows=cfg.max_batch_rows,
        num_threads=cfg.num_threads,
        prefix_cache_bytes=cfg.prefix_cache_bytes,
    )
    return training, training.save_weights_and_get_sampling_client()


def create_clients(
    config: LocalBackendConfig | PyTrioBackendConfig | TinkerBackendConfig | dict[str, Any],
    *,
    tokenizer: Tokenizer | None = None,
    corpus: Iterable[str] | None = None,
    service_client: Any = None,
) -> tuple[TrainingClient, SamplingClient]:
    """The training client and a sampling client on its current weights, for any backend.

    Args:
        config: a backend config (or a mapping validated with :func:`parse_backend_config`).
        tokenizer: local backend (and stubbed remote backends): use this tokenizer instead of loading or
            building one.
        corpus: local backend (and stubbed remote backends): texts to train the offline tokenizer on when
            none is saved.
        service_client: PyTRIO/Tinker only: an already constructed ``ServiceClient`` (or a stub from
            :mod:`tempo_rl.backends.testing`); by default one is created from credentials.
    """
    cfg = parse_backend_config(config) if isinstance(config, dict) else config
    if isinstance(cfg, LocalBackendConfig):
        return create_local_clients(cfg, tokenizer=tokenizer, corpus=corpus)
    if isinstance(cfg, (PyTrioBackendConfig, TinkerBackendConfig)) and cfg.stub and service_client is None:
        from tempo_rl.backends import testing

        local, _ = create_local_clients(
            cfg.stub_local or LocalBackendConfig(), tokenizer=tokenizer, corpus=corpus
        )
        stub_cls = testing.RecordingPyTrioService if cfg.kind == "pytrio" else testing.RecordingTinkerService
        service_client = stub_cls(local)
    if isinstance(cfg, PyTrioBackendConfig):
        from tempo_rl.backends.pytrio import create_pytrio_clients

        return create_pytrio_clients(cfg, service_client=service_client)
    if isinstance(cfg, TinkerBackendConfig):
        from tempo_rl.backends.tinker import create_tinker_clients

        return create_tinker_clients(cfg, service_client=service_client)
    raise TypeError(
        f"unknown backend config {type(cfg).__name__}; use LocalBackendConfig, PyTrio... or Tinker..."
    )
