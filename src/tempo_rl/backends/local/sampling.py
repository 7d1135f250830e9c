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
masked columns between them, ``position_ids`` counting real tokens only), and every finished row's KV is
stored for later calls. Steps 2-3 then keep ONE cache row per distinct prompt (*shared decode*, for models
whose attention takes a custom 4D mask: ``transformers``' ``sdpa`` and ``eager``): a decode step feeds the
``Q`` live samples of a prompt as ``Q`` query columns of its row, and a 4D additive mask lets each sample
attend to its prompt and its own earlier tokens only. The ``R`` samples of a prompt of ``L`` tokens thus read
its ``L`` cached keys once per step instead of ``R`` times, and the prompt's KV is never copied per sample
(the idea of shared-prefix / cascade attention). Other attention implementations (flash kernels) keep the
one-row-per-sample loop over a cache that grows in place. Without a cache (``prefix_cache_bytes = 0``) the
computation is exactly the uncached one.

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
from typing import TYPE_CHECKING, Any, NamedTuple

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

__all__ = ["SampleRequest", "filter_logits", "sample_batch", "shared_decode_supported", "validate_request"]


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
    longest = max(r.params.max_tokens for r in requests)
    # shared decode: the samples of one prompt are query columns of one cache row (see _decode_shared)
    shared = prefix_cache is not None and prefix_cache.enabled and shared_decode_supported(model)
    per_prompt = max(prefill_row.count(u) for u in range(len(prompts)))
    extra = longest * per_prompt if shared else longest
    out_tokens: list[list[int]] = [[] for _ in rows_of]
    out_lps: list[list[float]] = [[] for _ in rows_of]
    reasons: list[str] = ["length"] * len(rows_of)
    with torch.inference_mode():
        if not any(hits):  # every prompt from scratch: the uncached computation
            bump(counters, prefill_tokens=sum(len(pr) for pr in prompts))
            ids, mask, pos = _left_padded(prompts, pad_id)
            logits, cache = forward_logits(
                model, ids.to(device), mask.to(device), pos.to(device), use_cache=True, logits_to_keep=1
            )
        elif len(prompts) == 1:  # one prompt: prefill in place after what the resident buffer holds
            assert prefix_cache is not None
            ids, mask, pos, logits, cache = _prefill_resident(
                model, prompts[0], hits[0], prefix_cache, device, counters, extra
            )
        else:
            assert prefix_cache is not None
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
        last = logits[sel, -1, :]
        if layers is not None and shared:
            assert prefix_cache is not None
            if len(prompts) == 1 and not any(hits):  # a fresh prompt becomes the resident one
                copied = _to_resident(layers, prompts[0], prefix_cache, extra)
            else:
                copied = growing_cache(
                    layers,
                    filled=mask.shape[1],
                    rows=range(len(prompts)),
                    extra=extra,
                    scratch=prefix_cache.scratch,
                )
            _decode_shared(
                model,
                tokenizer,
                requests,
                cache if copied is None else copied,
                last,
                mask.to(device),
                rows=_Rows(prompts, rows_of, prefill_row, gens, stops, paths),
                prefix_cache=prefix_cache,
                out=(out_tokens, out_lps, reasons),
                device=device,
                pad_id=pad_id,
            )
        else:
            if layers is None:
                cache.batch_select_indices(sel)  # one cache row per sample
            else:  # one row per sample, with room for the completion: decode steps append in place
                assert prefix_cache is not None
                copied = growing_cache(
                    layers, filled=mask.shape[1], rows=prefill_row, extra=extra, scratch=prefix_cache.scratch
                )
                cache = cache if copied is None else copied
            mask_r = mask[prefill_row].to(device)
            next_pos = pos[prefill_row, -1:].to(device) + 1
            live = list(range(len(rows_of)))  # global row index of each live batch row
            while live:
                chosen = _choose(last, live, rows_of, requests, gens, device)
                keep: list[int] = []
                for b, g in enumerate(live):
                    if _record(
                        b, g, chosen, (out_tokens, out_lps, reasons), rows_of, requests, stops, tokenizer
                    ):
                        keep.append(b)
                    elif prefix_cache is not None:  # finished: store the KV of every token it was fed
                        fed = prompts[prefill_row[g]] + tuple(out_tokens[g][:-1])
                        cols = torch.nonzero(mask_r[b], as_tuple=True)[0]
                        prefix_cache.insert(fed, _row_kv(cache, b, cols), known=paths[prefill_row[g]])
                if not keep:
                    break
                chosen_t = chosen[0]
                if len(keep) < len(live):
                    keep_t = torch.tensor(keep, dtype=torch.long, device=device)
                    cache.batch_select_indices(keep_t)
                    chosen_t = chosen_t[keep_t]
                    mask_r = mask_r[keep_t]
                    next_pos = next_pos[keep_t]
                    live = [live[b] for b in keep]
                ones = torch.ones((len(live), 1), dtype=mask_r.dtype, device=device)
                mask_r = torch.cat([mask_r, ones], dim=1)
                logits, cache = forward_logits(
                    model, chosen_t[:, None], mask_r, next_pos, cache, use_cache=True, logits_to_keep=1
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


def _left_padded(
    prompts: Sequence[tuple[int, ...]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids, attention mask, position_ids)`` ``[U, max len]`` of ``prompts`` left-padded with ``pad_id``."""
    torch = require("torch", "local")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, pr in enumerate(prompts):
        ids[i, width - len(pr) :] = torch.tensor(pr, dtype=torch.long)
        mask[i, width - len(pr) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, pos


def _to_resident(
    layers: Sequence[tuple[torch.Tensor, torch.Tensor]],
    prompt: tuple[int, ...],
    prefix_cache: PrefixCache,
    extra: int,
) -> Any:
    """Copy one freshly prefilled prompt's KV (``layers``: ``[1, kv_heads, len(prompt), head_dim]`` per layer)
    into the resident buffer, with ``extra`` spare columns; returns a growing cache over it."""
    k0 = layers[0][0]
    n = len(prompt)
    buf, _ = prefix_cache.scratch.resident(
        prompt, (len(layers), 2, 1, k0.shape[1], k0.shape[3]), n + max(extra, 1), k0
    )
    for layer, (k, v) in enumerate(layers):
        buf[layer, 0, :, :, :n].copy_(k[:, :, :n])
        buf[layer, 1, :, :, :n].copy_(v[:, :, :n])
    prefix_cache.scratch.set_resident(prompt, buf)
    return growing_cache([(buf[layer, 0], buf[layer, 1]) for layer in range(len(layers))], filled=n)


def _prefill_resident(
    model: Any,
    prompt: tuple[int, ...],
    hit: Sequence[torch.Tensor],
    prefix_cache: PrefixCache,
    device: str,
    counters: Sequence[PrefixCacheCounters],
    extra: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """Prefill one prompt whose first ``len(hit) * block_tokens`` tokens have cached KV blocks ``hit``, in the
    cache's resident buffer (:meth:`~tempo_rl.backends.local.prefix_cache.ScratchBuffers.resident`).

    The buffer's first ``n`` columns already hold the KV of ``prompt[:n]`` (typically the previous turn's
    prompt); only the blocks of ``hit`` past them are copied in, so the cached part is ``c = max(n, hit
    tokens)`` tokens, and the ``len(prompt) - c`` fresh tokens are computed into the next columns, attending
    to columns ``[0, c)`` at positions ``c, c + 1, ...`` (no padding: one row). The same values as
    :func:`_prefill_with_hits`; the buffer has ``extra`` spare columns for the decode steps.
    Returns ``(ids [1, S], mask [1, len(prompt)], pos [1, len(prompt)], logits of the last column, cache)``.
    """
    torch = require("torch", "local")
    b = prefix_cache.block_tokens
    n_layers, _, heads, _, head_dim = hit[0].shape
    buf, have = prefix_cache.scratch.resident(
        prompt, (n_layers, 2, 1, heads, head_dim), len(prompt) + max(extra, 1), hit[0]
    )
    first = have // b  # blocks of hit not already in place (the block holding column `have` is rewritten)
    if first < len(hit):
        start = first * b
        stop = len(hit) * b
        buf[:, :, 0, :, start:stop, :] = torch.cat(list(hit[first:]), dim=3)
    cached = max(have, len(hit) * b)
    bump(counters, prefix_hit_tokens=cached, prefill_tokens=len(prompt) - cached)
    ids = torch.tensor([prompt[cached:]], dtype=torch.long)
    mask = torch.ones((1, len(prompt)), dtype=torch.long)
    pos = torch.arange(len(prompt), dtype=torch.long)[None]
    cache = growing_cache([(buf[layer, 0], buf[layer, 1]) for layer in range(n_layers)], filled=cached)
    logits, cache = _prefill_past(model, ids, mask, pos[:, cached:], cache, device)
    prefix_cache.scratch.set_resident(prompt, buf)
    return ids, mask, pos, logits, cache


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
    logits, cache = _prefill_past(model, ids, mask, pos[:, p_width:], cache, device)
    return ids, mask, pos, logits, cache


def _choose(
    last: torch.Tensor,
    live: Sequence[int],
    rows_of: Sequence[int],
    requests: Sequence[SampleRequest],
    gens: Sequence[torch.Generator | None],
    device: str,
) -> tuple[torch.Tensor, list[int], list[float]]:
    """Sample one token for each live row from its logits ``last`` [len(live), V] (rows in global order, each
    request drawing from its own generator in row order); returns the tokens as a tensor and a list, and
    their raw logprobs ``log_softmax(last)[token]``."""
    torch = require("torch", "local")
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
            chosen[start:end] = torch.multinomial(probs, 1, generator=gens[req_i]).squeeze(-1).to(device)
        start = end
    lp_chosen = raw_lp.gather(-1, chosen[:, None]).squeeze(-1).tolist()
    return chosen, chosen.tolist(), lp_chosen


def _record(
    b: int,
    g: int,
    chosen: tuple[Any, list[int], list[float]],
    out: tuple[list[list[int]], list[list[float]], list[str]],
    rows_of: Sequence[int],
    requests: Sequence[SampleRequest],
    stops: Sequence[tuple[frozenset[int], tuple[str, ...]]],
    tokenizer: Tokenizer,
) -> bool:
    """Append batch row ``b``'s chosen token to global row ``g``; False when the row is finished (its
    ``stop_reason`` set), True when it goes on."""
    out_tokens, out_lps, reasons = out
    tok, req_i = chosen[1][b], rows_of[g]
    out_tokens[g].append(tok)
    out_lps[g].append(float(chosen[2][b]))
    stop_ids, stop_strs = stops[req_i]
    if tok in stop_ids or (stop_strs and any(s in tokenizer.decode(out_tokens[g]) for s in stop_strs)):
        reasons[g] = "stop"
        return False
    return len(out_tokens[g]) < requests[req_i].params.max_tokens


def shared_decode_supported(model: Any) -> bool:
    """True when ``model`` takes a custom 4D additive attention mask ``[batch, 1, query, key]``, as the
    ``sdpa`` and ``eager`` attention implementations of ``transformers`` do (flash-attention kernels do not)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    impl = getattr(getattr(base, "config", None), "_attn_implementation", None)
    return impl in ("sdpa", "eager")


class _Rows(NamedTuple):
    """The bookkeeping of one sampling batch: the distinct ``prompts``; per sample row, its request
    (``rows_of``) and its prompt's prefill row (``prefill_row``); per request, its generator (``gens``) and stop
    rules (``stops``); per distinct prompt, its path in the prefix cache's trie (``paths``)."""

    prompts: Sequence[tuple[int, ...]]
    rows_of: Sequence[int]
    prefill_row: Sequence[int]
    gens: Sequence[torch.Generator | None]
    stops: Sequence[tuple[frozenset[int], tuple[str, ...]]]
    paths: Sequence[Sequence[Any]]


def _decode_shared(
    model: Any,
    tokenizer: Tokenizer,
    requests: Sequence[SampleRequest],
    cache: Any,
    last: torch.Tensor,
    mask: torch.Tensor,
    *,
    rows: _Rows,
    prefix_cache: PrefixCache,
    out: tuple[list[list[int]], list[list[float]], list[str]],
    device: str,
    pad_id: int,
) -> None:
    """The decode loop with one cache row per distinct prompt, shared by all of that prompt's samples.

    After the prefill, batch row ``u`` of ``cache`` holds prompt ``u``'s KV in its ``C0 = mask.shape[1]``
    columns (``mask[u]`` marks the real ones). Each decode step feeds every live sample's last token as one
    *query column* of its prompt's row: with ``Q`` the most live samples of a row, the step appends ``Q``
    columns ``[C, C + Q)`` to every row, sample ``j`` of row ``u`` writing column ``C + j``. A 4D additive
    attention mask ``[rows, 1, Q, C + Q]`` (0 where allowed, the dtype's minimum elsewhere) lets a sample's
    query attend exactly to its prompt's real columns and to the columns of its own fed tokens, and its
    ``position_ids`` are ``len(prompt) + (tokens fed before)``: every token sees the same keys at the same
    positions as in the one-row-per-sample loop, so the logits agree up to float rounding. Unused query slots
    (a row with fewer live samples) feed ``pad_id`` attending only to their own column; nothing attends to it.

    Why: the prompt's keys and values are stored and read once per step for all its samples (attention reads
    ``C`` keys per row instead of per sample) and are never copied to every sample; rows whose samples have all
    finished leave the batch. Tokens are sampled in global row order with each request's generator, as in
    the other loop. A finished sample's KV (prompt columns, then its own columns) is stored in
    ``prefix_cache``. Fills ``out`` = ``(tokens, logprobs, stop reasons)`` per global row.
    """
    prompts, rows_of, prefill_row, gens, stops, paths = rows
    torch = require("torch", "local")
    out_tokens = out[0]
    n_rows = len(rows_of)
    c0 = int(mask.shape[1])
    layers = cache_layers(cache)
    assert layers is not None
    dtype = layers[0][0].dtype
    lowest = torch.finfo(dtype).min
    per_prompt = max(list(prefill_row).count(u) for u in range(len(prompts)))
    capacity = c0 + per_prompt * max(r.params.max_tokens for r in requests)
    # additive mask row of every sample (row n_rows: unused query slots, nothing allowed)
    allowed = torch.full((n_rows + 1, capacity), lowest, dtype=dtype, device=device)
    allowed[:n_rows, :c0].masked_fill_(mask[list(prefill_row)].bool(), 0.0)
    prompt_cols = [torch.nonzero(mask[u], as_tuple=True)[0] for u in range(len(prompts))]
    own_cols: list[list[int]] = [[] for _ in range(n_rows)]  # the decode columns of each sample's fed tokens
    batch_rows = list(range(len(prompts)))  # prompt of each batch row of the cache
    filled = c0
    live = list(range(n_rows))
    while live:
        chosen = _choose(last, live, rows_of, requests, gens, device)
        keep: list[int] = []
        for b, g in enumerate(live):
            if _record(b, g, chosen, out, rows_of, requests, stops, tokenizer):
                keep.append(g)
                continue
            u = prefill_row[g]
            cols = torch.cat([prompt_cols[u], torch.tensor(own_cols[g], dtype=torch.long, device=device)])
            fed = prompts[u] + tuple(out_tokens[g][:-1])
            prefix_cache.insert(fed, _row_kv(cache, batch_rows.index(u), cols), known=paths[u])
        if not keep:
            break
        live = keep
        rows_live = sorted({prefill_row[g] for g in live})
        if len(rows_live) < len(batch_rows):  # drop the rows whose samples have all finished
            at = {u: b for b, u in enumerate(batch_rows)}
            cache.batch_select_indices(
                torch.tensor([at[u] for u in rows_live], dtype=torch.long, device=device)
            )
            batch_rows = rows_live
        slots: dict[int, list[int]] = {u: [] for u in batch_rows}
        for g in live:
            slots[prefill_row[g]].append(g)
        q = max(len(v) for v in slots.values())
        if filled + q > allowed.shape[1]:  # pragma: no cover - capacity covers every step
            grow = allowed.new_full((n_rows + 1, filled + q), lowest)
            grow[:, : allowed.shape[1]] = allowed
            allowed = grow
        n_b = len(batch_rows)
        ids_l, pos_l, who_l = [pad_id] * (n_b * q), [0] * (n_b * q), [n_rows] * (n_b * q)
        flat_of: dict[int, int] = {}  # flat (batch row, slot) index of each live sample
        for b, u in enumerate(batch_rows):
            for j, g in enumerate(slots[u]):
                f = b * q + j
                ids_l[f], pos_l[f], who_l[f] = out_tokens[g][-1], len(prompts[u]) + len(out_tokens[g]) - 1, g
                flat_of[g] = f
                own_cols[g].append(filled + j)
        fed_rows = torch.tensor(list(flat_of), dtype=torch.long, device=device)
        fed_cols = torch.tensor([own_cols[g][-1] for g in flat_of], dtype=torch.long, device=device)
        allowed[fed_rows, fed_cols] = 0.0  # each sample sees its new token
        step_mask = allowed[torch.tensor(who_l, dtype=torch.long, device=device), : filled + q]
        step_mask = step_mask.view(n_b, 1, q, filled + q)
        diag = torch.arange(q, device=device)
        step_mask[:, 0, diag, filled + diag] = 0.0  # unused slots see themselves (no all-masked query)
        logits, cache = forward_logits(
            model,
            torch.tensor(ids_l, dtype=torch.long, device=device).view(n_b, q),
            step_mask,
            torch.tensor(pos_l, dtype=torch.long, device=device).view(n_b, q),
            cache,
            use_cache=True,
            logits_to_keep=q,
        )
        filled += q
        last = logits.reshape(n_b * q, -1)[
            torch.tensor([flat_of[g] for g in live], dtype=torch.long, device=device)
        ]


def _row_kv(cache: Any, b: int, cols: torch.Tensor) -> Any:
    """``(start, stop) -> [layers, 2, kv_heads, stop - start, head_dim]``: the KV of tokens ``[start, stop)``
    of a sequence stored in batch row ``b`` of ``cache`` at columns ``cols`` (in token order)."""
    torch = require("torch", "local")
    layers = cache_layers(cache)
    assert layers is not None

    def keys_values(start: int, stop: int) -> Any:
        idx = cols[start:stop]
        lo, hi = int(idx[0]), int(idx[-1]) + 1
        # slice the column range first: index_select copies a non-contiguous input whole
        idx = idx - lo
        return torch.stack(
            [
                torch.stack([k[b, :, lo:hi].index_select(1, idx), v[b, :, lo:hi].index_select(1, idx)])
                for k, v in layers
            ]
        )

    return keys_values


def _prefill_past(
    model: Any, ids: Any, mask: Any, positions: Any, cache: Any, device: Any
) -> tuple[Any, Any]:
    """Forward the uncached prompt tokens ``ids`` over ``cache`` (the cached KV of the tokens before them), with
    the full attention ``mask`` and the new tokens' ``positions``: the last position's logits and the grown
    cache."""
    return forward_logits(
        model, ids.to(device), mask.to(device), positions.to(device), cache, use_cache=True, logits_to_keep=1
    )
