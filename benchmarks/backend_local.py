"""Local-backend throughput on CPU and the cost of growing a multi-turn prompt, in one run, one JSON line.

Figures (all measured side by side in this process, default small model = ``LocalBackendConfig()``: Llama
architecture, width 64, 2 layers, offline byte-level BPE tokenizer trained on ALFWorld-like text):

* ``sampling_tokens_per_s``: generated tokens per wall second when N branches call ``sample_async``
  concurrently (the micro-batcher coalesces them into one KV-cache decode loop), and
  ``sampling_tokens_per_s_sequential``: the same requests issued one after another; ``coalescing_speedup`` is
  their ratio.
* ``training_tokens_per_s``: ``forward_backward`` (importance sampling) + ``optim_step`` over a batch of
  datums, model-input tokens per wall second.
* ``extend_ms_turn5`` / ``extend_ms_turn50``: median wall time of :meth:`ChatRenderer.extend` at turn 5 and 50
  of a 50-turn conversation (target ``extend_turn50_over_turn5 <= 2``), and the same for the reference
  procedure (render the whole conversation three times and re-tokenize it): ``rerender_ms_turn5/50``.

* The KV prefix cache (:mod:`tempo_rl.backends.local.prefix_cache`), cache on (default budget) vs off, side
  by side: ``turn5_*`` / ``turn50_*``: one ``sample`` call (4 samples x 8 tokens) at turn 5 and 50 of a growing
  conversation (``prompt_tokens_turn50`` ~ 3,900 tokens; target ``turn50_over_turn5_cache_on <= 2``);
  ``critic_k4_*``: one critic request of K = 4 samples on the turn-50 prompt plus a question (mean of 4
  queries); ``branches_n4_*``: N = 4 branches restored at the turn-50 prompt, each with its own observation,
  sampled concurrently; in wall ms and in process CPU ms (``_cpu_ms_``: unaffected by other processes on a
  shared machine; it still varies with the machine's load), minimum over repeats (the turn-5 and turn-50
  calls are each timed 5 times, 3 with ``--large``, from the same cache state: trie, resident-buffer tokens
  and counters restored before each); ``prefix_cache_bytes_per_token`` and ``prefix_hit_rate``. With
  ``--large`` the same for a width-256, 4-layer model (``w256_*``).
* ``smollm2_*``: ``sampling_tokens_per_s`` (4 branches x 32 tokens) and ``training_tokens_per_s`` (4 datums x
  256 tokens) of the real SmolLM2-135M-Instruct (134.5M parameters, its own tokenizer) from the model cache,
  full fine-tuning and LoRA rank 8 (``smollm2_lora8_*``); ``smollm2_skipped`` when it is not cached
  (``tempo-rl model fetch smollm2``), ``--no-real-model`` to leave it out.
* ``main_job_*``: the README main job shortened by ``main_job_overrides`` (``--quick``: shorter still), cache
  on and off: summed ``time/sampling_s``, wall and CPU seconds of the run, prefix hit and prefill tokens.

Usage: ``python benchmarks/backend_local.py [--quick] [--large] [--no-main-job] [--no-real-model]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

OBS = (
    "You arrive at countertop {k}. On the countertop {k}, you see a apple {k}, a bread 1, a butterknife 2, "
    "a cup 3, and a saltshaker 1."
)


def corpus() -> list[str]:
    """ALFWorld-like texts for the offline tokenizer."""
    texts = [OBS.format(k=k) for k in range(1, 12)]
    texts += [f"go to countertop {k}" for k in range(1, 12)] + [
        f"take apple {k} from countertop {k}" for k in range(12)
    ]
    texts += [
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a drawer 2."
    ] * 5
    return texts * 10


def _conversation_turn(k: int) -> dict[str, str]:
    return {
        "role": "tool",
        "content": OBS.format(k=k % 11 + 1) + "\nAvailable actions: go to countertop 1, look",
    }


def bench_extend(tok: Any, turns: int, repeats: int) -> dict[str, float]:
    """Median extension time per turn (ours vs the reference's 3 full renders + re-tokenize)."""
    from tempo_rl.rollout.renderer import ChatRenderer
    from tempo_rl.rollout.tool_call import format_tool_call

    start = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": OBS.format(k=1)}]
    completion = tok.encode(format_tool_call("go to countertop 2"), add_special_tokens=False)
    completion.append(tok.eos_token_id)
    ours: dict[int, list[float]] = {5: [], turns: []}
    ref: dict[int, list[float]] = {5: [], turns: []}
    for _ in range(repeats):
        r = ChatRenderer(tok)
        state = r.start(start)
        for k in range(1, turns + 1):
            new = [_conversation_turn(k)]
            t0 = time.perf_counter()
            ext = r.extend(state, completion, new)
            dt = time.perf_counter() - t0
            if k in ours:
                ours[k].append(dt)
                msgs = list(ext.state.messages)
                t0 = time.perf_counter()  # reference: three full renders + full tokenization per step
                r.render_text(msgs[:-1], False)
                r.render_text(msgs[:-2], True)
                tok.encode(r.render_text(msgs, True), add_special_tokens=False)
                ref[k].append(time.perf_counter() - t0)
            state = ext.state
        assert r.stats.restarts == 0
    m = {k: statistics.median(v) * 1e3 for k, v in ours.items()}
    mr = {k: statistics.median(v) * 1e3 for k, v in ref.items()}
    return {
        "extend_ms_turn5": round(m[5], 4),
        f"extend_ms_turn{turns}": round(m[turns], 4),
        f"extend_turn{turns}_over_turn5": round(m[turns] / m[5], 3),
        "rerender_ms_turn5": round(mr[5], 4),
        f"rerender_ms_turn{turns}": round(mr[turns], 4),
        f"rerender_turn{turns}_over_turn5": round(mr[turns] / mr[5], 3),
        f"prompt_tokens_turn{turns}": len(state.tokens),
    }


def bench_sampling(training: Any, tok: Any, branches: int, max_tokens: int) -> dict[str, float]:
    from tempo_rl.backends import SamplingParams

    sampler = training.save_weights_and_get_sampling_client()
    prompt = tok.encode(" ".join(OBS.format(k=k) for k in range(1, 8)), add_special_tokens=False)
    params = [
        SamplingParams(max_tokens=max_tokens, seed=k, stop=()) for k in range(branches)
    ]  # no stop: full length
    sampler.sample(prompt, 1, SamplingParams(max_tokens=4, seed=0))  # warm-up

    async def concurrent() -> list[Any]:
        return await asyncio.gather(*(sampler.sample_async(prompt, 1, p) for p in params))

    t0 = time.perf_counter()
    res = asyncio.run(concurrent())
    t_batched = time.perf_counter() - t0
    n_batched = sum(len(s.tokens) for r in res for s in r.sequences)
    t0 = time.perf_counter()
    n_seq = sum(len(s.tokens) for p in params for s in sampler.sample(prompt, 1, p).sequences)
    t_seq = time.perf_counter() - t0
    return {
        "sampling_tokens_per_s": round(n_batched / t_batched, 1),
        "sampling_tokens_per_s_sequential": round(n_seq / t_seq, 1),
        "coalescing_speedup": round((n_batched / t_batched) / (n_seq / t_seq), 2),
        "sampling_branches": branches,
        "sampling_prompt_tokens": len(prompt),
    }


def _sampler(training: Any, cache_bytes: int | None) -> Any:
    """A sampling client on ``training``'s weights with the given prefix-cache budget (0 = off)."""
    from tempo_rl.backends.local import LocalSamplingClient

    return LocalSamplingClient(
        training.model, training.tokenizer, device=training.device, prefix_cache_bytes=cache_bytes
    )


def _observation_tokens(tok: Any, k: int) -> list[int]:
    """One rendered observation turn plus the next assistant header (about 90 tokens)."""
    text = f"<|im_start|>tool\n{_conversation_turn(k)['content']}<|im_end|>\n<|im_start|>assistant\n"
    return list(tok.encode(text, add_special_tokens=False))


def _grow_conversation(
    sampler: Any, tok: Any, turns: int, branches: int, max_tokens: int, timed: dict[int, int] | None = None
) -> tuple[dict[int, tuple[float, float]], list[int]]:
    """Play ``turns`` turns: sample ``branches`` x ``max_tokens`` tokens from the prompt, then extend the prompt
    with the first branch's tokens and the next observation (prompt_{t+1} strictly extends prompt_t, as the
    renderer guarantees). Returns the (wall, CPU) seconds of each turn's ``sample`` call and the final prompt.

    ``timed`` maps turns to a number of repeats: such a turn's call is timed that many times, each from the
    same cache state (a copy of the cache taken before the first), and its minimum (wall, CPU) is kept, so a
    single noisy call on a shared machine does not decide the turn-5 / turn-50 figures."""
    from tempo_rl.backends import SamplingParams

    start = "<|im_start|>system\nYou are an agent.<|im_end|>\n<|im_start|>user\n" + OBS.format(k=1)
    prompt = list(tok.encode(start, add_special_tokens=False)) + _observation_tokens(tok, 0)
    seconds: dict[int, tuple[float, float]] = {}
    for t in range(1, turns + 1):
        params = SamplingParams(max_tokens=max_tokens, seed=t, stop=())
        repeats = (timed or {}).get(t, 1)
        saved = _snapshot(sampler) if repeats > 1 else None
        best = (float("inf"), float("inf"))
        for r in range(repeats):
            if r and saved is not None:
                _restore(sampler, saved)
            t0, c0 = time.perf_counter(), time.process_time()
            res = sampler.sample(prompt, branches, params)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            best = (min(best[0], wall), min(best[1], cpu))
        seconds[t] = best
        prompt = prompt + list(res.sequences[0].tokens) + _observation_tokens(tok, t)
    return seconds, prompt


def _copy_cache(cache: Any) -> Any:
    """A copy of a prefix cache's trie and LRU order (the stored KV tensors, never written in place, its
    scratch buffers and its counter objects are shared); iterative: the trie is hundreds of blocks deep."""
    from collections import OrderedDict

    from tempo_rl.backends.local.prefix_cache import PrefixCache, _Node

    new = PrefixCache(cache.max_bytes, block_tokens=cache.block_tokens, counters=cache._counters)
    twin = {id(cache._root): new._root}
    stack = [cache._root]
    while stack:
        node = stack.pop()
        for key, child in node.children.items():
            twin[id(child)] = _Node(twin[id(node)], child.block, child.kv, child.depth)
            twin[id(node)].children[key] = twin[id(child)]
            stack.append(child)
    new._lru = OrderedDict((id(twin[k]), twin[k]) for k in cache._lru)
    new.nbytes, new._bytes_per_token, new.scratch = cache.nbytes, cache._bytes_per_token, cache.scratch
    return new


def _snapshot(sampler: Any) -> tuple[Any, Any, Any] | None:
    """A copy of ``sampler``'s prefix cache, of its counters' values and of the tokens its resident buffer
    holds (None without a cache)."""
    import dataclasses

    cache = sampler.prefix_cache
    if cache is None:
        return None
    resident = getattr(cache.scratch, "_resident_tokens", ())  # what its one-prompt buffer holds
    return _copy_cache(cache), [dataclasses.replace(c) for c in cache._counters], resident


def _restore(sampler: Any, saved: tuple[Any, Any, Any] | None) -> None:
    """Put back the state of :func:`_snapshot` (a fresh copy of it, so that it can be restored again)."""
    import dataclasses

    if saved is None:
        return
    cache, values, resident = saved
    sampler.prefix_cache = _copy_cache(cache)
    if hasattr(cache.scratch, "_resident_tokens"):  # the buffer's columns of those tokens are unchanged
        cache.scratch._resident_tokens = resident
    for target, value in zip(cache._counters, values):
        for f in dataclasses.fields(target):
            setattr(target, f.name, getattr(value, f.name))


def _one_prefix_cache_run(
    training: Any,
    tok: Any,
    budget: int | None,
    turns: int,
    branches: int,
    max_tokens: int,
    timed: dict[int, int] | None = None,
) -> dict[str, Any]:
    """One growing conversation, then K critic samples and N branches from its long final prompt."""
    from tempo_rl.backends import SamplingParams

    sampler = _sampler(training, budget)
    sampler.sample([1, 2, 3], 1, SamplingParams(max_tokens=2, seed=0))  # warm-up
    seconds, prefix = _grow_conversation(sampler, tok, turns, branches, max_tokens, timed)
    # the actor's turn at the long prefix (it fills the cache there, as in a real episode)
    sampler.sample(prefix, 1, SamplingParams(max_tokens=max_tokens, seed=0, stop=()))
    critic_q = [
        list(tok.encode(f"<|im_start|>user\nValue of state {q}?<|im_end|>\n", add_special_tokens=False))
        for q in range(PREFIX_QUERIES)
    ]
    t0, c0 = time.perf_counter(), time.process_time()
    for q, suffix in enumerate(critic_q):  # one request per critic query, K samples each
        sampler.sample(prefix + suffix, PREFIX_K, SamplingParams(max_tokens=6, seed=q, stop=()))
    critic_s = ((time.perf_counter() - t0) / PREFIX_QUERIES, (time.process_time() - c0) / PREFIX_QUERIES)
    branch_prompts = [prefix + _observation_tokens(tok, 100 + n) for n in range(PREFIX_N)]
    t0, c0 = time.perf_counter(), time.process_time()
    asyncio.run(_branch_round(sampler, branch_prompts, max_tokens))
    branches_s = (time.perf_counter() - t0, time.process_time() - c0)
    return {
        "seconds": seconds,
        "critic_s": critic_s,
        "branches_s": branches_s,
        "prefix_tokens": len(prefix),
        "sampler": sampler,
    }


async def _branch_round(sampler: Any, prompts: list[list[int]], max_tokens: int) -> list[Any]:
    """N restored branches, each with its own next observation, sampled concurrently (one coalesced batch)."""
    from tempo_rl.backends import SamplingParams

    return await asyncio.gather(
        *(
            sampler.sample_async(p, 1, SamplingParams(max_tokens=max_tokens, seed=n, stop=()))
            for n, p in enumerate(prompts)
        )
    )


#: critic queries, K samples per query and N branches of the long-prefix measurements
PREFIX_QUERIES, PREFIX_K, PREFIX_N = 4, 4, 4


def bench_prefix_cache(
    training: Any, tok: Any, *, repeats: int, turn_repeats: int = 1, label: str = ""
) -> dict[str, float]:
    """Sampling time at turn 5 vs turn 50 of a growing conversation (4 samples x 8 tokens a turn), and K critic
    samples / N branches from its long final prompt, with the prefix cache on (default budget) and off.

    On and off runs alternate, ``repeats`` times each, and in each run the turn-5 and turn-50 calls are timed
    ``turn_repeats`` times from the same cache state; every figure is the minimum over the repeats (the
    machine's noise only ever adds time), in wall milliseconds (``..._ms_...``) and in process CPU milliseconds
    (``..._cpu_ms_...``: the work itself, unaffected by other processes on a shared machine; torch runs one
    thread for the small models). Also the cache's bytes per cached token and its hit rate.
    """
    turns, branches, max_tokens = 50, 4, 8
    runs: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    for _ in range(repeats):
        for name, budget in (("on", None), ("off", 0)):
            timed = {5: turn_repeats, turns: turn_repeats}
            runs[name].append(
                _one_prefix_cache_run(training, tok, budget, turns, branches, max_tokens, timed)
            )
    out: dict[str, float] = {}
    for name, rs in runs.items():
        for clock, i in (("", 0), ("cpu_", 1)):
            t5 = min(r["seconds"][5][i] for r in rs)
            tn = min(r["seconds"][turns][i] for r in rs)
            out[f"{label}turn5_{clock}ms_cache_{name}"] = round(t5 * 1e3, 2)
            out[f"{label}turn{turns}_{clock}ms_cache_{name}"] = round(tn * 1e3, 2)
            out[f"{label}turn{turns}_over_turn5_{clock}cache_{name}"] = round(tn / t5, 2)
            critic = min(r["critic_s"][i] for r in rs)
            out[f"{label}critic_k{PREFIX_K}_{clock}ms_cache_{name}"] = round(critic * 1e3, 2)
            branch = min(r["branches_s"][i] for r in rs)
            out[f"{label}branches_n{PREFIX_N}_{clock}ms_cache_{name}"] = round(branch * 1e3, 2)
            total = min(sum(v[i] for v in r["seconds"].values()) for r in rs)
            out[f"{label}conversation_{clock}s_cache_{name}"] = round(total, 3)
    sampler = runs["on"][-1]["sampler"]
    stats = sampler.prefix_cache_stats()
    out[f"{label}prefix_cache_bytes_per_token"] = float(sampler.prefix_cache.bytes_per_token() or 0)
    out[f"{label}prefix_hit_rate"] = round(stats["sampling/prefix_hit_rate"], 4)
    out[f"{label}prefix_cache_bytes"] = stats["sampling/prefix_cache_bytes"]
    out[f"{label}prefix_prompt_tokens_turn{turns}"] = runs["on"][-1]["prefix_tokens"]
    return out


#: the main job shortened for the benchmark (labelled in the output): fewer warm-start episodes and updates, no
#: evaluation or checkpoints; the rollouts, branches, critic and endpoint samples are the main job's
MAIN_JOB_SHORT = (
    "warmstart.episodes=16",
    "warmstart.epochs=1",
    "tempo.warmup_updates=2",
    "tempo.td_updates=3",
    "run.eval_every=0",
    "run.checkpoint_every=100",
)
MAIN_JOB_QUICK = (
    "warmstart.episodes=4",
    "warmstart.epochs=1",
    "tempo.warmup_updates=1",
    "tempo.td_updates=1",
    "run.eval_every=0",
    "run.checkpoint_every=100",
)


def bench_main_job(overrides: tuple[str, ...]) -> dict[str, Any]:
    """The README main job (``training/main_job.toml``) with ``overrides``, prefix cache on (default budget) and
    off: summed ``time/sampling_s`` of its updates, the run's wall and CPU seconds, and the cache's counters."""
    import tempfile

    import tempo_rl.training as training_pkg
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import train_run

    config_path = Path(training_pkg.__file__).parent / "main_job.toml"
    out: dict[str, Any] = {"main_job_overrides": " ".join(overrides)}
    for name, budget in (("on", None), ("off", 0)):
        extra = [] if budget is None else [f"backend.prefix_cache_bytes={budget}"]
        config = load_config(config_path, [*overrides, *extra])
        run_dir = Path(tempfile.mkdtemp(prefix="tempo-bench-main-")) / "run"
        t0, c0 = time.perf_counter(), time.process_time()
        train_run(run_dir, config, console=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
        out[f"main_job_sampling_s_cache_{name}"] = round(
            sum(r.get("time/sampling_s") or 0.0 for r in records), 2
        )
        out[f"main_job_wall_s_cache_{name}"] = round(wall, 2)
        out[f"main_job_cpu_s_cache_{name}"] = round(cpu, 2)
        last = records[-1]
        out[f"main_job_prefix_hit_tokens_cache_{name}"] = last.get("sampling/prefix_hit_tokens")
        out[f"main_job_prefill_tokens_cache_{name}"] = last.get("sampling/prefill_tokens")
        out[f"main_job_prefix_cache_peak_bytes_cache_{name}"] = last.get("sampling/prefix_cache_peak_bytes")
    return out


def bench_training(training: Any, tok: Any, n_datums: int, length: int, steps: int) -> dict[str, float]:
    import numpy as np

    from tempo_rl.backends import AdamParams
    from tempo_rl.rollout.datums import completion_datum

    rng = np.random.default_rng(0)
    datums = []
    for _ in range(n_datums):
        toks = rng.integers(3, len(tok), size=length).tolist()
        half = length // 2
        datums.append(
            completion_datum(toks[:half], toks[half:], [-1.0] * (length - half), 0.5, vocab_size=len(tok))
        )
    training.forward_backward(datums[:1], "importance_sampling")  # warm-up
    training.optim_step(AdamParams(learning_rate=0.0))
    t0 = time.perf_counter()
    for _ in range(steps):
        out = training.forward_backward(datums, "importance_sampling")
        training.optim_step(AdamParams(learning_rate=1e-4))
    dt = time.perf_counter() - t0
    return {
        "training_tokens_per_s": round(steps * out.metrics["tokens"] / dt, 1),
        "training_batch_tokens": out.metrics["tokens"],
    }


def bench_real_model(quick: bool) -> dict[str, Any]:
    """``smollm2_*``: sampling and training tokens/s of SmolLM2-135M-Instruct (the cached real model, see
    ``tempo-rl model fetch smollm2``), measured like the small model's figures with its own tokenizer:
    full fine-tuning and LoRA rank 8. Skipped (``smollm2_skipped`` says why) when the model is not cached."""
    import tempfile

    from tempo_rl.backends import LocalBackendConfig, create_clients
    from tempo_rl.backends.local.pretrained import cached_model_path, model_dir

    path = cached_model_path("smollm2")
    if path is None:
        return {"smollm2_skipped": f"not in the cache ({model_dir('smollm2')}): tempo-rl model fetch smollm2"}
    import os

    import torch

    threads = os.cpu_count() or 1  # a 134.5M model uses every core (the small model's client set 1 thread)
    out: dict[str, Any] = {"smollm2_path": str(path), "smollm2_torch_threads": threads}
    for lora in (0, 8):
        cfg = LocalBackendConfig(
            model_path=str(path),
            lora_rank=lora,
            num_threads=threads,
            state_dir=tempfile.mkdtemp(prefix="tempo-bench-"),
        )
        training = create_clients(cfg)[0].inner
        tok = training.tokenizer
        tag = "smollm2_" if lora == 0 else "smollm2_lora8_"
        if lora == 0:
            fig = bench_sampling(training, tok, branches=2 if quick else 4, max_tokens=8 if quick else 32)
            out.update({f"smollm2_{k}": v for k, v in fig.items()})
            out["smollm2_params"] = sum(p.numel() for p in training.model.parameters())
            out["smollm2_vocab_size"] = len(tok)
        fig = bench_training(training, tok, n_datums=2 if quick else 4, length=64 if quick else 256, steps=1)
        out.update({f"{tag}{k}": v for k, v in fig.items()})
        out[f"{tag}trainable_params"] = sum(p.numel() for p in training.model.parameters() if p.requires_grad)
        del training
    torch.set_num_threads(1)  # back to the small model's setting for the figures measured after these
    out["smollm2_loadavg_1min"] = round(os.getloadavg()[0], 2)  # other processes on a shared machine
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fast smoke mode (smaller figures, same keys)")
    ap.add_argument(
        "--large", action="store_true", help="also the prefix-cache figures of a width-256, 4-layer model"
    )
    ap.add_argument(
        "--no-main-job", action="store_true", help="skip the shortened main job, cache on and off"
    )
    ap.add_argument("--no-real-model", action="store_true", help="skip the SmolLM2-135M figures (smollm2_*)")
    args = ap.parse_args()
    import tempfile

    import torch

    from tempo_rl.backends import LocalBackendConfig, create_clients
    from tempo_rl.backends.local import build_tokenizer

    torch.manual_seed(0)
    tok = build_tokenizer(corpus(), vocab_size=1024)
    cfg = LocalBackendConfig(state_dir=tempfile.mkdtemp(prefix="tempo-bench-"))
    training = create_clients(cfg, tokenizer=tok)[0].inner  # the local client itself, not the retry layer
    q = args.quick
    out: dict[str, Any] = {"benchmark": "backend_local", "quick": q, "device": training.device}
    out.update(bench_sampling(training, tok, branches=8, max_tokens=16 if q else 64))
    out.update(
        bench_training(training, tok, n_datums=4 if q else 16, length=128 if q else 512, steps=1 if q else 3)
    )
    out.update(bench_extend(tok, turns=50, repeats=1 if q else 5))
    out.update(bench_prefix_cache(training, tok, repeats=1 if q else 3, turn_repeats=1 if q else 5))
    if args.large and not q:
        big, _ = create_clients(
            LocalBackendConfig(
                hidden_size=256, num_layers=4, state_dir=tempfile.mkdtemp(prefix="tempo-bench-")
            ),
            tokenizer=tok,
        )
        out.update(bench_prefix_cache(big, tok, repeats=1, turn_repeats=3, label="w256_"))
    if not args.no_real_model:
        out.update(bench_real_model(q))
    if not args.no_main_job:
        out.update(bench_main_job(MAIN_JOB_QUICK if q else MAIN_JOB_SHORT))
    out.update(
        {
            "model_params": sum(p.numel() for p in training.model.parameters()),
            "vocab_size": len(tok),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        }
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
