"""The Tinker backend (``pip install 'tempo-rl[tinker]'``): PyTRIO's twin, through the same adapters.

API differences handled here (see the platform notes): ``ServiceClient(base_url=..., api_key=...)`` takes the
URL directly; ``create_lora_training_client`` and ``save_weights_and_get_sampling_client(name)`` return
futures; ``optim_step(optim_params=None, *, adam_params=None)`` (we pass ``adam_params=``); sampled sequences
carry no text (decoded with the tokenizer); ``forward_backward`` has no ``auto_shift`` (we always shift
ourselves).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tempo_rl._optional import require
from tempo_rl.backends.config import TinkerBackendConfig
from tempo_rl.backends.pytrio import MissingCredentialsError
from tempo_rl.backends.remote import (
    RemoteSamplingClient,
    RemoteTrainingClient,
    ServiceFlavor,
    create_lora_training_client,
    run_blocking,
)
from tempo_rl.backends.retry import call_with_retry

__all__ = ["create_tinker_clients", "tinker_credentials_available"]


def tinker_credentials_available(home: str | Path | None = None) -> bool:
    """True when ``TINKER_API_KEY`` is set or ``tinker auth login`` stored ``~/.tinker/credentials.json``."""
    if os.environ.get("TINKER_API_KEY"):
        return True
    root = Path(home) if home is not None else Path.home()
    return (root / ".tinker" / "credentials.json").is_file()


def create_tinker_clients(
    cfg: TinkerBackendConfig, *, service_client: Any = None
) -> tuple[RemoteTrainingClient, RemoteSamplingClient]:
    """A Tinker training client (LoRA on ``cfg.base_model``) and a sampling client on its initial weights.

    Raises:
        MissingCredentialsError: no ``TINKER_API_KEY`` and no stored ``tinker auth login`` credential.
    """
    tinker = require("tinker", "tinker")
    retry = cfg.retry
    if service_client is None:
        if not tinker_credentials_available():
            raise MissingCredentialsError(
                "Tinker credentials not found: run `tinker auth login` or set the TINKER_API_KEY environment "
                "variable, or use the offline backend: kind = 'local'"
            )
        kwargs = {} if cfg.base_url is None else {"base_url": cfg.base_url}
        service_client = call_with_retry(
            lambda: run_blocking(
                lambda: tinker.ServiceClient(**kwargs), retry.result_timeout_s, "tinker client"
            ),
            retry,
            what="tinker ServiceClient()",
        )

    raw = create_lora_training_client(service_client, cfg, "tinker")
    if cfg.tokenizer_path is not None:
        from tempo_rl.backends.local.tokenizer import load_tokenizer

        tok: Any = load_tokenizer(cfg.tokenizer_path)
    else:
        tok = run_blocking(raw.get_tokenizer, retry.result_timeout_s, "tinker get_tokenizer")
    flavor = ServiceFlavor(
        name="tinker",
        types=tinker.types,
        sample_kwargs={},
        forward_backward_kwargs={},
        snapshot_takes_name=True,
    )
    training = RemoteTrainingClient(raw, flavor, tok, retry)
    return training, training.save_weights_and_get_sampling_client()
