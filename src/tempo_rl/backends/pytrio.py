"""The PyTRIO backend (``pip install 'tempo-rl[pytrio]'``): a LoRA training client on a hosted base model.

:func:`create_pytrio_clients` checks credentials *before* constructing ``pytrio.ServiceClient`` (which
authenticates over HTTPS at construction), imports pytrio without letting it keep its replacement
``sys.excepthook``, turns its telemetry off unless asked, reads the model's per-sample token limits, and wraps
the SDK clients in the shared adapters of :mod:`tempo_rl.backends.remote` (a timeout on every wait, datum
validation). Retries are added by :func:`tempo_rl.backends.factory.create_clients`.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

from tempo_rl._optional import require
from tempo_rl.backends.config import PyTrioBackendConfig
from tempo_rl.backends.remote import (
    RemoteSamplingClient,
    RemoteTrainingClient,
    SequenceLimits,
    ServiceFlavor,
    open_training_client,
    run_blocking,
    seed_pytrio_vocab_size,
)
from tempo_rl.backends.retry import call_with_retry

__all__ = [
    "MissingCredentialsError",
    "create_pytrio_clients",
    "import_pytrio",
    "pytrio_credentials_available",
    "pytrio_flavor",
    "pytrio_limits",
]


#: the settings that bound the longest sample a run sends (named in the length-limit error)
SEQUENCE_SETTINGS = (
    "the longest sample of this run (sampling.max_trajectory_tokens, or sampling.critic_max_prompt_tokens + "
    "sampling.critic_max_tokens)"
)


class MissingCredentialsError(RuntimeError):
    """No credentials for a remote service; the message names the login command and environment variable."""


def import_pytrio(*, telemetry: bool = False) -> ModuleType:
    """Import pytrio, restore ``sys.excepthook`` (pytrio replaces it on import) and set telemetry."""
    previous = sys.excepthook
    trio = require("pytrio", "pytrio")
    if getattr(sys.excepthook, "__module__", "").startswith("pytrio"):
        prev_mod = getattr(previous, "__module__", "") or ""
        sys.excepthook = sys.__excepthook__ if prev_mod.startswith("pytrio") else previous
    trio.configure_observability(enabled=telemetry)
    return trio


def _toml_string(path: Path, key: str) -> str:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, tomllib.TOMLDecodeError):
        return ""
    value = data.get(key)
    return value.strip() if isinstance(value, str) else ""


def pytrio_credentials_available(home: str | Path | None = None) -> bool:
    """True when pytrio will find an API key, resolved as pytrio 0.2.9 does, without any network call.

    In order: ``PYTRIO_API_KEY``; else the active profile's ``config.toml`` must hold a non-empty ``api_key``.
    The active profile is ``PYTRIO_ENV``, else ``active_env`` in ``~/.pytrio/env.toml``, else the default one;
    the default profile lives in ``~/.pytrio/config.toml``, a named one (``trio env use NAME``) in
    ``~/.pytrio/envs/NAME/config.toml``.
    """
    if os.environ.get("PYTRIO_API_KEY", "").strip():
        return True
    root = (Path(home) if home is not None else Path.home()) / ".pytrio"
    env = os.environ.get("PYTRIO_ENV", "").strip() or _toml_string(root / "env.toml", "active_env")
    if env in ("default", "(default)"):
        env = ""
    config = root / "config.toml" if not env else root / "envs" / env / "config.toml"
    return bool(_toml_string(config, "api_key"))


def pytrio_flavor(trio: ModuleType) -> ServiceFlavor:
    """What the shared adapters need to know about pytrio."""
    return ServiceFlavor(
        name="pytrio",
        types=trio.types,
        sample_kwargs={"return_text": True},
        forward_backward_kwargs={"auto_shift": False},
        loss_metric="loss_sum",
        async_via_future=False,
    )


def pytrio_limits(service_client: Any, base_model: str, timeout_s: float) -> SequenceLimits:
    """The training and sampling limits pytrio reports for ``base_model`` (``get_server_capabilities()``); no
    limits when the service client has no such call or does not list the model."""
    get = getattr(service_client, "get_server_capabilities", None)
    if get is None:
        return SequenceLimits()
    caps = run_blocking(get, timeout_s, "pytrio get_server_capabilities")
    for model in getattr(caps, "supported_models", None) or []:
        if model.model_name == base_model:
            return SequenceLimits(
                max_seq_len=model.training.max_seq_len,
                max_tokens_per_request=model.training.max_tokens_per_request,
                sample_max_seq_len=model.sampling.max_seq_len,
            )
    return SequenceLimits()


def create_pytrio_clients(
    cfg: PyTrioBackendConfig,
    *,
    service_client: Any = None,
    resume_from: str | None = None,
    max_sequence_tokens: int | None = None,
) -> tuple[RemoteTrainingClient, RemoteSamplingClient]:
    """A PyTRIO training client (LoRA on ``cfg.base_model``) and a sampling client on its weights.

    Args:
        cfg: the PyTRIO config.
        service_client: an existing ``pytrio.ServiceClient`` or a stub with its API
            (:class:`tempo_rl.backends.testing.RecordingPyTrioService`); by default one is created.
        resume_from: a ``save_state`` path: continue from its weights and optimizer state.
        max_sequence_tokens: the longest sample the run will send; checked against the model's limits here,
            at the start, rather than rejected mid-run.

    Raises:
        MissingCredentialsError: no ``PYTRIO_API_KEY`` and no API key in the active profile (checked before any
            network call).
        ValueError: ``max_sequence_tokens`` exceeds the model's per-sample limit.
    """
    trio = import_pytrio(telemetry=cfg.telemetry)
    timeout = cfg.retry.result_timeout_s
    if service_client is None:
        if not pytrio_credentials_available():
            raise MissingCredentialsError(
                "PyTRIO credentials not found: run `trio login` (or `trio env use NAME` for a named profile) or "
                "set the PYTRIO_API_KEY environment variable (and PYTRIO_BASE_URL for a non-default service), or "
                "use the offline backend: kind = 'local'"
            )
        if cfg.base_url is not None:
            trio.configure(base_url=cfg.base_url)
        service_client = call_with_retry(
            lambda: run_blocking(trio.ServiceClient, timeout, "pytrio ServiceClient()"),
            cfg.retry,
            what="pytrio ServiceClient()",
        )

    limits = pytrio_limits(service_client, cfg.base_model, timeout)
    if max_sequence_tokens is not None:  # before any training run is created
        limits.check(max_sequence_tokens, SEQUENCE_SETTINGS, "pytrio")

    prepare = seed_pytrio_vocab_size if cfg.tokenizer_path is not None else None
    training, sampler = open_training_client(
        service_client,
        cfg,
        pytrio_flavor(trio),
        resume_from=resume_from,
        limits=limits,
        prepare=prepare,
    )
    return training, sampler
