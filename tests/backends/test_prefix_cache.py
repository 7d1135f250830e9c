"""The local sampler's KV prefix cache: exactness against the uncached sampler, bounds, LRU, policy versions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.backends import AdamParams, LocalBackendConfig, SamplingParams, create_clients
from tempo_rl.rollout.datums import completion_datum

# ---------------------------------------------------------------------------------------------- helpers


def _pair(model: Any, tokenizer: Any, **kw: Any) -> tuple[Any, Any]:
    """Two sampling clients over the same weights: the prefix cache on, and off."""
    import copy

    from tempo_rl.backends.local import LocalSamplingClient

    on = LocalSamplingClient(copy.deepcopy(model), tokenizer, prefix_cache_bytes=1 << 30, **kw)
    off = LocalSamplingClient(copy.deepcopy(model), tokenizer, prefix_cache_bytes=0, **kw)
    return on, off


def _assert_same(a: Any, b: Any, atol: float = 1e-5) -> float:
    """Same tokens, stop reasons and texts; logprobs within ``atol``; returns the largest logprob gap."""
    worst = 0.0
    assert len(a.sequences) == len(b.sequences)
    for x, y in zip(a.sequences, b.sequences):
        assert x.tokens == y.tokens
        assert x.stop_reason == y.stop_reason
        assert x.text == y.text
        gap = max((abs(u - v) for u, v in zip(x.logprobs, y.logprobs)), default=0.0)
        assert gap <= atol, gap
        worst = max(worst, gap)
    return worst


def _episode(on: Any, off: Any, tokenizer: Any, turns: int, max_tokens: int = 6) -> None:
    """A growing conversation (prompt_{t+1} = prompt_t + completion_t + observation) with 3 samples a turn."""
    obs = [
        tokenizer.encode(f" You see a cabinet {k}, a drawer 2. Nothing happens.", add_special_tokens=False)
        for k in range(turns)
    ]
    prompt = tokenizer.encode("Your task is to: put a clean apple in the fridge.", add_special_tokens=False)
    for t in range(turns):
        p = SamplingParams(max_tokens=max_tokens, seed=t, temperature=1.0, stop=())
        a, b = on.sample(prompt, 3, p), off.sample(prompt, 3, p)
        _assert_same(a, b)
        prompt = prompt + list(a.sequences[t % 3].tokens) + obs[t]


# ---------------------------------------------------------------------------------------------- exactness


@pytest.mark.parametrize(("width", "layers", "heads"), [(64, 2, 4), (256, 4, 4)])
def test_cached_multi_turn_sampling_matches_uncached(
    tokenizer: Any, width: int, layers: int, heads: int
) -> None:
    """Tokens identical and logprobs within 1e-5 over a growing conversation, on both model sizes; the later
    turns really read their history from the cache."""
    from tempo_rl.backends.local import build_tiny_model

    model = build_tiny_model(len(tokenizer), hidden_size=width, num_layers=layers, num_heads=heads, seed=3)
    on, off = _pair(model, tokenizer)
    _episode(on, off, tokenizer, turns=6)
    stats = on.prefix_cache_stats()
    assert stats["sampling/prefix_hit_tokens"] > stats["sampling/prefill_tokens"] > 0
    assert off.prefix_cache_stats()["sampling/prefix_hit_tokens"] == 0
    # with the cache off every distinct prompt is prefilled in full: hits + prefill are the same prompt tokens
    total_on = stats["sampling/prefix_hit_tokens"] + stats["sampling/prefill_tokens"]
    assert off.prefix_cache_stats()["sampling/prefill_tokens"] == total_on


def test_mixed_batch_of_cached_and_fresh_prompts(tokenizer: Any) -> None:
    """One coalesced batch mixing prompts with long, short and no cached prefix (different lengths, padding
    between the cached and fresh parts): every request is the uncached result, greedy and sampled."""
    from tempo_rl.backends.local import build_tiny_model

    model = build_tiny_model(len(tokenizer), hidden_size=64, num_layers=2, num_heads=4, seed=1)
    on, off = _pair(model, tokenizer)
    base = tokenizer.encode(
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a drawer 2, a desk 1.",
        add_special_tokens=False,
    )
    long = base * 3
    warm = SamplingParams(max_tokens=5, seed=0, stop=())
    for c in (on, off):  # fill the cache with the long prompt and its completions
        c.sample(long, 2, warm)
    tail = tokenizer.encode(" go to desk 1", add_special_tokens=False)
    prompts = [
        long + tail,  # long hit
        base + tail,  # short hit (a prefix of the long prompt)
        tail + base,  # miss
        long,  # fully cached except its last token
        long[:17],  # shorter than two blocks
    ]
    params = [  # rows finish at different steps (the decode cache drops them in place)
        SamplingParams(max_tokens=3 + i, seed=10 + i, temperature=0.0 if i % 2 else 1.0, stop=())
        for i in range(len(prompts))
    ]

    async def batch(client: Any) -> list[Any]:
        return await asyncio.gather(*(client.sample_async(p, 2, q) for p, q in zip(prompts, params)))

    hits_before = on.prefix_cache_stats()["sampling/prefix_hit_tokens"]
    for a, b in zip(asyncio.run(batch(on)), asyncio.run(batch(off))):
        _assert_same(a, b)
    assert on.batches_run == off.batches_run == 2  # the five requests ran as one batch
    assert on.prefix_cache_stats()["sampling/prefix_hit_tokens"] > hits_before


def test_branches_and_critic_samples_hit_one_stored_prefix(tokenizer: Any) -> None:
    """N branches and K critic-style samples from one long prefix prefill only their own suffix."""
    from tempo_rl.backends.local import build_tiny_model
    from tempo_rl.backends.local.prefix_cache import DEFAULT_BLOCK_TOKENS

    model = build_tiny_model(len(tokenizer), hidden_size=64, num_layers=2, num_heads=4, seed=2)
    on, off = _pair(model, tokenizer)
    prefix = tokenizer.encode("take apple 1 from desk 1. Nothing happens. " * 12, add_special_tokens=False)
    p0 = SamplingParams(max_tokens=4, seed=0, stop=())
    _assert_same(on.sample(prefix, 1, p0), off.sample(prefix, 1, p0))
    before = on.prefix_cache_stats()
    questions = [tokenizer.encode(f" Q{k}: go to desk {k}?", add_special_tokens=False) for k in range(4)]
    for k, q in enumerate(questions):  # K separate critic calls on prefix + question
        p = SamplingParams(max_tokens=5, seed=k, stop=())
        _assert_same(on.sample(prefix + q, 1, p), off.sample(prefix + q, 1, p))
    after = on.prefix_cache_stats()
    reusable = (len(prefix) // DEFAULT_BLOCK_TOKENS) * DEFAULT_BLOCK_TOKENS
    assert after["sampling/prefix_hit_tokens"] - before["sampling/prefix_hit_tokens"] >= 4 * reusable
    # the branches' shared prefix is stored once: the cache holds far fewer tokens than 4 full copies
    assert after["sampling/prefix_cache_tokens"] < 2 * (len(prefix) + 16)


def test_any_transformers_causal_lm_gpt2(tokenizer: Any) -> None:
    """A randomly initialised GPT-2 (learned absolute positions, no RoPE) built from a config in-process."""
    import torch
    import transformers

    cfg = transformers.GPT2Config(
        vocab_size=len(tokenizer), n_positions=512, n_embd=32, n_layer=2, n_head=2, bos_token_id=None
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(cfg)
    on, off = _pair(model, tokenizer)
    _episode(on, off, tokenizer, turns=4)
    assert on.prefix_cache is not None and on.prefix_cache.enabled
    assert on.prefix_cache_stats()["sampling/prefix_hit_tokens"] > 0


def _config_llama(tokenizer: Any, *, kv_heads: int, **extra: Any) -> Any:
    """A 2-layer, width-32 transformers Llama with 4 query heads and ``kv_heads`` KV heads, built from a config
    (seeded, the global torch RNG untouched); ``extra`` goes to the config (e.g. ``attn_implementation``)."""
    import torch
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        **extra,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return transformers.LlamaForCausalLM(cfg)


def test_llama_with_grouped_query_attention(tokenizer: Any) -> None:
    """A transformers Llama with 2 KV heads for 4 query heads (the cache stores KV heads only)."""
    model = _config_llama(tokenizer, kv_heads=2)
    on, off = _pair(model, tokenizer)
    _episode(on, off, tokenizer, turns=3)
    assert on.prefix_cache is not None
    assert (
        on.prefix_cache.bytes_per_token() == 2 * 2 * 2 * 8 * 4
    )  # 2 (K, V) x layers x kv_heads x head_dim x fp32


def _decode_shapes(client: Any) -> list[tuple[int, ...]]:
    """Record the ``input_ids`` shape of every forward of ``client``'s model (a wrapper on its forward)."""
    shapes: list[tuple[int, ...]] = []
    model = client.model
    inner = model.forward

    def forward(*args: Any, **kw: Any) -> Any:
        shapes.append(tuple(kw["input_ids"].shape))
        return inner(*args, **kw)

    model.forward = forward
    return shapes


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_samples_of_one_prompt_share_one_cache_row(tokenizer: Any, attn: str) -> None:
    """With the cache, the K samples of one prompt decode as K query columns of ONE cache row (the prompt's KV
    is read once per step, never copied per sample), also when samples stop at different steps; tokens and
    logprobs are the uncached ones, for the sdpa and eager attention of a Llama built from a config."""
    model = _config_llama(tokenizer, kv_heads=4, attn_implementation=attn)
    assert model.config._attn_implementation == attn
    on, off = _pair(model, tokenizer)
    prompt = tokenizer.encode("take apple 1 from desk 1. Nothing happens. " * 3, add_special_tokens=False)
    free = SamplingParams(max_tokens=6, seed=4, stop=())
    first = off.sample(prompt, 4, free)
    # sample 0 stops at its 2nd token (its other samples run on), unless they sampled that token earlier
    stop_tok = first.sequences[0].tokens[1]
    params = SamplingParams(max_tokens=6, seed=4, stop=(stop_tok,))
    want = off.sample(prompt, 4, params)
    lengths = sorted(len(s.tokens) for s in want.sequences)
    assert lengths[0] < lengths[-1] == 6  # samples of one row finish at different steps
    shapes = _decode_shapes(on)
    _assert_same(on.sample(prompt, 4, params), want)  # cold: prompt prefilled, nothing cached
    _assert_same(on.sample(prompt, 4, params), want)  # warm: prompt read from the cache
    decode = [s for s in shapes if s[1] <= 4]
    assert decode and all(s[0] == 1 for s in decode)  # one cache row for the 4 samples
    assert max(s[1] for s in decode) == 4 and min(s[1] for s in decode) < 4  # live samples only


