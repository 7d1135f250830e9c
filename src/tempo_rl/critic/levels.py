"""The critic's answer levels, and values read from the probabilities of its answers.

A grid of ``L`` evenly spaced levels of ``[0, R_max]``, ``v_i = i / (L - 1) * R_max``, each written as the
critic's answer text ``<value>{v_i}</value>`` (:func:`format_level`: ``0``/``1`` for two levels, one digit
token each; otherwise the fewest decimals, at least 1 and at most 4, that write every level exactly: ``0.3``
for 11 levels, ``0.25`` for 5). The supervised warm start's format examples use the same texts
(:mod:`tempo_rl.training.warmstart`).

With the model's log-probabilities ``l_i = log p(answer_i | prompt)`` of the ``L`` complete answers (each the
sum of its tokens' logprobs, closing tag included, so that no answer is a prefix of another), the
distribution *restricted to the valid answers* is ``q_i = exp(l_i) / sum_j exp(l_j)`` (:func:`restricted_probs`,
computed with log-sum-exp, so it stays defined however little mass the model puts on the answers), and its
expectation ``V = sum_i q_i v_i`` (:func:`expected_value`) is the value read from the probabilities.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tempo_rl.critic.parse import validate_r_max

__all__ = ["expected_value", "format_level", "level_values", "restricted_probs", "two_hot"]

#: the most levels a grid may have (as ``warmstart.critic_format_levels``)
MAX_LEVELS = 101


def level_values(levels: int, r_max: float = 1.0) -> tuple[float, ...]:
    """The ``levels`` evenly spaced values ``i / (levels - 1) * r_max``, ``i = 0..levels-1``.

    >>> level_values(5)
    (0.0, 0.25, 0.5, 0.75, 1.0)
    """
    if not isinstance(levels, int) or isinstance(levels, bool) or not 2 <= levels <= MAX_LEVELS:
        raise ValueError(f"levels must be an int in [2, {MAX_LEVELS}], got {levels!r}")
    r = validate_r_max(r_max)
    return tuple(i / (levels - 1) * r for i in range(levels))


def format_level(value: float, levels: int, r_max: float = 1.0) -> str:
    """How the critic writes ``value`` of a ``levels``-level grid (see the module docstring).

    >>> " ".join(format_level(v, 2) for v in level_values(2))
    '0 1'
    >>> " ".join(format_level(v, 5) for v in level_values(5))
    '0.00 0.25 0.50 0.75 1.00'
    """
    if levels == 2:
        return f"{value:g}"
    grid = level_values(levels, r_max)
    decimals = next((d for d in range(1, 5) if all(abs(round(v, d) - v) < 1e-9 for v in grid)), 4)
    return f"{value:.{decimals}f}"


def restricted_probs(answer_logprobs: Sequence[float]) -> np.ndarray:
    """``q_i = exp(l_i - logsumexp(l))``: the model's distribution restricted to the answers, renormalised.

    Raises:
        ValueError: no answer, or a logprob that is NaN or +inf (a broken forward pass, not a small mass).

    >>> restricted_probs([math.log(0.2), math.log(0.6)]).round(6).tolist()
    [0.25, 0.75]
    """
    lp = np.asarray(answer_logprobs, dtype=np.float64)
    if lp.ndim != 1 or lp.size == 0:
        raise ValueError(f"answer_logprobs must be a non-empty 1-D sequence, got shape {lp.shape}")
    if np.isnan(lp).any() or np.isposinf(lp).any():
        raise ValueError(f"answer logprobs must be finite or -inf, got {lp.tolist()}")
    top = float(lp.max())
    if top == -math.inf:
        raise ValueError("every answer has probability 0 under the model (all logprobs are -inf)")
    w = np.exp(lp - top)
    return np.asarray(w / w.sum(), dtype=np.float64)


def expected_value(answer_logprobs: Sequence[float], values: Sequence[float]) -> float:
    """``V = sum_i q_i v_i`` with ``q`` = :func:`restricted_probs` of the answers' logprobs.

    >>> round(expected_value([math.log(0.1), math.log(0.3)], [0.0, 1.0]), 12)
    0.75
    """
    v = np.asarray(values, dtype=np.float64)
    q = restricted_probs(answer_logprobs)
    if v.shape != q.shape:
        raise ValueError(f"{q.size} answer logprobs but {v.size} values")
    return float(np.dot(q, v))


def two_hot(target: float, levels: int, r_max: float = 1.0) -> np.ndarray:
    """The target ``G`` as a distribution over the level grid whose expectation is ``G``: its mass on the two
    levels around it, linearly: with ``x = G / R_max * (L - 1)`` and ``i = floor(x)``, ``w_i = 1 - (x - i)`` and
    ``w_{i+1} = x - i`` (``G`` is clipped to ``[0, R_max]`` first; at ``G = R_max``, ``i = L - 2``).

    The log-loss ``-sum_i w_i log q_i`` against it is a strictly proper scoring rule for the expectation
    ``V = sum_i q_i v_i``: its expected minimum over outcomes is at ``E[V] = E[G]``, a calibrated value, and
    its gradient on the answer logits, ``q - w``, does not vanish when the model is sure of a wrong answer
    (unlike a reward on K sampled answers, which gets no gradient once the K samples agree).

    >>> two_hot(0.3, 2).tolist()
    [0.7, 0.3]
    >>> two_hot(0.6, 5).round(6).tolist()
    [0.0, 0.0, 0.6, 0.4, 0.0]
    """
    grid = level_values(levels, r_max)
    if not math.isfinite(target):
        raise ValueError(f"the target must be finite, got {target}")
    x = min(max(float(target), 0.0), grid[-1]) / grid[-1] * (levels - 1)
    lo = min(math.floor(x), levels - 2)
    w = np.zeros(levels, dtype=np.float64)
    w[lo] = 1.0 - (x - lo)
    w[lo + 1] = x - lo
    return w
