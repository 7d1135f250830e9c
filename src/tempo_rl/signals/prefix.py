"""Importance weights for stale token prefixes (the TEMPO blog's open item 1, prefix correction).

Source: the TEMPO blog's appendix as described in the seed write-up: optimising one uniformly sampled
macro-step of a trajectory is an unbiased estimate of the full-trajectory policy gradient only if the prefix
that led to the start state also follows the current policy. Start states are reused from a store, so their
prefixes were sampled by older policies; weighting each branch's advantage by the prefix likelihood ratio
corrects this:

    w = pi_new(prefix) / pi_old(prefix) = exp(sum_t log pi_new(a_t) - sum_t log pi_old(a_t))

where the sums run over the prefix's sampled assistant tokens (log-probabilities in nats).
"""

from __future__ import annotations

import math
from typing import Any

from tempo_rl.signals._array import check_finite, check_same_shape, resolve_backend

__all__ = ["prefix_importance_weights"]


def prefix_importance_weights(
    new_logprob_sums: Any,
    old_logprob_sums: Any,
    *,
    clip: tuple[float, float] | None = None,
) -> Any:
    """Per-prefix likelihood ratio w = exp(new - old), optionally clipped to ``[low, high]``.

    w = clip(exp(L_new - L_old), low, high)

    Clipping is applied in log space before exponentiating (so huge log-ratios never overflow) and the result
    is then clamped to the exact bounds.

    Args:
        new_logprob_sums: L_new, any shape: summed log-probabilities (nats) of each prefix under the current
            policy.
        old_logprob_sums: L_old, same shape: the same sums under the policy that sampled the prefix.
        clip: optional ``(low, high)`` with 0 <= low <= high (``high`` may be ``inf``).

    Returns:
        w, same shape, array type, device and float dtype as the inputs.

    Raises:
        ValueError: mismatched shapes, non-finite log-probability sums, or an invalid ``clip``.

    Example::

        >>> prefix_importance_weights([-1.0, -3.0], [-2.0, -1.0], clip=(0.5, 2.0))
        array([2. , 0.5])
    """
    log_bounds: tuple[float | None, float | None] = (None, None)
    bounds: tuple[float | None, float | None] = (None, None)
    if clip is not None:
        try:
            low, high = (float(c) for c in clip)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"clip must be a pair (low, high) of floats or None; got {clip!r}.") from exc
        if math.isnan(low) or math.isnan(high) or not 0.0 <= low <= high or math.isinf(low):
            raise ValueError(f"clip must satisfy 0 <= low <= high (high may be inf); got {clip!r}.")
        log_bounds = (math.log(low) if low > 0 else None, math.log(high) if math.isfinite(high) else None)
        bounds = (low, high if math.isfinite(high) else None)
    b = resolve_backend(new_logprob_sums, old_logprob_sums)
    new = b.floats(new_logprob_sums, "new_logprob_sums")
    old = b.floats(old_logprob_sums, "old_logprob_sums")
    check_same_shape("new_logprob_sums", new, old_logprob_sums=old)
    check_finite(b, "new_logprob_sums", new)
    check_finite(b, "old_logprob_sums", old)
    log_ratio = new - old
    if clip is None:
        return b.finish(b.exp(log_ratio))
    weights = b.exp(b.clip(log_ratio, *log_bounds))
    return b.finish(b.clip(weights, *bounds))