@settings(max_examples=12)
@given(
    picks=st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(1, 5), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    seed=st.integers(0, 10_000),
)
def test_shared_decode_matches_uncached_on_random_batches(
    tokenizer: Any, picks: list[tuple[int, int, int, bool]], seed: int
) -> None:
    """Any coalesced batch (prompts sharing prefixes or not, repeated prompts, 1-3 samples each, different
    lengths, greedy or sampled, stop tokens): the cached sampler returns the uncached tokens and logprobs."""
    from tempo_rl.backends.local import build_tiny_model

    global _RANDOM_PAIR
    if _RANDOM_PAIR is None:
        model = build_tiny_model(len(tokenizer), hidden_size=32, num_layers=2, num_heads=2, seed=5)
        on, off = _pair(model, tokenizer)
        _RANDOM_PAIR = (on, off, _decode_shapes(on))
    on, off, shapes = _RANDOM_PAIR
    shapes.clear()
    base = tokenizer.encode(
        "You are in the middle of a room. Looking quickly around you,", add_special_tokens=False
    )
    prompts = [base * 2, base * 2 + base[:5], base[3:] * 2, base[:20]]
    stop_ids = tuple(tokenizer.encode(" a", add_special_tokens=False))
    reqs = [
        (
            prompts[k],
            n,
            SamplingParams(
                max_tokens=m, seed=seed + i, temperature=1.0 if hot else 0.0, stop=stop_ids if i % 2 else ()
            ),
        )
        for i, (k, n, m, hot) in enumerate(picks)
    ]

    async def batch(client: Any) -> list[Any]:
        return await asyncio.gather(*(client.sample_async(p, n, q) for p, n, q in reqs))

    for a, b in zip(asyncio.run(batch(on)), asyncio.run(batch(off))):
        _assert_same(a, b)
    # every forward (prefill and decode) has one batch row per distinct prompt, however many samples
    assert shapes and max(shape[0] for shape in shapes) <= len({k for k, *_ in picks})
    assert len(shapes) <= 1 + max(m for *_, m, _ in picks)


