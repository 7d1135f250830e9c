"""Group-relative advantages (TEMPO signal 3, and the centring of signal 4) and degenerate-group detection.

Source: the TEMPO blog as described in the seed write-up: A_n = R_n - mean(R), "standard GRPO: subtract the
group mean" with no std division; the critic's error rewards are centred the same way over the K samples of
one start state. A group whose advantages are all zero carries no gradient and is skipped (no Datum).
"""

from __future__ import annotations

from typing import Any

from tempo_rl.signals._array import (
    check_has_group_axis,
    group_mean,
    masked_floats,
    prepare_mask,
    resolve_backend,
)

__all__ = ["STD_EPS", "degenerate_groups", "group_advantages"]

#: A group whose (population) std is at most this is treated as constant by ``normalize="std"``: its centred
#: values are returned undivided (they are ~0), instead of being blown up by a division by ~0.
STD_EPS = 1e-8

_NORMALIZE = (None, "std")


def group_advantages(values: Any, *, mask: Any = None, normalize: str | None = None) -> Any:
    """Centre values within each group (TEMPO signal 3 for actor returns; also used for critic rewards).

    A_i = x_i - mean_g(x)                                  (normalize=None, TEMPO's default: centred only)
    A_i = (x_i - mean_g(x)) / std_g(x)                     (normalize="std", the original GRPO)

    mean_g and std_g run over the unmasked entries of the group (last axis); std_g is the population standard
    deviation sqrt(mean_g((x - mean_g x)**2)). Groups with std_g <= ``STD_EPS`` are left undivided (guard
    against a zero std). Masked entries return 0; a group with no unmasked entry returns all zeros.

    Args:
        values: x, shape ``[..., N]``; the last axis is the group axis.
        mask: optional bool, shape ``[..., N]``; False marks padding.
        normalize: None (centre only) or ``"std"`` (centre and divide by the group std).

    Returns:
        A, shape ``[..., N]``, same array type, device and float dtype as ``values``. Unmasked entries of a
        group sum to 0.

    Raises:
        ValueError: unknown ``normalize``, scalar input, mask shape mismatch, non-finite unmasked values.

    Example::

        >>> group_advantages([0.6, 0.2, 1.0, 0.0])
        array([ 0.15, -0.25,  0.55, -0.45])
    """
    if normalize not in _NORMALIZE:
        raise ValueError(f"normalize must be one of {_NORMALIZE}; got {normalize!r}.")
    b, x, m = masked_floats("values", values, mask)
    mean, _ = group_mean(b, x, m)
    centred = x - mean[..., None]
    if m is not None:
        centred = b.where(m, centred, 0.0)
    if normalize == "std":
        var, _ = group_mean(b, centred * centred, m)
        std = b.sqrt(var)
        safe = b.where(std > STD_EPS, std, 1.0)
        centred = centred / safe[..., None]
    return b.finish(centred)


def degenerate_groups(advantages: Any, *, mask: Any = None, atol: float = 1e-12) -> Any:
    """True for each group whose every unmasked advantage satisfies |A| <= atol (it carries no gradient).

    degenerate_g = all_{i in M_g} |A_gi| <= atol       (True for a group with no unmasked entry)

    Args:
        advantages: A, shape ``[..., N]``; the last axis is the group axis.
        mask: optional bool, shape ``[..., N]``; False marks padding (ignored).
        atol: non-negative absolute tolerance.

    Returns:
        bool array of shape ``[...]`` (numpy ``bool_`` array, or a torch bool tensor on the input's device).

    Raises:
        ValueError: negative/NaN ``atol``, scalar input, mask shape mismatch, NaN unmasked advantages.

    Example::

        >>> degenerate_groups([[0.0, 0.0], [0.5, -0.5]])
        array([ True, False])
    """
    if not float(atol) >= 0.0:
        raise ValueError(f"atol must be a non-negative tolerance; got {atol!r}.")
    b = resolve_backend(advantages, mask)
    a = b.floats(advantages, "advantages")
    check_has_group_axis("advantages", a)
    m = prepare_mask(b, mask, a, "advantages")
    bad = b.isnan(a) if m is None else (b.isnan(a) & m)
    if b.any(bad):
        raise ValueError(f"advantages has {int(bad.sum())} NaN unmasked entries.")
    small = b.abs(a) <= float(atol)
    if m is not None:
        small = small | ~m
    return b.finish(b.all_last(small))
