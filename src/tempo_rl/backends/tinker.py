"""The Tinker backend (``pip install 'tempo-rl[tinker]'``): PyTRIO's twin, through the same adapters.

API differences handled here (read from tinker 0.38.0): ``ServiceClient(base_url=...)`` takes the URL directly;
``create_lora_training_client``, ``create_training_client_from_state_with_optimizer`` and
``save_weights_and_get_sampling_client()`` (no ``name``: deprecated) return futures; ``sample`` and
``compute_logprobs`` return awaitable futures (their ``*_async`` twins are deprecated); ``load_state*`` is
deprecated (a resume creates the training client from the state instead); ``optim_step(optim_params=None, *,
adam_params=None)`` (we pass ``adam_params=``); sampled sequences carry no text (decoded with the tokenizer);
``forward_backward`` has no ``auto_shift`` (we always shift ourselves) and reports ``loss:sum``.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

from tempo_rl._optional import require
from tempo_rl.backends.config import TinkerBackendConfig
from tempo_rl.backends.pytrio import MissingCredentialsError
from tempo_rl.backends.remote import (
    RemoteSamplingClient,
    RemoteTrainingClient,
    ServiceFlavor,
    open_training_client,
    run_blocking,
)
from tempo_rl.backends.retry import call_with_retry

__all__ = ["create_tinker_clients", "tinker_credentials_available", "tinker_flavor"]


def tinker_credentials_available(home: str | Path | None = None) -> bool:
    """True when ``TINKER_API_KEY`` is set or ``tinker auth login`` stored ``~/.tinker/credentials.json``."""
    if os.environ.get("TINKER_API_KEY"):
        return True
    root = Path(home) if home is not None else Path.home()
    return (root / ".tinker" / "credentials.json").is_file()


def tinker_flavor(tinker: ModuleType) -> ServiceFlavor:
    """What the shared adapters need to know about tinker."""
    return ServiceFlavor(
        name="tinker",
        types=tinker.types,
        sample_kwargs={},
        forward_backward_kwargs={},
        loss_metric="loss:sum",
        async_via_future=True,
    )


def create_tinker_clients(
    cfg: TinkerBackendConfig,
    *,
    service_client: Any = None,
    resume_from: str | None = None,
    max_sequence_tokens: int | None = None,
) -> tuple[RemoteTrainingClient, RemoteSamplingClient]:
    """A Tinker training client (LoRA on ``cfg.base_model``) and a sampling client on its weights.

    Args:
        cfg: the Tinker config.
        service_client: an existing ``tinker.ServiceClient`` or a stub with its API; by default one is created.
        resume_from: a ``save_state`` path: continue from its weights and optimizer state.
        max_sequence_tokens: accepted for symmetry with PyTRIO; Tinker reports no per-sample limit to check.

    Raises:
        MissingCredentialsError: no ``TINKER_API_KEY`` and no stored ``tinker auth login`` credential.
    """
    del max_sequence_tokens
    tinker = require("tinker", "tinker")
    timeout = cfg.retry.result_timeout_s
    if service_client is None:
        if not tinker_credentials_available():
            raise MissingCredentialsError(
                "Tinker credentials not found: run `tinker auth login` or set the TINKER_API_KEY environment "
                "variable, or use the offline backend: kind = 'local'"
            )
        kwargs = {} if cfg.base_url is None else {"base_url": cfg.base_url}
        service_client = call_with_retry(
            lambda: run_blocking(lambda: tinker.ServiceClient(**kwargs), timeout, "tinker ServiceClient()"),
            cfg.retry,
            what="tinker ServiceClient()",
        )

    return open_training_client(service_client, cfg, tinker_flavor(tinker), resume_from=resume_from)
