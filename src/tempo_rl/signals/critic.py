"""Rewards for the generative critic's value estimates (TEMPO signal 4).

Source: the TEMPO blog as described in the seed write-up: the critic is sampled K times on the same start
state; each estimate V_k is rewarded by how close it lands to the start state's target G (the TD target of
:func:`tempo_rl.signals.td_targets`, or a Monte Carlo return during warm-up), normalised by the range of the
remaining return R_max so that rewards are comparable across states:

    (4) r_k = -|V_k - G| / R_max                       (error="l1", the blog's)

The rewards are then centred over the K samples with :func:`tempo_rl.signals.group_advantages`.

The L1 error is minimised in expectation by the *median* of the outcome distribution, which for a binary
outcome is 0 or 1. ``error="brier"`` uses the squared error r_k = -((V_k - G) / R_max)**2, a strictly proper
scoring rule whose expected optimum is the mean, i.e. a calibrated success probability.
"""

from __future__ import annotations

import math
from typing import Any

from tempo_rl.signals._array import check_finite, check_has_group_axis, resolve_backend

__all__ = ["CRITIC_ERRORS", "critic_rewards"]

#: Allowed values of ``critic_rewards(error=...)``.
CRITIC_ERRORS = ("l1", "brier")


def critic_rewards(
    estimates: Any,
    targets: Any,
    *,
    r_max: float = 1.0,
    error: str = "l1",
    failure_reward: float = -1.0,
) -> Any:
    """Reward each critic estimate by its error against the group's target (TEMPO signal 4).

    r_k = -|V_k - G| / R_max              (error="l1")
    r_k = -((V_k - G) / R_max)**2         (error="brier")
    r_k = failure_reward                  where V_k is NaN (the critic output did not parse)

    With V_k and G in [0, R_max] both errors lie in [-1, 0].

    Args:
        estimates: V, shape ``[..., K]``: K parsed value estimates per start state, NaN = unparsed.
        targets: G, shape ``[...]`` (= ``estimates.shape[:-1]``; a scalar for one group) or ``[..., 1]``: one
            target per group, broadcast over the K samples.
        r_max: R_max > 0, the range of the remaining return (1 for a binary success reward).
        error: ``"l1"`` or ``"brier"``.
        failure_reward: reward of an unparsed estimate (finite; default -1, the worst L1 reward).

    Returns:
        r, shape ``[..., K]``, same array type, device and float dtype as the inputs.

    Raises:
        ValueError: unknown ``error``, r_max <= 0, non-finite ``failure_reward``, a target shape other than
            ``estimates.shape[:-1]``, non-finite targets, or infinite estimates.

    Example (the issue's worked example)::

        >>> critic_rewards([0.5, float("nan"), 0.45, 0.9], 0.45)
        array([-0.05, -1.  ,  0.  , -0.45])
    """
    if error not in CRITIC_ERRORS:
        raise ValueError(f"error must be one of {CRITIC_ERRORS}; got {error!r}.")
    if not (math.isfinite(float(r_max)) and float(r_max) > 0.0):
        raise ValueError(f"r_max must be a positive finite reward range (R_max); got {r_max!r}.")
    if not math.isfinite(float(failure_reward)):
        raise ValueError(f"failure_reward must be a finite float; got {failure_reward!r}.")
    b = resolve_backend(estimates, targets)
    v = b.floats(estimates, "estimates")
    g = b.floats(targets, "targets")
    check_has_group_axis("estimates", v)
    groups = tuple(v.shape[:-1])
    if tuple(g.shape) == (*groups, 1):  # keepdims-style targets, e.g. td_targets(...)[..., None]
        g = g[..., 0]
    if tuple(g.shape) != groups:
        raise ValueError(
            f"targets has shape {tuple(g.shape)} but needs one value per group, shape {groups} "
            f"(estimates.shape[:-1] for estimates of shape {tuple(v.shape)}; a trailing axis of size 1 is "
            "also accepted)."
        )
    check_finite(b, "targets", g)
    unparsed = b.isnan(v)
    check_finite(b, "estimates", v, ~unparsed, hint="NaN marks an unparsed estimate; inf is an error.")
    diff = v - g[..., None]
    if float(r_max) != 1.0:
        diff = diff / float(r_max)
    # 0.0 - x (not -x) so that an exact estimate scores +0.0 rather than -0.0.
    reward = 0.0 - b.abs(diff) if error == "l1" else 0.0 - diff * diff
    return b.finish(b.where(unparsed, float(failure_reward), reward))
