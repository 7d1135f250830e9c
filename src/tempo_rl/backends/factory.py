"""The one place clients are built: :func:`create_clients`, for every backend, with the same retry layer.

Every backend's training client comes back wrapped in :class:`~tempo_rl.backends.retry.RetryingTrainingClient`
(and its samplers in :class:`~tempo_rl.backends.retry.RetryingSamplingClient`) under the config's
``retry`` policy, so the local backend, PyTRIO and Tinker retry alike: sampling, saves, loads and snapshots on
every transient error; ``forward_backward`` and ``optim_step`` only when the request provably did not reach the
service (the remote adapters themselves make each call once, with a timeout on every wait).

A resume passes ``resume_from`` (a path ``save_state`` returned): the training client then *starts* from that
state, weights and optimizer, instead of loading it later (PyTRIO refuses a load once its trainer has started,
and the first sampling snapshot starts it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tempo_rl.backends.config import (
    AnyBackendConfig,
    LocalBackendConfig,
    PyTrioBackendConfig,
    TinkerBackendConfig,
    parse_backend_config,
)
from tempo_rl.backends.retry import RetryingSamplingClient, RetryingTrainingClient
from tempo_rl.backends.types import SamplingClient, Tokenizer, TrainingClient

__all__ = ["create_clients", "create_local_clients", "create_raw_clients"]


#: the :class:`LocalBackendConfig` fields passed, under their own names, to
#: :func:`~tempo_rl.backends.local.model.build_tiny_model` and to
#: :class:`~tempo_rl.backends.local.client.LocalTrainingClient` (each name is a parameter there: a test pins it)
_TINY_MODEL_FIELDS = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_positions", "seed")
_TRAINING_CLIENT_FIELDS = (
    "seed",
    "state_dir",
    "max_tokens_per_chunk",
    "max_batch_rows",
    "num_threads",
    "prefix_cache_bytes",
)


def _pass_through(cfg: LocalBackendConfig, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in names}


def _local_tokenizer(cfg: LocalBackendConfig) -> Any:
    """The saved tokenizer of ``tokenizer_path`` or ``model_path``, else one trained on the built-in corpus (a
    caller with texts of its env builds that tokenizer itself and passes it as ``tokenizer``)."""
    from tempo_rl.backends.local.tokenizer import build_tokenizer, load_tokenizer

    if cfg.tokenizer_path is not None:
        return load_tokenizer(cfg.tokenizer_path)
    if cfg.model_path is not None and (Path(cfg.model_path) / "tokenizer.json").is_file():
        return load_tokenizer(cfg.model_path)
    return build_tokenizer((), vocab_size=cfg.vocab_size)


def create_local_clients(cfg: LocalBackendConfig, *, tokenizer: Tokenizer | None = None) -> tuple[Any, Any]:
    """The local training client and a sampling client on its initial weights (no retry layer)."""
    from tempo_rl._optional import require
    from tempo_rl.backends.local.client import LocalTrainingClient
    from tempo_rl.backends.local.model import apply_lora, build_tiny_model, load_model, resolve_device

    torch = require("torch", "local")
    tok = tokenizer if tokenizer is not None else _local_tokenizer(cfg)
    if cfg.model_path is not None:
        model = load_model(cfg.model_path, dtype=cfg.dtype)
    else:
        model = build_tiny_model(len(tok), **_pass_through(cfg, _TINY_MODEL_FIELDS))
        if cfg.dtype != "float32":
            model = model.to(getattr(torch, cfg.dtype))
    if cfg.lora_rank > 0:
        model = apply_lora(model, cfg.lora_rank, cfg.lora_alpha)
    training = LocalTrainingClient(
        model, tok, device=resolve_device(cfg.device), **_pass_through(cfg, _TRAINING_CLIENT_FIELDS)
    )
    return training, training.save_weights_and_get_sampling_client()


def create_raw_clients(
    cfg: AnyBackendConfig,
    *,
    tokenizer: Tokenizer | None = None,
    service_client: Any = None,
    resume_from: str | None = None,
    max_sequence_tokens: int | None = None,
) -> tuple[Any, Any]:
    """:func:`create_clients` without the retry layer (the backend's own clients)."""
    if isinstance(cfg, LocalBackendConfig):
        training, sampler = create_local_clients(cfg, tokenizer=tokenizer)
        if resume_from is not None:
            training.load_state(resume_from)
            sampler = training.save_weights_and_get_sampling_client()
        return training, sampler
    if cfg.stub and service_client is None:
        from tempo_rl.backends import testing

        local, _ = create_local_clients(cfg.stub_local or LocalBackendConfig(), tokenizer=tokenizer)
        stub_cls = testing.RecordingPyTrioService if cfg.kind == "pytrio" else testing.RecordingTinkerService
        service_client = stub_cls(local)
    create_remote: Callable[..., tuple[Any, Any]]
    if isinstance(cfg, PyTrioBackendConfig):
        from tempo_rl.backends.pytrio import create_pytrio_clients as create_remote
    elif isinstance(cfg, TinkerBackendConfig):
        from tempo_rl.backends.tinker import create_tinker_clients as create_remote
    else:  # pragma: no cover - parse_backend_config only returns the three classes
        raise TypeError(
            f"unknown backend config {type(cfg).__name__}; use LocalBackendConfig, PyTrioBackendConfig or "
            "TinkerBackendConfig"
        )
    return create_remote(
        cfg, service_client=service_client, resume_from=resume_from, max_sequence_tokens=max_sequence_tokens
    )


def create_clients(
    config: AnyBackendConfig | Mapping[str, Any],
    *,
    tokenizer: Tokenizer | None = None,
    service_client: Any = None,
    resume_from: str | None = None,
    max_sequence_tokens: int | None = None,
) -> tuple[TrainingClient, SamplingClient]:
    """The training client and a sampling client on its current weights, for any backend, with retries.

    Args:
        config: a backend config (or a mapping validated with
            :func:`~tempo_rl.backends.config.parse_backend_config`).
        tokenizer: local backend (and stubbed remote backends): use this tokenizer instead of loading the
            saved one (``tokenizer_path`` or ``model_path``) or training one on the built-in corpus; a
            tokenizer trained on an env's own texts is built by the caller
            (:func:`~tempo_rl.backends.local.tokenizer.build_tokenizer`) and passed here.
        service_client: PyTRIO/Tinker only: an already constructed ``ServiceClient`` (or a stub from
            :mod:`tempo_rl.backends.testing`); by default one is created from credentials.
        resume_from: a path returned by the training client's ``save_state``: start from those weights and
            that optimizer state.
        max_sequence_tokens: the longest sample (input tokens) the caller will train on; a remote service whose
            per-sample limit is lower is refused here, before any training run is created.

    Returns:
        ``(RetryingTrainingClient, RetryingSamplingClient)``; ``training.inner`` is the backend's own client.
    """
    cfg = parse_backend_config(config)
    training, sampler = create_raw_clients(
        cfg,
        tokenizer=tokenizer,
        service_client=service_client,
        resume_from=resume_from,
        max_sequence_tokens=max_sequence_tokens,
    )
    retrying = RetryingTrainingClient(training, cfg.retry)
    wrapped: RetryingSamplingClient = retrying.wrap_sampler(sampler)
    return retrying, wrapped  # type: ignore[return-value]
