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

Usage: ``python benchmarks/backend_local.py [--quick]``.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fast smoke mode (smaller figures, same keys)")
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
