"""The offline local backend (``pip install 'tempo-rl[local]'``): torch + transformers, no download.

Importing this package does not import torch; the functions and classes below import it when called.
"""

from __future__ import annotations

from tempo_rl.backends.local.client import (
    CHECKPOINT_NAME_RE,
    LocalSamplingClient,
    LocalTrainingClient,
    check_checkpoint_name,
)
from tempo_rl.backends.local.model import apply_lora, build_tiny_model, load_model, resolve_device
from tempo_rl.backends.local.pretrained import ModelFetchError, cached_model_path, fetch_model
from tempo_rl.backends.local.tokenizer import CHATML_TEMPLATE, build_tokenizer, load_tokenizer

__all__ = [
    "CHATML_TEMPLATE",
    "CHECKPOINT_NAME_RE",
    "LocalSamplingClient",
    "LocalTrainingClient",
    "ModelFetchError",
    "apply_lora",
    "build_tiny_model",
    "build_tokenizer",
    "cached_model_path",
    "check_checkpoint_name",
    "fetch_model",
    "load_model",
    "load_tokenizer",
    "resolve_device",
]