_RANDOM_PAIR: Any = None


def test_shared_decode_needs_an_attention_that_takes_4d_masks() -> None:
    """sdpa and eager take the custom 4D mask; flash-attention kernels do not (the per-sample loop runs)."""
    from types import SimpleNamespace

    from tempo_rl.backends.local.sampling import shared_decode_supported

    def model(impl: str | None) -> Any:
        return SimpleNamespace(config=SimpleNamespace(_attn_implementation=impl))

    assert shared_decode_supported(model("sdpa")) and shared_decode_supported(model("eager"))
    assert not shared_decode_supported(model("flash_attention_2"))
    assert not shared_decode_supported(model("flex_attention"))
    assert not shared_decode_supported(model(None))


def test_next_turn_reuses_the_resident_prompt_in_place(tokenizer: Any) -> None:
    """A one-prompt call whose prompt extends the previous one's reads the previous prompt's KV where it
    already lies (the resident buffer): all its tokens count as hits, not only whole cached blocks, and the
    results are the uncached ones; a prompt that diverges early falls back to the stored blocks."""
    from tempo_rl.backends.local import build_tiny_model
    from tempo_rl.backends.local.prefix_cache import DEFAULT_BLOCK_TOKENS as B

    model = build_tiny_model(len(tokenizer), hidden_size=32, num_layers=2, num_heads=2, seed=7)
    on, off = _pair(model, tokenizer)
    prompt = tokenizer.encode("take apple 1 from desk 1. Nothing happens. " * 3, add_special_tokens=False)
    prompt = prompt[: (len(prompt) // B) * B + 5]  # not a whole number of blocks
    p = SamplingParams(max_tokens=4, seed=2, stop=())
    first = on.sample(prompt, 2, p)
    _assert_same(first, off.sample(prompt, 2, p))
    follow = (
        prompt + list(first.sequences[1].tokens) + tokenizer.encode(" go to desk 1", add_special_tokens=False)
    )
    before = on.prefix_cache_stats()["sampling/prefix_hit_tokens"]
    _assert_same(on.sample(follow, 2, p), off.sample(follow, 2, p))
    assert on.prefix_cache_stats()["sampling/prefix_hit_tokens"] - before == len(prompt)  # 5 more than blocks
    other = prompt[:B] + tokenizer.encode(" open the fridge", add_special_tokens=False) + prompt[B:]
    before = on.prefix_cache_stats()["sampling/prefix_hit_tokens"]
    _assert_same(on.sample(other, 1, p), off.sample(other, 1, p))
    assert on.prefix_cache_stats()["sampling/prefix_hit_tokens"] - before == B  # the one shared stored block


def test_resident_buffer_bookkeeping() -> None:
    """Hand-computed: the held tokens' longest common prefix with the prompt (never its last token), reset
    while a call writes, on growth and on clear; a buffer over the budget is not kept."""
    import torch

    from tempo_rl.backends.local.prefix_cache import ScratchBuffers

    like = torch.zeros(1)
    s = ScratchBuffers(max_bytes=4 * 1 * 2 * 1 * 1 * 512 * 2)  # one float32 buffer of 512 columns fits
    layout = (1, 2, 1, 1, 2)
    buf, n = s.resident((1, 2, 3), layout, 10, like)
    assert n == 0 and tuple(buf.shape) == (1, 2, 1, 1, 256, 2)  # capacity rounded up to 256 columns
    s.set_resident((1, 2, 3, 4), buf)
    again, n = s.resident((1, 2, 3, 9, 9), layout, 10, like)
    assert again is buf and n == 3
    assert s.resident((1, 2, 3, 4), layout, 10, like)[1] == 0  # forgotten until set_resident
    s.set_resident((1, 2, 3, 4), buf)
    assert s.resident((1, 2, 3, 4), layout, 10, like)[1] == 3  # never the prompt's last token
    s.set_resident((1, 2, 3, 4), buf)
    grown, n = s.resident((1, 2, 3, 4, 5), layout, 300, like)
    assert n == 0 and grown.shape[4] == 512  # a larger buffer starts empty
    s.set_resident((1, 2, 3, 4), buf)  # a stale buffer is not recorded
    assert s.resident((1, 2, 3, 4, 5), layout, 300, like)[1] == 0
    s.set_resident((7, 8), grown)
    s.clear()
    assert s.resident((7, 8, 9), layout, 10, like)[1] == 0
    big, n = s.resident((1, 2), layout, 600, like)  # 768 columns > budget: used once, not kept
    s.set_resident((1,), big)
    assert s.resident((1, 2), layout, 600, like)[0] is not big


@settings(max_examples=200)
@given(a=st.lists(st.integers(0, 2), max_size=12), b=st.lists(st.integers(0, 2), max_size=12))
def test_common_prefix(a: list[int], b: list[int]) -> None:
    from tempo_rl.backends.local.prefix_cache import _common_prefix

    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    assert _common_prefix(tuple(a), tuple(b)) == n


# ---------------------------------------------------------------------------------------------- policy versions


def test_new_policy_version_starts_empty_and_never_mixes(tokenizer: Any, tmp_path: Path) -> None:
    """After optim_step the new sampler's cache is empty, the old one's is emptied, and the new sampler samples
    exactly as an uncached sampler on the new weights, although its prompt was cached under the old weights."""
    cfg = LocalBackendConfig(hidden_size=32, num_layers=2, num_heads=2, state_dir=str(tmp_path), seed=0)
    training, s0 = create_clients(cfg, tokenizer=tokenizer)
    prompt = tokenizer.encode("Your task is to: put a clean apple in the fridge.", add_special_tokens=False)
    p = SamplingParams(max_tokens=6, seed=1, stop=())
    first = s0.sample(prompt, 2, p)
    s0.sample(prompt + list(first.sequences[0].tokens), 1, p)
    assert s0.prefix_cache_stats()["sampling/prefix_cache_tokens"] > 0
    datums = [
        completion_datum(prompt, list(s.tokens), list(s.logprobs), 1.0, vocab_size=len(tokenizer))
        for s in first.sequences
    ]
    training.forward_backward(datums, "importance_sampling")
    training.optim_step(AdamParams(learning_rate=5e-2))
    s1 = training.save_weights_and_get_sampling_client()
    assert s1.prefix_cache_stats()["sampling/prefix_cache_tokens"] == 0
    assert s0.prefix_cache_stats()["sampling/prefix_cache_tokens"] == 0  # older version: memory freed
    from tempo_rl.backends.local import LocalSamplingClient

    fresh = LocalSamplingClient(s1.model, tokenizer, prefix_cache_bytes=0)
    follow = prompt + list(first.sequences[0].tokens)
    a, b = s1.sample(follow, 2, p), fresh.sample(follow, 2, p)
    _assert_same(a, b)
    assert s1.prefix_cache_stats()["sampling/prefix_hit_tokens"] == 0  # nothing of the old weights was reused
    # the old sampler keeps working (it refills its own cache)
    _assert_same(
        s0.sample(follow, 1, p),
        LocalSamplingClient(s0.model, tokenizer, prefix_cache_bytes=0).sample(follow, 1, p),
    )
    # the training client sums every sampler's counters for the run's metrics
    m = training.sampling_stats.as_metrics()  # type: ignore[attr-defined]
    assert m["sampling/prefill_tokens"] == sum(
        c.prefix_cache_stats()["sampling/prefill_tokens"] for c in (s0, s1)
    )
    assert m["sampling/prefix_hit_tokens"] > 0


def test_config_turns_the_cache_on_by_default_and_off_with_zero(tokenizer: Any, tmp_path: Path) -> None:
    on = create_clients(LocalBackendConfig(hidden_size=32, num_layers=1, num_heads=2), tokenizer=tokenizer)[1]
    assert on.prefix_cache is not None  # type: ignore[attr-defined]
    off = create_clients(
        {"kind": "local", "hidden_size": 32, "num_layers": 1, "num_heads": 2, "prefix_cache_bytes": 0},
        tokenizer=tokenizer,
    )[1]
    assert off.prefix_cache is None  # type: ignore[attr-defined]
    sized = create_clients(
        LocalBackendConfig(hidden_size=32, num_layers=1, num_heads=2, prefix_cache_bytes=12345),
        tokenizer=tokenizer,
    )[1]
    assert sized.prefix_cache.max_bytes == 12345  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="prefix_cache_bytes"):
        LocalBackendConfig(prefix_cache_bytes=-1)


def test_default_budget_is_an_eighth_of_memory() -> None:
    import os

    from tempo_rl.backends.local.prefix_cache import default_cache_bytes

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert default_cache_bytes("cpu") == ram // 8


def test_unsupported_cache_turns_itself_off(tokenizer: Any) -> None:
    """A model whose cache has sliding-window layers: the cache turns off and sampling is the uncached one."""
    import torch
    import transformers

    cfg = transformers.MistralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        sliding_window=8,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.MistralForCausalLM(cfg)
    on, off = _pair(model, tokenizer)
    prompt = tokenizer.encode("take apple 1 from desk 1. " * 4, add_special_tokens=False)
    p = SamplingParams(max_tokens=5, seed=0, stop=())
    for _ in range(2):
        _assert_same(on.sample(prompt, 2, p), off.sample(prompt, 2, p), atol=0.0)
    assert on.prefix_cache is not None and not on.prefix_cache.enabled
    assert "DynamicCache" in str(on.prefix_cache.disabled_reason)
    assert on.prefix_cache_stats()["sampling/prefix_hit_tokens"] == 0


# ---------------------------------------------------------------------------------------------- the store itself


def _fake_kv(tokens: tuple[int, ...]) -> Any:
    """``(start, stop) -> [1 layer, 2, 1 head, n, 2]`` whose entries encode (token, position): checkable KV."""
    import torch

    def kv(start: int, stop: int) -> Any:
        t = torch.tensor(tokens[start:stop], dtype=torch.float32)
        p = torch.arange(start, stop, dtype=torch.float32)
        pair = torch.stack([t, p], dim=-1)  # [n, 2]
        return torch.stack([pair, -pair])[None, :, None]  # [1, 2, 1, n, 2]

    return kv


def test_lookup_blocks_budget_and_lru_pinned() -> None:
    """Hand-computed: blocks of 2 tokens, 2 * 1 * 2 * 2 * 4 = 32 bytes per block, budget 4 blocks."""
    from tempo_rl.backends.local.prefix_cache import PrefixCache, PrefixCacheCounters

    c = PrefixCacheCounters()
    cache = PrefixCache(128, block_tokens=2, counters=[c])
    a = (1, 2, 3, 4, 5)
    cache.insert(a, _fake_kv(a))  # blocks (1,2), (3,4); the odd last token is not stored
    assert (cache.nbytes, cache.cached_tokens, c.inserted_tokens) == (64, 4, 4)
    assert cache.bytes_per_token() == 16
    assert len(cache.lookup((1, 2, 3, 4, 9))) == 2
    assert len(cache.lookup((1, 2, 3, 4))) == 1  # never the last token: 3 usable tokens -> 1 block
    assert len(cache.lookup((1, 2, 7, 7))) == 1
    assert cache.lookup((2, 1, 3)) == []
    b = (1, 2, 6, 6)  # shares block (1, 2) with a: stored once
    cache.insert(b, _fake_kv(b))
    assert (cache.nbytes, c.evictions) == (96, 0)
    cache.lookup((1, 2, 3, 4, 0))  # a's path is now more recent than b's leaf
    d = (8, 8, 9, 9)
    cache.insert(d, _fake_kv(d))  # 5 blocks > 4: evict the LRU leaf, b's (6, 6)
    assert (cache.nbytes, c.evictions, c.evicted_tokens, c.peak_bytes) == (128, 1, 2, 160)
    assert len(cache.lookup((1, 2, 6, 6, 0))) == 1
    assert len(cache.lookup((1, 2, 3, 4, 0))) == 2
    assert len(cache.lookup((8, 8, 9, 9, 0))) == 2
    cache.clear()
    assert (cache.nbytes, cache.cached_tokens) == (0, 0)
    with pytest.raises(ValueError, match="prefix_cache_bytes = 0"):
        PrefixCache(0)


@settings(max_examples=60)
@given(
    seqs=st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=12), min_size=1, max_size=12),
    budget_blocks=st.integers(1, 8),
    block=st.integers(1, 3),
)
def test_store_invariants(seqs: list[list[int]], budget_blocks: int, block: int) -> None:
    """Whatever is inserted: the budget holds after each insertion, the bytes are the stored blocks' bytes, a
    lookup returns the KV of exactly the prompt's tokens at their positions, and never its last token."""
    import torch

    from tempo_rl.backends.local.prefix_cache import PrefixCache

    per_block = 2 * 2 * block * 4
    cache = PrefixCache(budget_blocks * per_block, block_tokens=block)
    for j, s in enumerate(seqs):
        toks = tuple(s)
        known = cache.lookup_path(toks)  # the sampler's hint; the insertion in between may evict it
        other = tuple(seqs[(j * 7 + 3) % len(seqs)])
        cache.insert(other, _fake_kv(other))
        cache.insert(toks, _fake_kv(toks), known=known)
        assert cache.nbytes <= cache.max_bytes
        assert cache.nbytes == cache.cached_tokens // block * per_block
        stack, reachable = [cache._root], 0  # every stored block hangs from the root (none orphaned)
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            reachable += node is not cache._root
        assert reachable * block == cache.cached_tokens
        for q in seqs:
            blocks = cache.lookup(tuple(q))
            n = len(blocks) * block
            assert n <= len(q) - 1
            if blocks:
                got = torch.cat(blocks, dim=3)[0, 0, 0]
                want = torch.stack(
                    [torch.tensor(q[:n], dtype=torch.float32), torch.arange(n, dtype=torch.float32)], -1
                )
                assert torch.equal(got, want)
