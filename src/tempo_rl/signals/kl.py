"""A KL anchor to a reference policy, as a per-token change of the actor's advantages (not a TEMPO signal).

Source: the KL penalty of RL from human feedback in its "KL in the reward" form (Ziegler et al. 2019,
"Fine-Tuning Language Models from Human Preferences"), as Tinker's cookbook applies it with
``kl_penalty_coef``. Every sampled token a_t of the policy pi is charged its log-ratio to a frozen reference
policy pi_ref (in nats):

    k_t  = log pi(a_t) - log pi_ref(a_t)
    A'_t = A_t - beta * k_t

With a_t ~ pi, E[k_t] = KL(pi || pi_ref) at that position, and because E[grad log pi(a_t)] = 0,
E[k_t * grad log pi(a_t)] = grad KL(pi || pi_ref): a policy-gradient step on A' follows the advantages A and
descends beta * KL(pi || pi_ref). Tokens that pi now likes far more than pi_ref did (k_t >> 0) are pushed
back; at pi = pi_ref every k_t = 0 and the anchor does nothing.

Why tempo-rl has it: the actor and the critic share the model's weights, and critic-only updates (TEMPO's
warm-up) move the weights the actor's tokens depend on. Training the actor's own samples with ``A = 0`` and
this penalty holds the actor near its reference while the critic learns (``kl.coef``, off by default).
"""

from __future__ import annotations

import math
from typing import Any

from tempo_rl.signals._array import check_finite, check_same_shape, prepare_mask, resolve_backend

__all__ = ["kl_penalized_advantages"]


def kl_penalized_advantages(
    advantages: Any,
    logprobs: Any,
    ref_logprobs: Any,
    *,
    coef: float,
    mask: Any = None,
) -> Any:
    """Per-token advantages with the KL anchor: A'_t = A_t - beta * (log pi(a_t) - log pi_ref(a_t)).

    Args:
        advantages: A, shape ``[..., T]``: each sampled token's advantage (a branch's A_n repeated over its
            tokens; 0 for a token trained only by the anchor).
        logprobs: log pi(a_t), same shape: the sampled tokens' log-probabilities (nats) under the policy that
            sampled them.
        ref_logprobs: log pi_ref(a_t), same shape: the same tokens under the reference policy.
        coef: beta >= 0, the anchor's weight (advantage units per nat).
        mask: optional boolean, same shape: the sampled tokens (True); other positions (context, padding)
            come back as 0 and may hold any value, NaN included.

    Returns:
        A', same shape, array type, device and float dtype as the inputs.

    Raises:
        ValueError: a negative or non-finite ``coef``, mismatched shapes, or non-finite values on a masked-in
            position.

    Example (two tokens of a branch with A = 0.5; the second is 2 nats likelier than under the reference)::

        >>> kl_penalized_advantages([0.5, 0.5], [-1.0, -0.5], [-1.0, -2.5], coef=0.1)
        array([0.5, 0.3])
    """
    beta = float(coef)
    if not (math.isfinite(beta) and beta >= 0.0):
        raise ValueError(f"coef must be a finite weight >= 0 (beta, advantage units per nat); got {coef!r}.")
    b = resolve_backend(advantages, logprobs, ref_logprobs)
    a = b.floats(advantages, "advantages")
    lp = b.floats(logprobs, "logprobs")
    ref = b.floats(ref_logprobs, "ref_logprobs")
    check_same_shape("advantages", a, logprobs=lp, ref_logprobs=ref)
    m = prepare_mask(b, mask, a, "advantages")
    for name, x in (("advantages", a), ("logprobs", lp), ("ref_logprobs", ref)):
        check_finite(b, name, x, m, hint="Mask the positions that are not sampled tokens.")
    if m is not None:  # zero the other positions first: they may hold anything, NaN included
        zero = b.zeros_like(a)
        a, lp, ref = b.where(m, a, zero), b.where(m, lp, zero), b.where(m, ref, zero)
    return b.finish(a - beta * (lp - ref))
