"""The built-in losses with PyTRIO/Tinker semantics, on per-token logprob tensors.

All tensors are ``[B, T]`` (datums right-padded to a common length); ``mask`` is 1 on real target positions
(padding and ``target_tokens == -100`` are 0). Every loss is a *sum* over masked positions and datums, never a
mean, exactly as the services define it:

* importance sampling: ``L = -sum_t exp(lp_t - lp_old_t) * A_t``
* PPO: ``L = -sum_t min(rho_t * A_t, clip(rho_t, low, high) * A_t)``, ``rho_t = exp(lp_t - lp_old_t)``;
  ``low``/``high`` are ratio bounds (e.g. 0.8 / 1.2)
* cross-entropy: ``L = -sum_t w_t * lp_t`` (``w = 1`` when no weights are given)

where ``lp_t = log softmax(logits_t)[target_t]`` under the current weights and ``lp_old`` the sampler's
logprobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tempo_rl._optional import require

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["compute_loss", "cross_entropy_loss", "importance_sampling_loss", "ppo_loss"]


def importance_sampling_loss(
    lp: torch.Tensor, lp_old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """``-sum exp(lp - lp_old) * A`` over masked positions; metrics: mean/max ratio on masked positions."""
    torch = require("torch", "local")
    ratio = torch.exp(lp - lp_old) * mask
    loss = -(ratio * adv).sum()
    return loss, _ratio_metrics(ratio.detach(), mask * (adv != 0))


def ppo_loss(
    lp: torch.Tensor,
    lp_old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    clip_low_threshold: float = 0.8,
    clip_high_threshold: float = 1.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``-sum min(rho A, clip(rho, low, high) A)``; metrics add ``clip_fraction``."""
    torch = require("torch", "local")
    ratio = torch.exp(lp - lp_old)
    clipped = torch.clamp(ratio, clip_low_threshold, clip_high_threshold)
    obj = torch.minimum(ratio * adv, clipped * adv) * mask
    loss = -obj.sum()
    active = mask * (adv != 0)
    metrics = _ratio_metrics((ratio * active).detach(), active)
    n = float(active.sum().item())
    was_clipped = ((ratio * adv) != torch.minimum(ratio * adv, clipped * adv)).float() * active
    metrics["clip_fraction"] = float(was_clipped.sum().item()) / n if n else 0.0
    return loss, metrics


def cross_entropy_loss(
    lp: torch.Tensor, weights: torch.Tensor | None, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """``-sum w * lp`` over masked positions (``w = 1`` when ``weights`` is None)."""
    w = mask if weights is None else weights * mask
    return -(w * lp).sum(), {}


def _ratio_metrics(ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean and max of ``ratio`` over ``mask`` (the positions with a nonzero advantage)."""
    n = float(mask.sum().item())
    if n == 0:
        return {"ratio_mean": 1.0, "ratio_max": 1.0}
    return {"ratio_mean": float(ratio.sum().item()) / n, "ratio_max": float(ratio.max().item())}


def compute_loss(
    loss_fn: str,
    lp: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    config: Mapping[str, float],
) -> tuple[torch.Tensor, dict[str, float]]:
    """Dispatch on ``loss_fn`` (validated); ``inputs`` holds ``logprobs``/``advantages``/``weights``."""
    if loss_fn == "importance_sampling":
        return importance_sampling_loss(lp, inputs["logprobs"], inputs["advantages"], mask)
    if loss_fn == "ppo":
        return ppo_loss(lp, inputs["logprobs"], inputs["advantages"], mask, **config)
    if loss_fn == "cross_entropy":
        return cross_entropy_loss(lp, inputs.get("weights"), mask)
    raise ValueError(f"unknown loss_fn {loss_fn!r}")
