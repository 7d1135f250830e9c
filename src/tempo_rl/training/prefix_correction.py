"""Prefix importance-sampling correction and uniform-segment scaling for the TEMPO TD update.

Why (the TEMPO blog's appendix, as described in the seed write-up): with a fixed segmentation of an episode
into M macro-steps, the full-trajectory policy gradient is the sum of the M segment gradients, so optimising
one uniformly sampled segment and multiplying its contribution by M is unbiased -- *if* the prefix that led to
the segment's start state was sampled by the current policy. Start states come from a store and were reached
by older policy versions, so each branch advantage is weighted by the prefix likelihood ratio::

    log w_s = sum_{t in A(s)} [ log pi_theta(a_t | x_<t) - log pi_{v(t)}(a_t | x_<t) ]
    w_s     = exp(log w_s)                     mode "ratio"
    w_s     = clip(exp(log w_s), low, high)    mode "clipped" (default; truncated importance sampling)
    A'_sn   = c * w_s * A_sn                   c = M = T / H with segment scaling, else 1

where ``A(s)`` are the positions of the *assistant* tokens of start state s's stored token prefix (prompt,
observation and template tokens are context: the env, not the policy, produced them), ``v(t)`` is the policy
version that sampled token t and log-probabilities are natural logs of the raw policy (temperature 1, what the
samplers report and :meth:`~tempo_rl.backends.types.SamplingClient.compute_logprobs` returns).

Bookkeeping: every stored state carries, in :attr:`StoredState.spans`, the assistant-token spans of its prefix
(:class:`~tempo_rl.training.types.PrefixSpan`: half-open token positions, the version that sampled them and the
sum of their sampled logprobs); :func:`endpoint_spans` builds them when the
trainer stores an endpoint. At the start of a TD update :meth:`PrefixCorrection.compute` recomputes, with ONE
``compute_logprobs`` call per distinct start state (its N branches reuse it), the current logprobs of the
spans whose version differs from the current one. Spans sampled by the current version contribute exactly 0
(same weights), so a policy that has not changed yields weights of exactly 1 without any recomputation, and
fresh episode starts (no assistant tokens) always weigh 1.

Uniform-segment scaling multiplies every actor advantage by the same M. With Adam a global constant barely
changes the step (Adam is invariant to gradient scale up to ``eps`` and gradient clipping); what it does
change is the actor's weight relative to the critic Datums of the same batch, and the clipped-norm regime.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from tempo_rl.signals import prefix_importance_weights
from tempo_rl.training.types import PrefixSpan, StoredState

__all__ = [
    "DEFAULT_PREFIX_CLIP",
    "PREFIX_MODES",
    "PrefixCorrection",
    "PrefixMode",
    "PrefixWeights",
    "endpoint_spans",
    "sampled_spans",
    "weight_metrics",
]

PrefixMode = Literal["off", "ratio", "clipped"]

#: The accepted correction modes.
PREFIX_MODES: tuple[str, ...] = ("off", "ratio", "clipped")

#: Default ``(low, high)`` bounds of the clipped prefix ratio.
DEFAULT_PREFIX_CLIP: tuple[float, float] = (0.5, 2.0)

#: Quantiles reported for the weight distribution.
_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def sampled_spans(
    sampled_mask: Sequence[bool],
    logprobs: Sequence[float],
    version: int,
    *,
    end: int | None = None,
) -> list[PrefixSpan]:
    """The maximal runs of True in ``sampled_mask[:end]`` as spans of ``version``, with their logprob sums.

    Example::

        >>> [s.to_json() for s in sampled_spans([0, 1, 1, 0, 1], [0, -1.0, -2.0, 0, -0.5], 3)]
        [[1, 3, 3, -3.0], [4, 5, 3, -0.5]]
    """
    if len(sampled_mask) != len(logprobs):
        raise ValueError(
            f"sampled_mask ({len(sampled_mask)}) and logprobs ({len(logprobs)}) differ in length"
        )
    stop = len(sampled_mask) if end is None else min(int(end), len(sampled_mask))
    spans: list[PrefixSpan] = []
    t = 0
    while t < stop:
        if not sampled_mask[t]:
            t += 1
            continue
        s = t
        while t < stop and sampled_mask[t]:
            t += 1
        spans.append(PrefixSpan(s, t, int(version), float(sum(float(x) for x in logprobs[s:t]))))
    return spans


def endpoint_spans(start: StoredState, sequence: Any, end: int, version: int) -> list[PrefixSpan]:
    """Spans of an endpoint stored from a branch sequence with prefix ``sequence.tokens[:end]``.

    The start's own spans (positions are shared: a branch's token list begins with its start's prefix)
    followed by the sequence's sampled tokens before ``end``, tagged with ``version`` (the policy that sampled
    them). A start whose spans are unknown yields spans for this segment only (its older part then counts as
    context).
    """
    own = sampled_spans(sequence.sampled_mask, sequence.logprobs, version, end=end)
    return [*(start.spans or ()), *own]


@dataclass(frozen=True)
class PrefixWeights:
    """The prefix weights of one TD update's start states (arrays of shape ``[S]``).

    Attributes:
        weights: w_s (after clipping when the mode clips); exactly 1 where nothing is stale or the mode is
            off.
        log_ratio: ``new - old`` (nats) before clipping; 0 where nothing is stale.
        new_logprob_sums / old_logprob_sums: the stale spans' summed logprobs under the current / sampling
            policies (0 where nothing is stale).
        stale: the state has assistant tokens sampled by an older policy version.
        unknown: the state has a prefix but no recorded spans (weight 1, counted).
        recomputed_tokens: assistant tokens whose logprob was recomputed.
        calls: ``compute_logprobs`` calls made (one per distinct stale state).
        processed_tokens: the tokens of those calls (each call is a forward pass over a whole stored prefix).
        seconds: wall time of the recomputation.
        clip: the clip bounds used (None for "off" / "ratio").
        scale: the segment scale c (M or 1).
    """

    weights: np.ndarray
    log_ratio: np.ndarray
    new_logprob_sums: np.ndarray
    old_logprob_sums: np.ndarray
    stale: np.ndarray
    unknown: np.ndarray
    recomputed_tokens: int = 0
    calls: int = 0
    processed_tokens: int = 0
    seconds: float = 0.0
    clip: tuple[float, float] | None = None
    scale: float = 1.0

    def metrics(self, prefix: str = "prefix") -> dict[str, float]:
        """The weight distribution and bookkeeping counters (see :func:`weight_metrics`)."""
        out = weight_metrics(self.weights, self.log_ratio, stale=self.stale, clip=self.clip, prefix=prefix)
        out.update(
            {
                f"{prefix}/unknown_states": float(np.sum(self.unknown)),
                f"{prefix}/recomputed_tokens": float(self.recomputed_tokens),
                f"{prefix}/logprob_calls": float(self.calls),
                f"{prefix}/segment_scale": float(self.scale),
            }
        )
        return out


def weight_metrics(
    weights: Any,
    log_ratio: Any,
    *,
    stale: Any = None,
    clip: tuple[float, float] | None = None,
    prefix: str = "prefix",
) -> dict[str, float]:
    """Distribution of prefix weights over start states.

    ``{prefix}/weight_{min,mean,max}`` and ``{prefix}/weight_q{10,25,50,75,90}`` over all start states;
    ``{prefix}/clipped_fraction`` = stale states whose raw ratio ``exp(log_ratio)`` fell outside ``clip`` /
    stale states (NaN without stale states or without clipping); ``{prefix}/log_ratio_{mean,min,max}`` over
    stale states (nats); ``{prefix}/stale_states`` and ``{prefix}/states`` (counts). Empty input gives NaN
    statistics.
    """
    w = np.asarray(weights, dtype=np.float64).ravel()
    lr = np.asarray(log_ratio, dtype=np.float64).ravel()
    st = np.ones_like(w, dtype=bool) if stale is None else np.asarray(stale, dtype=bool).ravel()
    if not w.shape == lr.shape == st.shape:
        raise ValueError(f"weights {w.shape}, log_ratio {lr.shape} and stale {st.shape} must have one shape")
    nan = math.nan
    out: dict[str, float] = {
        f"{prefix}/states": float(w.size),
        f"{prefix}/stale_states": float(st.sum()),
        f"{prefix}/weight_min": float(w.min()) if w.size else nan,
        f"{prefix}/weight_mean": float(w.mean()) if w.size else nan,
        f"{prefix}/weight_max": float(w.max()) if w.size else nan,
    }
    for q in _QUANTILES:
        out[f"{prefix}/weight_q{round(q * 100)}"] = float(np.quantile(w, q)) if w.size else nan
    s = lr[st]
    out[f"{prefix}/log_ratio_mean"] = float(s.mean()) if s.size else nan
    out[f"{prefix}/log_ratio_min"] = float(s.min()) if s.size else nan
    out[f"{prefix}/log_ratio_max"] = float(s.max()) if s.size else nan
    if clip is None or not s.size:
        out[f"{prefix}/clipped_fraction"] = nan
    else:
        low, high = clip
        lo = math.log(low) if low > 0 else -math.inf
        hi = math.log(high) if math.isfinite(high) else math.inf
        out[f"{prefix}/clipped_fraction"] = float(np.mean((s < lo) | (s > hi)))
    return out


def _check_clip(clip: Sequence[float]) -> tuple[float, float]:
    try:
        low, high = (float(c) for c in clip)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"prefix clip must be a pair (low, high), e.g. {DEFAULT_PREFIX_CLIP}; got {clip!r}"
        ) from exc
    if math.isnan(low) or math.isnan(high) or not 0.0 <= low <= 1.0 <= high or math.isinf(low):
        raise ValueError(
            f"prefix clip must satisfy 0 <= low <= 1 <= high (an unchanged policy must keep weight 1), "
            f"e.g. {DEFAULT_PREFIX_CLIP}; got {clip!r}"
        )
    return low, high


class PrefixCorrection:
    """Prefix importance weights and segment scaling for the branch advantages of a TD update.

    Args:
        mode: ``"off"`` (w = 1), ``"ratio"`` (w = exp(new - old)) or ``"clipped"`` (w clipped to ``clip``).
        clip: ``(low, high)`` with ``0 <= low <= 1 <= high`` (used by ``"clipped"``).
        segments: M, the number of macro-steps per episode (T / H); used when ``segment_scaling``.
        segment_scaling: multiply every advantage by M (the blog appendix's uniform-segment estimator).

    Example (inside a TD update, ``adv`` of shape ``[S, N]``)::

        corr = PrefixCorrection.from_config(config.tempo)
        pw = await corr.compute(sampler, [s.state for s in starts], policy_version)
        adv = corr.apply(adv, pw)
        metrics.update(pw.metrics())
    """

    def __init__(
        self,
        mode: str = "clipped",
        clip: Sequence[float] = DEFAULT_PREFIX_CLIP,
        *,
        segments: int = 1,
        segment_scaling: bool = False,
    ) -> None:
        if mode not in PREFIX_MODES:
            raise ValueError(f"prefix correction mode must be one of {PREFIX_MODES}; got {mode!r}")
        if not isinstance(segments, int) or segments < 1:
            raise ValueError(f"segments (M = T / H) must be an int >= 1; got {segments!r}")
        self.mode = mode
        self.clip = _check_clip(clip)
        self.segments = segments
        self.segment_scaling = bool(segment_scaling)

    @classmethod
    def from_config(cls, tempo: Any) -> PrefixCorrection:
        """Build from a :class:`~tempo_rl.training.config.TempoConfig`.

        Reads ``prefix_correction`` and M = ``max_rounds // macro_rounds``; the clip is
        :data:`DEFAULT_PREFIX_CLIP` and segment scaling is off.
        """
        return cls(
            getattr(tempo, "prefix_correction", "off"),
            DEFAULT_PREFIX_CLIP,
            segments=max(1, int(tempo.max_rounds) // int(tempo.macro_rounds)),
        )

    @property
    def scale(self) -> float:
        """The segment scale c: M with segment scaling, else 1."""
        return float(self.segments) if self.segment_scaling else 1.0

    async def compute(
        self, sampler: Any, states: Sequence[StoredState], policy_version: int
    ) -> PrefixWeights:
        """Prefix weights of ``states`` under ``sampler`` (the current policy, version ``policy_version``).

        One ``compute_logprobs`` call per distinct state id with stale spans (states sharing an id reuse it);
        the calls run concurrently (``compute_logprobs_async`` when the client has it).
        """
        n = len(states)
        new = np.zeros(n)
        old = np.zeros(n)
        stale = np.zeros(n, dtype=bool)
        unknown = np.zeros(n, dtype=bool)
        clip = self.clip if self.mode == "clipped" else None
        if self.mode == "off":
            return PrefixWeights(
                np.ones(n), np.zeros(n), new, old, stale, unknown, clip=None, scale=self.scale
            )
        t0 = time.perf_counter()
        todo: dict[str, tuple[Any, tuple[PrefixSpan, ...]]] = {}
        rows: list[tuple[int, str, tuple[PrefixSpan, ...]]] = []
        for i, state in enumerate(states):
            spans = state.spans
            if spans is None:
                unknown[i] = True
                continue
            old_spans = tuple(s for s in spans if s.version != policy_version)
            if not old_spans:
                continue
            stale[i] = True
            rows.append((i, state.id, old_spans))
            todo.setdefault(state.id, (state, old_spans))
        ids = list(todo)
        results = await asyncio.gather(*(_logprobs(sampler, todo[k][0].token_prefix) for k in ids))
        sums: dict[str, float] = {}
        tokens = 0
        for key, lps in zip(ids, results):
            state, old_spans = todo[key]
            if len(lps) != len(state.token_prefix):
                raise RuntimeError(
                    f"compute_logprobs returned {len(lps)} values for a prefix of "
                    f"{len(state.token_prefix)} tokens"
                )
            total = 0.0
            for s in old_spans:
                part = lps[s.start : s.end]
                if any(v is None for v in part):
                    raise RuntimeError(f"compute_logprobs gave no logprob inside assistant span {s} of {key}")
                total += math.fsum(float(v) for v in part if v is not None)
                tokens += s.end - s.start
            sums[key] = total
        for i, key, old_spans in rows:
            new[i] = sums[key]
            old[i] = sum(s.logprob_sum for s in old_spans)
        log_ratio = new - old
        weights = np.asarray(prefix_importance_weights(new, old, clip=clip), dtype=np.float64)
        weights = np.where(stale, weights, 1.0)
        return PrefixWeights(
            weights=weights,
            log_ratio=np.where(stale, log_ratio, 0.0),
            new_logprob_sums=new,
            old_logprob_sums=old,
            stale=stale,
            unknown=unknown,
            recomputed_tokens=tokens,
            calls=len(ids),
            processed_tokens=sum(len(todo[k][0].token_prefix) for k in ids),
            seconds=time.perf_counter() - t0,
            clip=clip,
            scale=self.scale,
        )

    def apply(self, advantages: Any, weights: PrefixWeights | Any) -> np.ndarray:
        """``A'[s, n] = c * w[s] * A[s, n]`` for advantages ``[S, N]`` (or ``[S]``) and weights ``[S]``."""
        w = np.asarray(weights.weights if isinstance(weights, PrefixWeights) else weights, dtype=np.float64)
        a = np.asarray(advantages, dtype=np.float64)
        if a.ndim == 0 or a.shape[0] != w.shape[0] or w.ndim != 1:
            raise ValueError(
                f"advantages of shape {a.shape} need one prefix weight per start state (leading axis); got "
                f"weights of shape {w.shape}"
            )
        return a * (self.scale * w).reshape((-1,) + (1,) * (a.ndim - 1))


async def _logprobs(sampler: Any, tokens: Sequence[int]) -> list[float | None]:
    fn = getattr(sampler, "compute_logprobs_async", None)
    if fn is not None:
        return list(await fn(list(tokens)))
    return list(await asyncio.to_thread(sampler.compute_logprobs, list(tokens)))
