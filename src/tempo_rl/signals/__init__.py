"""TEMPO's training signals as pure array functions (numpy in -> numpy out, torch in -> torch out).

From one start state, N branches of one macro-step each and K critic samples (the TEMPO blog, as described in
the seed write-up)::

    (1) R_n = r_n + V_hat(endpoint_n)        branch_returns       (0 for a terminated branch)
    (2) G   = mean_n R_n                     td_targets
    (3) A_n = R_n - G                        group_advantages     (centred, no std division)
    (4) r_k = -|V_k - G| / R_max             critic_rewards       (then centred over k with group_advantages)

:func:`td_batch` composes (1)-(3) for a whole TD update (``[S, N]`` arrays with a mask), plus
:func:`monte_carlo_returns` (warm-up targets), :func:`degenerate_groups` (groups with no gradient) and
:func:`prefix_importance_weights` (correction for stale prefixes), and, outside TEMPO, :func:`kl_penalized_advantages`
(an optional KL anchor to a reference policy: A'_t = A_t - beta * (log pi(a_t) - log pi_ref(a_t))), and GiGPO's
critic-free two-level advantages (:func:`gigpo_batch`: :func:`step_returns`, :func:`anchor_groups`,
:func:`step_advantages`; :mod:`tempo_rl.signals.gigpo`).

Conventions: the group axis is the last axis; an optional boolean ``mask`` of the same shape marks padding
(False), which is excluded from every mean and returned as 0; NaN in a critic estimate means "did not parse".
Torch is never imported by this package: it is used only when the caller passes a tensor.
"""

from tempo_rl.signals.advantages import STD_EPS, degenerate_groups, group_advantages
from tempo_rl.signals.critic import CRITIC_ERRORS, critic_rewards
from tempo_rl.signals.gigpo import (
    AnchorStats,
    GiGPOBatch,
    anchor_group_stats,
    anchor_groups,
    gigpo_batch,
    step_advantages,
    step_returns,
)
from tempo_rl.signals.kl import kl_penalized_advantages
from tempo_rl.signals.prefix import prefix_importance_weights
from tempo_rl.signals.returns import branch_returns, monte_carlo_returns, td_targets
from tempo_rl.signals.td import TDBatch, td_batch

__all__ = [
    "CRITIC_ERRORS",
    "STD_EPS",
    "AnchorStats",
    "GiGPOBatch",
    "TDBatch",
    "anchor_group_stats",
    "anchor_groups",
    "branch_returns",
    "critic_rewards",
    "degenerate_groups",
    "gigpo_batch",
    "group_advantages",
    "kl_penalized_advantages",
    "monte_carlo_returns",
    "prefix_importance_weights",
    "step_advantages",
    "step_returns",
    "td_batch",
    "td_targets",
]
