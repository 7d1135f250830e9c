"""Batched autoregressive sampling with a KV cache and exact per-token logprobs.

One call samples any number of requests (different prompts, ``num_samples`` each, their own sampling params)
in one batched computation:

1. *prefill*: each distinct prompt once (requests sharing a prompt share its prefill), left-padded to a common
   length (``attention_mask`` + ``position_ids`` make the padding invisible), keeping only the last position's
   logits;
2. the cache rows are repeated so each request gets ``num_samples`` rows;
3. *decode*: one token per live row per forward, feeding the KV cache; finished rows are dropped from the
   batch (``cache.batch_select_indices``) so the work shrinks as completions end.

With a :class:`~tempo_rl.backends.local.prefix_cache.PrefixCache` (the sampling client's default), step 1
prefills only the tokens past each prompt's longest cached prefix (cached KV and fresh tokens share the batch:
masked columns between them, ``position_ids`` counting real tokens only), the decode cache grows in place, and
every finished row's KV is stored for later calls. Without one (``prefix_cache_bytes = 0``) the computation is
exactly the uncached one.

Sampling distribution of a row with temperature ``T > 0``: ``softmax(z / T)`` restricted to the ``top_k``
largest logits and to the smallest set whose probability reaches ``top_p`` (nucleus), renormalised; ``T == 0``
is greedy.

**Logprobs.** The logprob reported for each sampled token is ``log_softmax(z)[token]`` of the model's *raw*
logits ``z`` (temperature 1, no top-k/top-p), i.e. the same quantity that ``compute_logprobs`` and the
training losses compute on the same weights. Importance ratios ``exp(lp_theta - lp_sampler)`` are therefore 1
before any update, up to float32 rounding between the cached incremental forward and the full forward (|delta|
~ 1e-6). Note this is the policy's logprob, not the logprob of the tempered/truncated sampling distribution.

**Stops.** A row stops when it samples a stop token (kept as the last token) or when its decoded completion
contains a stop string (the token completing it is the last token kept), with ``stop_reason="stop"``; or after
``max_tokens`` tokens with ``stop_reason="length"``. ``stop=None`` means "stop at the tokenizer's EOS";
``stop=()`` disables stopping. The
returned ``text`` is always ``decode(tokens)``.

**Determinism.** Each request with a ``seed`` draws from its own ``torch.Generator(seed)``; its rows draw in
order, so a seeded request returns the same completions whenever it is issued alone or with the same company.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tempo_rl._optional import require
from tempo_rl.backends.local.model import forward_logits
from tempo_rl.backends.local.prefix_cache import (
    PrefixCache,
    PrefixCacheCounters,
    bump,
    cache_layers,
    growing_cache,
)
from tempo_rl.backends.types import SampledSequence, SampleResult, SamplingParams, Tokenizer

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["SampleRequest", "filter_logits", "sample_batch", "validate_request"]


@dataclass(frozen=True)
class SampleRequest:
    """One ``sample`` call: a prompt, how many completions, and how to sample them."""

    prompt: tuple[int, ...]
    num_samples: int
    params: SamplingParams


def validate_request(req: SampleRequest, vocab_size: int, max_positions: int | None = None) -> None:
    """Raise ``ValueError`` naming the problem when a request cannot be served."""
    p = req.params
    if not req.prompt:
        raise ValueError("sample: the prompt is empty; render at least one message before sampling")
    if req.num_samples < 1:
        raise ValueError(f"sample: num_samples must be >= 1, got {req.num_samples}")
    if p.max_tokens < 1:
        raise ValueError(f"sample: SamplingParams.max_tokens must be >= 1, got {p.max_tokens}")
    if p.temperature < 0:
        raise ValueError(f"sample: temperature must be >= 0, got {p.temperature}")
    if not 0.0 < p.top_p <= 1.0:
        raise ValueError(f"sample: top_p must be in (0, 1], got {p.top_p}")
    if p.top_k == 0 or p.top_k < -1:
        raise ValueError(f"sample: top_k must be -1 (off) or >= 1, got {p.top_k}")
    in_range = min(req.prompt) >= 0 and max(req.prompt) < vocab_size  # C-speed check of long prompts
    bad = [] if in_range else [t for t in req.prompt if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"sample: prompt token ids {bad[:5]} are outside [0, vocab_size={vocab_size})")
    if max_positions is not None and len(req.prompt) + p.max_tokens > max_positions:
        raise ValueError(
            f"sample: prompt length {len(req.prompt)} + max_tokens {p.max_tokens} exceeds the model's "
            f"{max_positions} positions; shorten the prompt or lower max_tokens"
        )


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Tempered, top-k and nucleus-filtered logits ``[B, V]`` (removed entries are ``-inf``); ``T > 0``."""
    torch = require("torch", "local")
    z = logits / temperature
    vocab = z.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p < 1.0:
        sorted_z, idx = torch.sort(z, dim=-1, descending=True)
        probs = torch.softmax(sorted_z, dim=-1)
        # drop a token when the mass strictly before it already reaches top_p (the first token always stays)
        before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
        z = z.masked_fill(drop, float("-inf"))
    return z


