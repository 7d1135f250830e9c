"""One TD update's actor signals for many start states at once, the composition of signals (1)-(3)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from tempo_rl.signals.advantages import degenerate_groups, group_advantages
from tempo_rl.signals.returns import branch_returns, td_targets

__all__ = ["TDBatch", "td_batch"]


class TDBatch(NamedTuple):
    """The signals of S start states with N branches each (numpy arrays).

    Attributes:
        returns: R, ``[S, N]``; 0 where masked.
        mask: ``[S, N]`` bool; False for a dropped branch.
        targets: G, ``[S]``; 0 for a start with no kept branch.
        advantages: A, ``[S, N]``; 0 where masked.
        degenerate: ``[S]`` bool; True for a start whose every kept advantage is (numerically) 0, or that kept
            no branch: such a group carries no gradient.
    """

    returns: np.ndarray
    mask: np.ndarray
    targets: np.ndarray
    advantages: np.ndarray
    degenerate: np.ndarray


def td_batch(
    segment_rewards: Any, endpoint_values: Any, bootstrap: Any, mask: Any = None, *, atol: float = 1e-12
) -> TDBatch:
    """TEMPO's actor signals of a batch of start states (axis 0: start s; axis 1: branch n)::

        R_sn = r_sn + b_sn * V_sn               (b_sn = 1: the endpoint is valued by the critic; 0: terminal)
        G_s  = mean_{n : m_sn} R_sn
        A_sn = m_sn * (R_sn - G_s)
        degenerate_s = all_{n : m_sn} |A_sn| <= atol

    Args:
        segment_rewards: r, ``[S, N]``: the reward each branch collected in its segment.
        endpoint_values: V, ``[S, N]``: V_hat at each endpoint; read only where ``bootstrap & mask`` (NaN
            elsewhere is fine).
        bootstrap: ``[S, N]`` bool: the branch was cut with its future still worth V (a macro boundary, or the
            episode step limit when the trainer values it); False for terminal endpoints.
        mask: ``[S, N]`` bool, default all True; False drops a branch from its group.
        atol: the degeneracy threshold.

    Returns:
        A :class:`TDBatch`.

    Example:
        >>> b = td_batch([[0.0, 1.0, 0.0]], [[0.5, 9.0, 0.2]], [[True, False, True]])
        >>> b.returns.tolist(), b.targets.tolist()
        ([[0.5, 1.0, 0.2]], [0.5666666666666667])
    """
    r = np.asarray(segment_rewards, dtype=np.float64)
    if r.ndim != 2:
        raise ValueError(f"segment_rewards must have shape [S, N], got {r.shape}")
    m = np.ones(r.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    b = np.asarray(bootstrap, dtype=bool)
    v = np.asarray(endpoint_values, dtype=np.float64)
    if not r.shape == v.shape == b.shape == m.shape:
        raise ValueError(
            f"segment_rewards {r.shape}, endpoint_values {v.shape}, bootstrap {b.shape} and mask {m.shape} "
            "must all have shape [S, N]"
        )
    v = np.where(b & m, v, 0.0)
    returns = np.where(m, branch_returns(r, v, ~b), 0.0)
    advantages = group_advantages(returns, mask=m)
    return TDBatch(
        returns=returns,
        mask=m,
        targets=np.asarray(td_targets(returns, mask=m), dtype=np.float64),
        advantages=advantages,
        degenerate=np.asarray(degenerate_groups(advantages, mask=m, atol=atol), dtype=bool),
    )
