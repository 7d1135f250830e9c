"""Checks run on every Datum before it is sent anywhere (local backend, PyTRIO, Tinker).

A malformed datum fails here with a message that names the datum, the field and the fix, instead of failing
deep inside a service call or, worse, training silently on shifted or out-of-vocabulary tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tempo_rl.backends.types import Datum

__all__ = [
    "IGNORE_INDEX",
    "LOSS_INPUTS",
    "DatumError",
    "validate_datum",
    "validate_datums",
    "validate_loss_fn",
]

#: target id that masks a position out of every loss (PyTRIO/Tinker convention)
IGNORE_INDEX = -100

#: required ``loss_fn_inputs`` keys per loss (``weights`` is optional for cross-entropy)
LOSS_INPUTS: dict[str, tuple[str, ...]] = {
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cross_entropy": ("target_tokens",),
}
_FLOAT_KEYS = ("logprobs", "advantages", "weights")


class DatumError(ValueError):
    """A Datum is malformed; the message names the datum index, the field and the fix."""


def validate_loss_fn(loss_fn: str, loss_fn_config: Mapping[str, Any] | None) -> dict[str, float]:
    """Check the loss name and its config; return the effective config (PPO bounds filled in)."""
    if loss_fn not in LOSS_INPUTS:
        raise ValueError(f"unknown loss_fn {loss_fn!r}; use one of {sorted(LOSS_INPUTS)}")
    cfg = dict(loss_fn_config or {})
    if loss_fn == "ppo":
        low = float(cfg.get("clip_low_threshold", 0.8))
        high = float(cfg.get("clip_high_threshold", 1.2))
        if not 0.0 <= low <= 1.0 <= high:
            raise ValueError(
                f"ppo ratio bounds must satisfy 0 <= clip_low_threshold <= 1 <= clip_high_threshold, "
                f"got {low} and {high} (they are ratio bounds like 0.8 / 1.2, not epsilons)"
            )
        unknown = set(cfg) - {"clip_low_threshold", "clip_high_threshold"}
        if unknown:
            raise ValueError(f"unknown ppo loss_fn_config keys {sorted(unknown)}")
        return {"clip_low_threshold": low, "clip_high_threshold": high}
    if cfg:
        raise ValueError(f"loss_fn {loss_fn!r} takes no loss_fn_config, got {sorted(cfg)}")
    return {}


def validate_datum(datum: Datum, vocab_size: int, loss_fn: str | None = None, index: int = 0) -> None:
    """Raise :class:`DatumError` unless ``datum`` is well formed.

    Checks: ``model_input`` is non-empty with ids in ``[0, vocab_size)``; ``target_tokens`` is an integer
    array of the same length with ids in ``[0, vocab_size)`` or ``-100``; float inputs have the same length
    and are finite; the keys the loss needs are present (when ``loss_fn`` is given) and no unknown key is
    present.
    """
    where = f"datum {index}"
    if not isinstance(datum, Datum):
        raise DatumError(f"{where}: expected tempo_rl.backends.Datum, got {type(datum).__name__}")
    n = len(datum.model_input)
    if n == 0:
        raise DatumError(f"{where}: model_input is empty; a datum needs at least 2 tokens before the shift")
    ids = np.asarray(datum.model_input)
    if ids.dtype.kind not in "iu":
        raise DatumError(f"{where}: model_input must hold ints, got dtype {ids.dtype}")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise DatumError(
            f"{where}: model_input ids must be in [0, {vocab_size}) (the tokenizer's vocabulary), "
            f"got min {ids.min()} max {ids.max()}"
        )
    inputs = datum.loss_fn_inputs
    unknown = set(inputs) - {"target_tokens", *_FLOAT_KEYS}
    if unknown:
        raise DatumError(f"{where}: unknown loss_fn_inputs keys {sorted(unknown)}")
    if "target_tokens" not in inputs:
        raise DatumError(
            f"{where}: loss_fn_inputs lacks 'target_tokens' (tokens[1:], built by rollout.datums)"
        )
    tgt = np.asarray(inputs["target_tokens"])
    if tgt.dtype.kind not in "iu":
        raise DatumError(f"{where}: target_tokens must be int64, got dtype {tgt.dtype}")
    if tgt.shape != (n,):
        raise DatumError(
            f"{where}: target_tokens has shape {tgt.shape} but model_input has {n} tokens; both must be "
            "len(tokens) - 1 (the one-token shift)"
        )
    bad = (tgt != IGNORE_INDEX) & ((tgt < 0) | (tgt >= vocab_size))
    if bad.any():
        raise DatumError(
            f"{where}: target_tokens {tgt[bad][:5].tolist()} are outside [0, {vocab_size}) and not -100"
        )
    for key in _FLOAT_KEYS:
        if key in inputs:
            arr = np.asarray(inputs[key])
            if arr.shape != (n,):
                raise DatumError(f"{where}: {key} has shape {arr.shape}, expected ({n},) like target_tokens")
            if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)):
                raise DatumError(f"{where}: {key} must be finite floats (float32)")
    if loss_fn is not None:
        missing = [k for k in LOSS_INPUTS.get(loss_fn, ()) if k not in inputs]
        if missing:
            raise DatumError(f"{where}: loss_fn {loss_fn!r} needs loss_fn_inputs {missing}")


def validate_datums(datums: Sequence[Datum], vocab_size: int, loss_fn: str | None = None) -> None:
    """:func:`validate_datum` on each datum; an empty batch is an error too."""
    if len(datums) == 0:
        raise DatumError(
            "forward_backward got an empty batch; skip the call when there is nothing to train on"
        )
    for i, d in enumerate(datums):
        validate_datum(d, vocab_size, loss_fn, index=i)
