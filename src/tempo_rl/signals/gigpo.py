"""GiGPO's two-level group advantages (Feng et al., "Group-in-Group Policy Optimization for LLM Agent
Training", arXiv 2505.10978), as pure numpy functions.

One episode group = the N trajectories played from one game; trajectory n has per-step rewards r_{n,t} and the
environment state s_{n,t} in which its step t was taken.

    (1) R_n        = sum_t r_{n,t}                           episode return
    (2) A^E_n      = (R_n - mean_n R) [/ std_n R]            episode advantage (GRPO's, per trajectory)
    (3) R_{n,t}    = sum_{u >= t} gamma**(u - t) r_{n,u}     step_returns (the discounted return from step t)
    (4) anchor(s)  = the steps of one episode group taken in the same state s      anchor_groups
    (5) A^S_{n,t}  = R_{n,t} - mean_{anchor} R [/ std]       step_advantages (0 in a group of one step)
    (6) A_{n,t}    = A^E_n + w * A^S_{n,t}                   gigpo_batch

Each sampled token of step t of trajectory n carries A_{n,t}. No critic: the step level compares actions taken
from the *same* state by different trajectories of the group, so it needs states that recur across the
group's trajectories (start states always do; later ones where the env's states repeat).

Shapes: ``[..., N, T]`` arrays, leading axes index episode groups, ``N`` trajectories padded to ``T`` steps with
a boolean ``mask`` (False = padding, returned as 0 and excluded from every mean). A step in an anchor group of
its own gets ``A^S = 0`` (the reference implementation gives it its raw return instead), so with every state
distinct, or with ``w = 0``, GiGPO's advantages are exactly GRPO's.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tempo_rl.signals.advantages import STD_EPS, group_advantages
from tempo_rl.signals.returns import monte_carlo_returns

__all__ = [
    "AnchorStats",
    "GiGPOBatch",
    "anchor_group_stats",
    "anchor_groups",
    "gigpo_batch",
    "step_advantages",
    "step_returns",
]

#: GiGPO's defaults (the reference's ALFWorld runs): discount of the step return, step-level weight w.
GIGPO_GAMMA = 0.95
GIGPO_STEP_WEIGHT = 1.0

_NORMALIZE = (None, "std")


def _mask_like(mask: Any, shape: tuple[int, ...]) -> np.ndarray:
    if mask is None:
        return np.ones(shape, dtype=bool)
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise ValueError(f"mask must be a boolean array; got dtype {m.dtype}.")
    if m.shape != shape:
        raise ValueError(f"mask has shape {m.shape}, expected {shape} (the same as the values).")
    return m


def step_returns(rewards: Any, *, gamma: float = GIGPO_GAMMA, mask: Any = None) -> np.ndarray:
    """The discounted return from each step (GiGPO's step return, signal 3).

    R_t = sum_{u >= t, u unmasked} gamma**(u - t) * r_u      (= r_t + gamma * R_{t+1})

    Args:
        rewards: r, shape ``[..., T]``; the last axis is time (padding after the trajectory's end).
        gamma: discount in [0, 1] (GiGPO: 0.95).
        mask: optional bool ``[..., T]``; False marks padding steps (returned as 0).

    Returns:
        R, shape ``[..., T]``, float64.

    Example::

        >>> step_returns([0.0, 0.0, 1.0], gamma=0.5)
        array([0.25, 0.5 , 1.  ])
    """
    return np.asarray(monte_carlo_returns(np.asarray(rewards, dtype=np.float64), gamma=gamma, mask=mask))


def anchor_groups(keys: Any, *, mask: Any = None) -> np.ndarray:
    """Anchor-state groups: the steps of one episode group taken in the same state (signal 4).

    anchor(n, t) = anchor(n', t')  <=>  same episode group and key_{n,t} == key_{n',t'}

    Keys are any hashable description of the state a step was taken in: an exact state digest (an env's
    ``state_fingerprint()``) or the observation text. Steps of different episode groups never share a group.

    Args:
        keys: shape ``[..., N, T]`` (any array-like of hashables, e.g. strings); the last two axes are one
            episode group's trajectories and steps.
        mask: optional bool ``[..., N, T]``; False marks padding (its key is ignored).

    Returns:
        int64 ids, shape ``[..., N, T]``: ``0 .. G-1`` numbered in order of first appearance (row-major), unique
        across the whole batch; ``-1`` on padding.

    Example::

        >>> anchor_groups([["s0", "a", "b"], ["s0", "a", "c"]]).tolist()
        [[0, 1, 2], [0, 1, 3]]
    """
    k = np.asarray(keys, dtype=object)
    if k.ndim < 2:
        raise ValueError(
            f"keys must have at least 2 axes [..., N, T] (trajectories x steps); got shape {k.shape}."
        )
    m = _mask_like(mask, k.shape)
    ids = np.full(k.shape, -1, dtype=np.int64)
    next_id = 0
    for group in np.ndindex(*k.shape[:-2]):
        seen: dict[Hashable, int] = {}
        for n, t in zip(*np.nonzero(m[group])):
            key = k[group][n, t]
            if not isinstance(key, Hashable) or key is None:
                raise ValueError(
                    f"keys[{(*group, int(n), int(t))}] = {key!r} is not a usable state key; pass a string or "
                    "another hashable value for every unmasked step (mask the padding)."
                )
            if key not in seen:
                seen[key] = next_id
                next_id += 1
            ids[group][n, t] = seen[key]
    return ids


def step_advantages(
    returns: Any, anchors: Any, *, mask: Any = None, normalize: str | None = None
) -> np.ndarray:
    """Step-level advantages within anchor-state groups (signal 5).

    A^S_i = R_i - mean_{j: a_j = a_i} R_j                          (normalize=None, GiGPO's default)
    A^S_i = (R_i - mean_{a_i} R) / std_{a_i} R                      (normalize="std", left undivided where
                                                                     std <= STD_EPS)

    The means and (population) standard deviations run over the unmasked steps of each anchor group; a step
    alone in its group gets 0 (no other action from its state to compare with).

    Args:
        returns: R, step returns of any shape (:func:`step_returns`).
        anchors: int anchor ids of the same shape (:func:`anchor_groups`; negative ids are padding).
        mask: optional bool of the same shape; False marks padding.
        normalize: None or ``"std"``.

    Returns:
        A^S, float64, the same shape; 0 on padding.

    Example::

        >>> step_advantages([0.25, 0.0, 0.5], [0, 0, 1]).tolist()
        [0.125, -0.125, 0.0]
    """
    if normalize not in _NORMALIZE:
        raise ValueError(f"normalize must be one of {_NORMALIZE}; got {normalize!r}.")
    r = np.asarray(returns, dtype=np.float64)
    a = np.asarray(anchors)
    if a.shape != r.shape:
        raise ValueError(f"anchors has shape {a.shape}, expected {r.shape} (the shape of returns).")
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"anchors must be integer ids (anchor_groups); got dtype {a.dtype}.")
    m = _mask_like(mask, r.shape) & (a >= 0)
    if not np.all(np.isfinite(r[m])):
        raise ValueError("returns has non-finite unmasked entries.")
    out = np.zeros(r.shape, dtype=np.float64)
    if not m.any():
        return out
    ids, inverse, counts = np.unique(a[m], return_inverse=True, return_counts=True)
    values = r[m]
    mean = np.bincount(inverse, weights=values, minlength=len(ids)) / counts
    centred = values - mean[inverse]
    if normalize == "std":
        std = np.sqrt(np.bincount(inverse, weights=centred * centred, minlength=len(ids)) / counts)
        centred = centred / np.where(std > STD_EPS, std, 1.0)[inverse]
    centred[counts[inverse] < 2] = 0.0
    out[m] = centred
    return out


@dataclass(frozen=True)
class AnchorStats:
    """How anchor groups formed: ``groups`` (distinct anchor states), ``mean_size`` (steps per group) and
    ``shared_share`` (the share of steps in a group of at least 2 steps, the ones with a step-level signal)."""

    groups: int
    mean_size: float
    shared_share: float


def anchor_group_stats(anchors: Any, *, mask: Any = None) -> AnchorStats:
    """:class:`AnchorStats` of anchor ids (negative ids and masked steps are padding); NaN sizes when empty.

    Example::

        >>> anchor_group_stats([[0, 1, 2], [0, 1, 3]])
        AnchorStats(groups=4, mean_size=1.5, shared_share=0.6666666666666666)
    """
    a = np.asarray(anchors)
    m = _mask_like(mask, a.shape) & (a >= 0)
    if not m.any():
        return AnchorStats(0, float("nan"), float("nan"))
    _ids, inverse, counts = np.unique(a[m], return_inverse=True, return_counts=True)
    return AnchorStats(
        groups=len(counts),
        mean_size=float(counts.mean()),
        shared_share=float(np.mean(counts[inverse] >= 2)),
    )


@dataclass(frozen=True)
class GiGPOBatch:
    """GiGPO's signals of a batch of episode groups (:func:`gigpo_batch`); ``[..., N]`` per trajectory,
    ``[..., N, T]`` per step, 0 on padding.

    Attributes:
        episode_returns: R_n, the undiscounted sum of a trajectory's rewards.
        episode_advantages: A^E_n, centred within the episode group (GRPO's advantage).
        step_returns: R_{n,t}, the discounted return from step t.
        anchors: anchor-state group ids (-1 on padding).
        step_advantages: A^S_{n,t}, centred within the anchor group.
        advantages: A_{n,t} = A^E_n + w * A^S_{n,t}: what the tokens of step t carry.
        mask: the step mask; ``episode_mask`` = trajectories with at least one step.
        step_share: sum |w A^S| / (sum |A^E| + sum |w A^S|) over the steps: the share of the advantage
            magnitude that comes from the step level (NaN when both are 0).
    """

    episode_returns: np.ndarray
    episode_advantages: np.ndarray
    step_returns: np.ndarray
    anchors: np.ndarray
    step_advantages: np.ndarray
    advantages: np.ndarray
    mask: np.ndarray
    episode_mask: np.ndarray
    step_share: float

    def anchor_stats(self) -> AnchorStats:
        """:func:`anchor_group_stats` of this batch's anchors."""
        return anchor_group_stats(self.anchors, mask=self.mask)


def gigpo_batch(
    rewards: Any,
    keys: Any,
    *,
    mask: Any = None,
    gamma: float = GIGPO_GAMMA,
    step_weight: float = GIGPO_STEP_WEIGHT,
    normalize: str | None = None,
) -> GiGPOBatch:
    """GiGPO's advantages for a batch of episode groups (signals 1-6).

    A_{n,t} = A^E_n + w * A^S_{n,t}, with A^E from :func:`~tempo_rl.signals.group_advantages` on the episode
    returns R_n = sum_t r_{n,t} and A^S from :func:`step_advantages` on the discounted step returns within
    :func:`anchor_groups` of ``keys``; both levels use ``normalize`` (None: centred only; ``"std"``: divided by
    the group's standard deviation). A trajectory with no unmasked step is padding.

    Args:
        rewards: r, shape ``[..., N, T]``: each step's reward.
        keys: shape ``[..., N, T]``: the state each step was taken in (hashables; see :func:`anchor_groups`).
        mask: optional bool ``[..., N, T]``; False marks padding steps.
        gamma: discount of the step returns in [0, 1].
        step_weight: w >= 0, the weight of the step level.
        normalize: None or ``"std"``, for both levels.

    Returns:
        :class:`GiGPOBatch`.

    Example::

        >>> b = gigpo_batch([[0.0, 1.0], [0.0, 0.0]], [["s", "x"], ["s", "y"]], gamma=0.5)
        >>> b.advantages.tolist()
        [[0.75, 0.5], [-0.75, -0.5]]
    """
    if not (np.isfinite(step_weight) and step_weight >= 0.0):
        raise ValueError(f"step_weight must be a finite weight >= 0; got {step_weight!r}.")
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim < 2:
        raise ValueError(f"rewards must have at least 2 axes [..., N, T]; got shape {r.shape}.")
    m = _mask_like(mask, r.shape)
    if not np.all(np.isfinite(r[m])):
        raise ValueError("rewards has non-finite unmasked entries.")
    r = np.where(m, r, 0.0)
    episode_mask = np.asarray(m.any(axis=-1), dtype=bool)
    episode_returns = r.sum(axis=-1)
    episode_adv = np.asarray(group_advantages(episode_returns, mask=episode_mask, normalize=normalize))
    returns = step_returns(r, gamma=gamma, mask=m)
    anchors = anchor_groups(keys, mask=m)
    step_adv = step_advantages(returns, anchors, mask=m, normalize=normalize)
    episode_part = np.where(m, episode_adv[..., None], 0.0)
    step_part = step_weight * step_adv
    total = float(np.abs(episode_part).sum() + np.abs(step_part).sum())
    return GiGPOBatch(
        episode_returns=np.where(episode_mask, episode_returns, 0.0),
        episode_advantages=episode_adv,
        step_returns=returns,
        anchors=anchors,
        step_advantages=step_adv,
        advantages=episode_part + step_part,
        mask=m,
        episode_mask=episode_mask,
        step_share=float(np.abs(step_part).sum()) / total if total > 0 else float("nan"),
    )
