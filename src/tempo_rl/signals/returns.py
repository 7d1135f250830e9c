"""Returns and value targets: TEMPO's branch returns (signal 1), TD targets (signal 2), Monte Carlo returns.

Source: the TEMPO blog (Xiaohongshu Dots team, "TEMPO: Test-Time-Scaled Value Estimation with Macro-Step
Policy Optimization") as described in the seed write-up: from one start state sample N branches of one
macro-step (<= H rounds) each; branch n has in-segment environment reward r_n and, unless it terminated, a
critic estimate V_n of its endpoint state.

    (1) R_n = r_n + V_hat(endpoint_n)          (the truncated tail is filled in by the critic)
    (2) G   = mean(R_1 .. R_N)                 ("what the start state is worth")

Warm-up replaces G by the Monte Carlo return of a complete trajectory (:func:`monte_carlo_returns`).
Rewards and values are in the environment's reward units (R_max = 1 for TEMPO's binary success reward).
"""

from __future__ import annotations

import math
from typing import Any

from tempo_rl.signals._array import (
    check_finite,
    check_same_shape,
    group_mean,
    masked_floats,
    resolve_backend,
)

__all__ = ["branch_returns", "monte_carlo_returns", "td_targets"]


def _check_gamma(gamma: float) -> float:
    g = float(gamma)
    if not (math.isfinite(g) and 0.0 <= g <= 1.0):
        raise ValueError(f"gamma must be a discount factor in [0, 1]; got {gamma!r}.")
    return g


def branch_returns(
    segment_rewards: Any,
    endpoint_values: Any,
    terminated: Any,
    *,
    gamma: float = 1.0,
    segment_lengths: Any = None,
    missing_value: float | None = None,
) -> Any:
    """Bootstrapped return of each macro-step branch (TEMPO signal 1).

    R_n = r_n + (1 - terminated_n) * gamma**len_n * V_n

    ``gamma = 1`` is TEMPO's undiscounted case (R_n = r_n + V_n, with V_n = 0 on a terminated branch). With a
    discount, ``r_n`` must already be the discounted in-segment reward sum_t gamma**t r_t and ``len_n`` is the
    number of environment steps in the segment (default: 1, i.e. the macro-step is one semi-MDP step).

    Args:
        segment_rewards: r, shape ``[..., N]``: environment reward collected inside each branch's segment.
        endpoint_values: V, shape ``[..., N]``: critic estimate of each branch's endpoint state (the mean of
            its parsed samples). Ignored where ``terminated`` (NaN allowed there); NaN on a truncated branch
            means "no estimate parsed" and is replaced by ``missing_value``.
        terminated: bool, shape ``[..., N]``: True when the episode ended inside the segment (the value of a
            terminal state is 0), False when the branch was truncated at the macro-step boundary.
        gamma: discount factor in [0, 1].
        segment_lengths: len, shape ``[..., N]`` or a scalar, non-negative step counts; None means 1.
        missing_value: substitute for a NaN endpoint value on a truncated branch; None raises instead.

    Returns:
        R, shape ``[..., N]``, same array type (numpy/torch), device and float dtype as the inputs.

    Raises:
        ValueError: mismatched shapes, gamma outside [0, 1], negative lengths, non-finite rewards, or a NaN
            endpoint value on a truncated branch while ``missing_value`` is None.

    Example (the issue's worked example)::

        >>> branch_returns([0, 0, 1, 0], [0.6, 0.2, 0.9, 0.3], [False, False, True, True])
        array([0.6, 0.2, 1. , 0. ])
    """
    g = _check_gamma(gamma)
    b = resolve_backend(segment_rewards, endpoint_values, terminated, segment_lengths)
    r = b.floats(segment_rewards, "segment_rewards")
    v = b.floats(endpoint_values, "endpoint_values")
    done = b.bools(terminated, "terminated")
    check_same_shape("segment_rewards", r, endpoint_values=v, terminated=done)
    check_finite(b, "segment_rewards", r)

    truncated = ~done
    missing = b.isnan(v) & truncated
    if b.any(missing):
        if missing_value is None:
            raise ValueError(
                f"{int(missing.sum())} truncated branch(es) have a NaN endpoint value (the critic output did "
                "not parse). Pass missing_value=<float> to substitute one (e.g. the start state's estimate), "
                "or drop those branches with a mask downstream."
            )
        if not math.isfinite(float(missing_value)):
            raise ValueError(f"missing_value must be a finite float; got {missing_value!r}.")
        v = b.where(missing, float(missing_value), v)
    check_finite(
        b, "endpoint_values", v, truncated, hint="Only NaN (unparsed) is substituted; inf is an error."
    )

    if segment_lengths is None:
        discount: Any = g
    else:
        lengths = b.floats(segment_lengths, "segment_lengths")
        if len(b.shape(lengths)) != 0:
            check_same_shape("segment_rewards", r, segment_lengths=lengths)
        if b.any(~b.isfinite(lengths)) or b.any(lengths < 0):
            raise ValueError("segment_lengths must be finite and non-negative step counts.")
        discount = g**lengths
    bootstrap = b.where(truncated, v, 0.0)
    if not (isinstance(discount, float) and discount == 1.0):
        bootstrap = bootstrap * discount
    return b.finish(r + bootstrap)


