"""The PyTRIO backend (``pip install 'tempo-rl[pytrio]'``): a LoRA training client on a hosted base model.

:func:`create_pytrio_clients` checks credentials *before* constructing ``pytrio.ServiceClient`` (which
authenticates over HTTPS at construction), imports pytrio without letting it keep its replacement
``sys.excepthook``, turns its telemetry off unless asked, and wraps the SDK clients in the shared adapters of
:mod:`tempo_rl.backends.remote` (timeouts on every wait, retries with backoff, datum validation).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tempo_rl._optional import require
from tempo_rl.backends.config import PyTrioBackendConfig
from tempo_rl.backends.remote import (
    RemoteSamplingClient,
    RemoteTrainingClient,
    ServiceFlavor,
    create_lora_training_client,
    run_blocking,
)
from tempo_rl.backends.retry import call_with_retry
from tempo_rl.backends.types import Tokenizer

__all__ = [
    "MissingCredentialsError",
    "create_pytrio_clients",
    "import_pytrio",
    "pytrio_credentials_available",
]


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


def pytrio_credentials_available(home: str | Path | None = None) -> bool:
    """True when ``PYTRIO_API_KEY`` is set or ``trio login`` has written ``~/.pytrio/config.toml``."""
    if os.environ.get("PYTRIO_API_KEY"):
        return True
    root = Path(home) if home is not None else Path.home()
    return (root / ".pytrio" / "config.toml").is_file()


def _flavor(trio: ModuleType) -> ServiceFlavor:
    return ServiceFlavor(
        name="pytrio",
        types=trio.types,
        sample_kwargs={"return_text": True},
        forward_backward_kwargs={"auto_shift": False},
        snapshot_takes_name=False,
    )


def _tokenizer(cfg: PyTrioBackendConfig, raw_training: Any) -> Tokenizer:
    if cfg.tokenizer_path is not None:
        from tempo_rl.backends.local.tokenizer import load_tokenizer

        tok: Any = load_tokenizer(cfg.tokenizer_path)
        return tok
    return run_blocking(raw_training.get_tokenizer, cfg.retry.result_timeout_s, "pytrio get_tokenizer")  # type: ignore[no-any-return]


def create_pytrio_clients(
    cfg: PyTrioBackendConfig, *, service_client: Any = None
) -> tuple[RemoteTrainingClient, RemoteSamplingClient]:
    """A PyTRIO training client (LoRA on ``cfg.base_model``) and a sampling client on its initial weights.

    Args:
        cfg: the PyTRIO config.
        service_client: an existing ``pytrio.ServiceClient`` or a stub with its API
            (:class:`tempo_rl.backends.testing.RecordingPyTrioService`); by default one is created.

    Raises:
        MissingCredentialsError: no ``PYTRIO_API_KEY`` and no ``trio login`` config (checked before any
            network call).
    """
    trio = import_pytrio(telemetry=cfg.telemetry)
    retry = cfg.retry
    if service_client is None:
        if not pytrio_credentials_available():
            raise MissingCredentialsError(
                "PyTRIO credentials not found: run `trio login` or set the PYTRIO_API_KEY environment "
                "variable (and PYTRIO_BASE_URL for a non-default service), or use the offline backend: "
                "kind = 'local'"
            )
        if cfg.base_url is not None:
            trio.configure(base_url=cfg.base_url)
        service_client = call_with_retry(
            lambda: run_blocking(trio.ServiceClient, retry.result_timeout_s, "pytrio ServiceClient()"),
            retry,
            what="pytrio ServiceClient()",
        )

    raw = create_lora_training_client(service_client, cfg, "pytrio")
    training = RemoteTrainingClient(raw, _flavor(trio), _tokenizer(cfg, raw), retry)
    return training, training.save_weights_and_get_sampling_client()