def _stop_sets(params: SamplingParams, eos: int | None) -> tuple[frozenset[int], tuple[str, ...]]:
    if params.stop is None:
        return (frozenset() if eos is None else frozenset({eos})), ()
    ids = frozenset(s for s in params.stop if isinstance(s, int))
    strs = tuple(s for s in params.stop if isinstance(s, str) and s)
    return ids, strs


def sample_batch(
    model: Any,
    tokenizer: Tokenizer,
    requests: Sequence[SampleRequest],
    *,
    device: str = "cpu",
    generator: torch.Generator | None = None,
    pad_id: int = 0,
    prefix_cache: PrefixCache | None = None,
    counters: Sequence[PrefixCacheCounters] = (),
) -> list[SampleResult]:
    """Sample every request in one batched KV-cache loop; results are in request order.

    Args:
        model: a causal LM (see :func:`tempo_rl.backends.local.model.forward_logits`), in eval mode.
        tokenizer: decodes completions and provides the default stop token (``eos_token_id``).
        requests: validated requests (see :func:`validate_request`).
        device: torch device of ``model``.
        generator: RNG for requests without a seed (the client's; advanced in request order).
        pad_id: token fed to padding positions (masked out; any valid id works).
        prefix_cache: reuse and store the KV of token prefixes (see
            :mod:`tempo_rl.backends.local.prefix_cache`); ``None`` runs the uncached computation.
        counters: counter objects the call adds its prompt work to (``prefix_hit_tokens``: prompt tokens read
            from ``prefix_cache``, ``prefill_tokens``: prompt tokens computed; distinct prompts only).
    """
    torch = require("torch", "local")
    if not requests:
        return []
    eos = tokenizer.eos_token_id
    # ---- prefill: each distinct prompt once, left-padded
    unique: dict[tuple[int, ...], int] = {}
    for r in requests:
        unique.setdefault(r.prompt, len(unique))
    prompts = list(unique)
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, pr in enumerate(prompts):
        ids[i, width - len(pr) :] = torch.tensor(pr, dtype=torch.long)
        mask[i, width - len(pr) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    rows_of = [i for i, r in enumerate(requests) for _ in range(r.num_samples)]  # request of each row
    prefill_row = [unique[requests[i].prompt] for i in rows_of]  # prefill row of each row
    gens = []
    for r in requests:
        if r.params.seed is not None:
            g = torch.Generator(device="cpu")
            g.manual_seed(int(r.params.seed))
            gens.append(g)
        else:
            gens.append(generator)
    stops = [_stop_sets(r.params, eos) for r in requests]
    paths = [] if prefix_cache is None else [prefix_cache.lookup_path(pr) for pr in prompts]
    hits = [[node.kv for node in path] for path in paths]
    with torch.inference_mode():
        if not any(hits):  # every prompt from scratch: the uncached computation
            bump(counters, prefill_tokens=sum(len(pr) for pr in prompts))
            logits, cache = forward_logits(
                model, ids.to(device), mask.to(device), pos.to(device), use_cache=True, logits_to_keep=1
            )
        else:
            assert prefix_cache is not None
            extra = max(r.params.max_tokens for r in requests)
            ids, mask, pos, logits, cache = _prefill_with_hits(
                model, prompts, hits, prefix_cache, device, pad_id, counters, extra
            )
        if prefix_cache is not None and prefix_cache.enabled and cache_layers(cache) is None:
            kinds = sorted({type(layer).__name__ for layer in getattr(cache, "layers", ())})
            prefix_cache.disable(
                f"the model's cache is {type(cache).__name__} with layers {kinds}, not a DynamicCache of "
                "full-attention DynamicLayer layers; prefix caching is off for this model"
            )
        if prefix_cache is not None and not prefix_cache.enabled:
            prefix_cache = None
        sel = torch.tensor(prefill_row, dtype=torch.long, device=device)
        layers = None if prefix_cache is None else cache_layers(cache)
        if layers is None:
            cache.batch_select_indices(sel)  # one cache row per sample
        else:  # one row per sample, with room for the completion: decode steps append in place
            extra = max(r.params.max_tokens for r in requests)
            assert prefix_cache is not None
            copied = growing_cache(
                layers, filled=mask.shape[1], rows=prefill_row, extra=extra, scratch=prefix_cache.scratch
            )
            cache = cache if copied is None else copied
        last = logits[sel, -1, :]
        mask_r = mask[prefill_row].to(device)
        next_pos = pos[prefill_row, -1:].to(device) + 1
        out_tokens: list[list[int]] = [[] for _ in rows_of]
        out_lps: list[list[float]] = [[] for _ in rows_of]
        reasons: list[str] = ["length"] * len(rows_of)
        live = list(range(len(rows_of)))  # global row index of each live batch row
        while live:
            raw_lp = torch.log_softmax(last, dim=-1)
            chosen = torch.empty(len(live), dtype=torch.long, device=device)
            # group live rows by request (rows of one request are contiguous and in order)
            start = 0
            while start < len(live):
                req_i = rows_of[live[start]]
                end = start
                while end < len(live) and rows_of[live[end]] == req_i:
                    end += 1
                p = requests[req_i].params
                block = last[start:end]
                if p.temperature == 0:
                    chosen[start:end] = block.argmax(-1)
                else:
                    z = filter_logits(block, p.temperature, p.top_k, p.top_p)
                    probs = torch.softmax(z, dim=-1).cpu()
                    chosen[start:end] = (
                        torch.multinomial(probs, 1, generator=gens[req_i]).squeeze(-1).to(device)
                    )
                start = end
            lp_chosen = raw_lp.gather(-1, chosen[:, None]).squeeze(-1).tolist()
            chosen_l = chosen.tolist()
            keep: list[int] = []
            for b, g in enumerate(live):
                tok, req_i = chosen_l[b], rows_of[g]
                out_tokens[g].append(tok)
                out_lps[g].append(float(lp_chosen[b]))
                stop_ids, stop_strs = stops[req_i]
                if tok in stop_ids or (
                    stop_strs and any(s in tokenizer.decode(out_tokens[g]) for s in stop_strs)
                ):
                    reasons[g] = "stop"
                elif len(out_tokens[g]) < requests[req_i].params.max_tokens:
                    keep.append(b)
                    continue
                if prefix_cache is not None:  # finished: store the KV of every token it was fed
                    fed = prompts[prefill_row[g]] + tuple(out_tokens[g][:-1])
                    prefix_cache.insert(fed, _row_kv(cache, b, mask_r[b]), known=paths[prefill_row[g]])
            if not keep:
                break
            if len(keep) < len(live):
                keep_t = torch.tensor(keep, dtype=torch.long, device=device)
                cache.batch_select_indices(keep_t)
                chosen = chosen[keep_t]
                mask_r = mask_r[keep_t]
                next_pos = next_pos[keep_t]
                live = [live[b] for b in keep]
            mask_r = torch.cat([mask_r, torch.ones((len(live), 1), dtype=mask_r.dtype, device=device)], dim=1)
            logits, cache = forward_logits(
                model, chosen[:, None], mask_r, next_pos, cache, use_cache=True, logits_to_keep=1
            )
            last = logits[:, -1, :]
            next_pos = next_pos + 1
    results: list[SampleResult] = []
    row = 0
    for r in requests:
        seqs = []
        for _ in range(r.num_samples):
            toks = tuple(out_tokens[row])
            seqs.append(
                SampledSequence(
                    tokens=toks,
                    logprobs=tuple(out_lps[row]),
                    text=tokenizer.decode(list(toks), skip_special_tokens=False),
                    stop_reason=reasons[row],
                )
            )
            row += 1
        results.append(SampleResult(sequences=tuple(seqs)))
    return results


def _prefill_with_hits(
    model: Any,
    prompts: Sequence[tuple[int, ...]],
    hits: Sequence[Sequence[torch.Tensor]],
    prefix_cache: PrefixCache,
    device: str,
    pad_id: int,
    counters: Sequence[PrefixCacheCounters],
    extra: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """Prefill ``prompts`` whose first ``len(hits[i]) * block_tokens`` tokens have cached KV blocks.

    Layout of prompt ``i`` (``m_i`` cached tokens, ``s_i = len - m_i`` fresh ones, ``P = max m``,
    ``S = max s``): columns ``[0, P)`` hold its cached KV right-aligned (``P - m_i`` masked columns first),
    columns ``[P, P + S)`` its fresh tokens right-aligned (``S - s_i`` masked columns between the two parts), so
    every prompt's last token is in the last column. ``position_ids`` count the unmasked columns (token ``j``
    of the prompt is at position ``j`` wherever its column is), and the attention mask hides every padding
    column, so each token attends exactly to its prompt's earlier tokens, as in the uncached prefill.

    The cache's buffers have ``extra`` spare columns for the decode steps.
    Returns ``(ids [U, S], mask [U, P + S], pos [U, P + S], logits of the last column, cache)``.
    """
    torch = require("torch", "local")
    cached = [len(h) * prefix_cache.block_tokens for h in hits]
    p_width = max(cached)
    s_width = max(len(pr) - m for pr, m in zip(prompts, cached))
    bump(counters, prefix_hit_tokens=sum(cached), prefill_tokens=sum(len(pr) for pr in prompts) - sum(cached))
    u = len(prompts)
    ids = torch.full((u, s_width), pad_id, dtype=torch.long)
    mask = torch.zeros((u, p_width + s_width), dtype=torch.long)
    template = next(h[0] for h in hits if h)  # [layers, 2, kv_heads, B, head_dim]
    n_layers, _, heads, _, head_dim = template.shape
    # one buffer for every layer's keys and values, with room for the fresh tokens (appended in place)
    shape = (n_layers, 2, u, heads, p_width + s_width + max(extra, 1), head_dim)
    kv = prefix_cache.scratch.get("prefill", shape, template)
    for i, (pr, m) in enumerate(zip(prompts, cached)):
        fresh = pr[m:]
        ids[i, s_width - len(fresh) :] = torch.tensor(fresh, dtype=torch.long)
        mask[i, p_width - m : p_width] = 1
        mask[i, p_width + s_width - len(fresh) :] = 1
        kv[:, :, i, :, : p_width - m, :] = 0  # masked, but must be finite (0 * nan is nan)
        if m:
            kv[:, :, i, :, p_width - m : p_width, :] = torch.cat(list(hits[i]), dim=3)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = growing_cache([(kv[layer, 0], kv[layer, 1]) for layer in range(n_layers)], filled=p_width)
    logits, cache = forward_logits(
        model,
        ids.to(device),
        mask.to(device),
        pos[:, p_width:].to(device),
        cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return ids, mask, pos, logits, cache


def _row_kv(cache: Any, b: int, row_mask: torch.Tensor) -> Any:
    """``(start, stop) -> [layers, 2, kv_heads, stop - start, head_dim]``: the KV of tokens ``[start, stop)``
    of batch row ``b`` of ``cache``, whose columns are the unmasked ones of ``row_mask`` (in token order)."""
    torch = require("torch", "local")
    layers = cache_layers(cache)
    assert layers is not None
    cols = torch.nonzero(row_mask, as_tuple=True)[0]

    def keys_values(start: int, stop: int) -> Any:
        idx = cols[start:stop]
        return torch.stack(
            [torch.stack([k[b].index_select(1, idx), v[b].index_select(1, idx)]) for k, v in layers]
        )

    return keys_values