def td_targets(returns: Any, *, mask: Any = None) -> Any:
    """TD target of each start state: the mean branch return over the group axis (TEMPO signal 2).

    G = (1 / |M|) * sum_{n in M} R_n, where M is the set of unmasked branches (all N without a mask).

    Args:
        returns: R, shape ``[..., N]`` (from :func:`branch_returns`); the last axis is the group axis.
        mask: optional bool, shape ``[..., N]``; False marks padding, excluded from the mean.

    Returns:
        G, shape ``[...]`` (a 0-d array for a single group). A group with no unmasked entry gets G = 0.

    Raises:
        ValueError: scalar input, mask shape mismatch, or a non-finite unmasked return.

    Example::

        >>> float(td_targets([0.6, 0.2, 1.0, 0.0]))
        0.45
    """
    b, x, m = masked_floats("returns", returns, mask)
    mean, _ = group_mean(b, x, m)
    return b.finish(mean)


def monte_carlo_returns(rewards: Any, *, gamma: float = 1.0, mask: Any = None) -> Any:
    """Reward-to-go along the last (time) axis, the Monte Carlo targets used for critic warm-up.

    G_t = sum_{t' >= t, t' unmasked} gamma**(c(t, t')) * r_{t'}, where c(t, t') counts the unmasked steps in
    [t, t'), i.e. masked steps are skipped (for the usual trailing padding this is the textbook
    G_t = r_t + gamma * G_{t+1}). Masked positions return 0.

    Args:
        rewards: r, shape ``[..., T]``; the last axis is time.
        gamma: discount factor in [0, 1] (TEMPO: 1).
        mask: optional bool, shape ``[..., T]``; False marks padding steps.

    Returns:
        G, shape ``[..., T]``, same array type, device and float dtype as ``rewards``.

    Raises:
        ValueError: scalar input, gamma outside [0, 1], mask shape mismatch, or non-finite unmasked rewards.

    Example::

        >>> monte_carlo_returns([0.0, 0.0, 1.0], gamma=0.5)
        array([0.25, 0.5 , 1.  ])
    """
    g = _check_gamma(gamma)
    b, r, m = masked_floats("rewards", rewards, mask)
    steps = r.shape[-1]
    if steps == 0:
        return b.finish(r)
    out = []
    carry = b.zeros_like(r[..., 0])
    for t in range(steps - 1, -1, -1):
        step = r[..., t] + g * carry
        if m is not None:
            carry = b.where(m[..., t], step, carry)
            out.append(b.where(m[..., t], step, 0.0))
        else:
            carry = step
            out.append(step)
    out.reverse()
    return b.finish(b.stack_last(out))
