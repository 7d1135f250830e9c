"""The local backend at real-model scale: peak memory of the real-model ALFWorld job, and decoding and training
throughput against the machine's memory bandwidth, in one run, one JSON line.

Model: SmolLM2-135M-Instruct from the model cache (``tempo-rl model fetch smollm2``), or ``--model-path DIR``
(any local checkpoint with its tokenizer). The device is CUDA when ``torch.cuda.is_available()``, else the CPU
(``--device`` overrides). Without the model the line says ``"skipped"`` and why.

1. **The job** (``job_*``): TEMPO on one real ALFWorld game (``tests/data/alfworld``), LoRA rank 8, a warm start,
   a warm-up update and a TD update (T = 4, H = 2, N = 2, K = 4, 32 tokens a turn; the configuration of
   ``tests/training/test_real_model_alfworld.py``'s LoRA run). ``peak_rss_bytes`` is the process's peak
   resident memory (``getrusage``), ``base_rss_bytes`` the process before the model was loaded,
   ``weight_bytes`` the model's parameters. ``activation_bytes`` is measured after the job: the resident memory
   that one ``forward_backward`` of the job's largest training call adds (freed memory handed back to the
   system first, ``malloc_trim``). The target: ``peak_rss_bytes - base_rss_bytes <= 3 * weight_bytes +
   activation_bytes + prefix_cache_budget_bytes`` (``peak_within_target``). On CUDA, ``cuda_peak_bytes`` is the
   allocator's peak. ``job_sampling_rows_*``: completions per batched sampling computation during the job.
2. **Bandwidth** (``copy_bandwidth_bytes_per_s``): the best of 5 copies of a 256 MiB float32 tensor with the
   benchmark's torch threads, counted STREAM-style (bytes read + bytes written over the time).
3. **Throughput** of the model in ``float32`` and ``bfloat16`` (``{dtype}_*``), LoRA rank 8 as in the job:
   ``decode_tokens_per_s_b{B}``: tokens per second of the decode loop alone (a call of M = 32 tokens minus a
   call of 1 token, B completions of one 300-token prompt whose KV the prefix cache holds, as in a rollout's
   later calls: the samples decode in place in a growing KV buffer); ``sampled_*``: tokens per second of the
   whole call; ``trained_tokens_per_s_b{B}``: ``forward_backward``
   + ``optim_step`` over B datums of 256 tokens. B is 1 and the trainer's batch, ``N * K = 8`` (the job's
   largest sampling batch: K critic samples on each of N branches). The bound of decoding at batch B is
   ``B * bandwidth / weight_bytes`` tokens/s (every decode step reads every weight once); ``*_of_bound`` is
   the measured rate over it (target at the trainer's batch: >= 0.5). ``products_tokens_per_s_b{B}``: the
   decode step's matrix products alone (every ``Linear`` weight once, on a ``[B, in]`` input, nothing else):
   the ceiling the machine's matrix-product kernels set at batch B; ``products_of_bound_b{B}`` is that
   ceiling over the bandwidth bound and ``decode_of_products_b{B}`` the decoding rate over the ceiling.
4. **Profile** (``profile_decode_top``): ``torch.profiler`` of decoding at the trainer's batch in float32, the
   eight (operator, input shapes) pairs with the most self time, as percentages of the profiled time.

Usage: ``python benchmarks/real_model.py [--quick] [--no-job] [--model-path DIR] [--device cpu|cuda]
[--dtypes float32,bfloat16]`` (``--quick``: a shorter job and shorter timings, same keys).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
GAMES = REPO / "tests" / "data" / "alfworld" / "json_2.1.1" / "valid_seen"
PREFIX_CACHE_BUDGET = 256 * 2**20
LORA_RANK = 8
BRANCHES, CRITIC_SAMPLES = 2, 4
TRAINER_BATCH = BRANCHES * CRITIC_SAMPLES

JOB_CONFIG = """
algorithm = "tempo"

[env]
name = "alfworld"
kwargs = {{ max_steps = {T} }}
games_dir = "{games}"
eval_games_dir = "{games}"

[backend]
kind = "local"
model_path = "{model}"
lora_rank = {lora}
device = "{device}"
prefix_cache_bytes = {cache}

[tempo]
max_rounds = {T}
macro_rounds = 2
branches = {N}
critic_samples = {K}
endpoint_samples = 1
states_per_batch = 1
warmup_updates = 1
warmup_games_per_batch = 1
td_updates = 1

[sampling]
max_tokens = 32
critic_answer = "sampled"
critic_max_tokens = 8
critic_max_prompt_tokens = 1500
max_trajectory_tokens = 3000

[warmstart]
expert = "walkthrough"
episodes = 1
batch_size = 2
learning_rate = 1e-4

[optim]
learning_rate = 1e-4

[kl]
coef = 0.0

[run]
loggers = []
eval_episodes = 1
checkpoint_every = 1
"""


def rss_bytes() -> int:
    """Resident memory now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def peak_rss_bytes() -> int:
    """The process's peak resident memory so far (``ru_maxrss``: KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def trim_heap() -> None:
    """Hand freed heap memory back to the system (glibc), so that a later growth of RSS is a real one."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class RssWatch:
    """The most resident memory seen while the ``with`` block runs (polled every 5 ms)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.005)

    def __enter__(self) -> RssWatch:
        self.peak = rss_bytes()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def synchronizer(device: str) -> Callable[[], None]:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.synchronize
    return lambda: None


def copy_bandwidth(device: str, mib: int = 256, repeats: int = 5) -> float:
    """Bytes moved per second (read + write) by the best of ``repeats`` copies of a ``mib`` MiB tensor."""
    import torch

    n = mib * 2**20 // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    sync = synchronizer(device)
    dst.copy_(src)
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2 * n * 4 / best


def weight_bytes_of(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


# --------------------------------------------------------------------------------------------------- the job
def run_job(model: Path, device: str, quick: bool) -> dict[str, Any]:
    """The real-model ALFWorld job (LoRA rank 8) in this process; its peak memory and sampling batches."""
    from tempo_rl.backends.local.client import LocalSamplingClient, LocalTrainingClient
    from tempo_rl.training.config import load_config
    from tempo_rl.training.options import TrainerOptions
    from tempo_rl.training.run import train_run

    rows: list[int] = []
    trained: list[list[int]] = []
    run_orig, fb_orig = LocalSamplingClient._run, LocalTrainingClient.forward_backward

    def run_hook(self: Any, reqs: Any) -> Any:
        rows.append(sum(r.num_samples for r in reqs))
        return run_orig(self, reqs)

    def fb_hook(self: Any, datums: Any, *args: Any, **kwargs: Any) -> Any:
        trained.append([len(d.model_input) for d in datums])
        return fb_orig(self, datums, *args, **kwargs)

    work = Path(tempfile.mkdtemp(prefix="tempo-real-model-"))
    try:
        games = work / "games"
        src = sorted(p for p in GAMES.iterdir() if p.name.startswith("look_at_obj_in_light"))[0]
        shutil.copytree(src, games / src.name)
        text = JOB_CONFIG.format(
            T=2 if quick else 4,
            games=games,
            model=model,
            lora=LORA_RANK,
            device=device,
            cache=PREFIX_CACHE_BUDGET,
            N=BRANCHES,
            K=CRITIC_SAMPLES,
        )
        (work / "job.toml").write_text(text)
        gc.collect()
        trim_heap()
        base = rss_bytes()
        setattr(LocalSamplingClient, "_run", run_hook)  # noqa: B010 - instrumentation of this process only
        setattr(LocalTrainingClient, "forward_backward", fb_hook)  # noqa: B010
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        try:
            summary = train_run(
                work / "run",
                load_config(work / "job.toml"),
                console=False,
                options=TrainerOptions(critic_answer_prefix="<value>"),  # the critic writes only the number
            )
        finally:
            setattr(LocalSamplingClient, "_run", run_orig)  # noqa: B010
            setattr(LocalTrainingClient, "forward_backward", fb_orig)  # noqa: B010
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        metrics = [json.loads(x) for x in (work / "run" / "metrics.jsonl").read_text().splitlines() if x]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    last = metrics[-1]
    return {
        "job_updates": summary["updates_done"],
        "job_wall_s": round(wall, 1),
        "job_cpu_s": round(cpu, 1),
        "base_rss_bytes": base,
        "peak_rss_bytes": peak_rss_bytes(),
        "job_sampling_batches": len(rows),
        "job_sampling_rows_mean": round(sum(rows) / max(len(rows), 1), 2),
        "job_sampling_rows_max": max(rows, default=0),
        "job_live_samplers_last": last.get("sampling/live_samplers"),
        "job_live_snapshots_max": max(m.get("sampling/live_snapshots", 0.0) for m in metrics),
        "job_snapshot_bytes_max": max(m.get("sampling/snapshot_bytes", 0.0) for m in metrics),
        "_trained": trained,
    }


# -------------------------------------------------------------------------------------------- throughput
def load(model: Path, dtype: str, device: str, threads: int) -> Any:
    from tempo_rl.backends import LocalBackendConfig
    from tempo_rl.backends.factory import create_local_clients

    cfg = LocalBackendConfig(
        model_path=str(model),
        dtype=dtype,  # type: ignore[arg-type]
        lora_rank=LORA_RANK,
        device=device,
        num_threads=threads if device == "cpu" else None,
        prefix_cache_bytes=PREFIX_CACHE_BUDGET,  # the job's: decoding in place in a growing KV buffer
        state_dir=tempfile.mkdtemp(prefix="tempo-real-model-"),
    )
    training, _ = create_local_clients(cfg)
    return training


def prompt_tokens(tok: Any, length: int) -> list[int]:
    from tempo_rl.rollout.renderer import ChatRenderer

    text = " ".join(
        f"You arrive at countertop {k}. On the countertop {k}, you see a apple {k}, a bread 1, a cup 3."
        for k in range(1, 40)
    )
    ids = list(ChatRenderer(tok).start([{"role": "user", "content": text}]).tokens)
    return ids[-length:]


def timed(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def decode_rates(training: Any, prompt: list[int], batch: int, tokens: int, sync: Callable[[], None]) -> Any:
    """(decode-only tokens/s, whole-call tokens/s) of ``batch`` completions of ``tokens`` tokens."""
    from tempo_rl.backends import SamplingParams

    sampler = training.save_weights_and_get_sampling_client()

    def call(n: int, seed: int) -> Callable[[], Any]:
        params = SamplingParams(max_tokens=n, temperature=1.0, seed=seed, stop=())
        return lambda: sampler.sample(prompt, batch, params)

    call(
        2, 0
    )()  # warm-up: the prompt's KV is in the prefix cache from here on, as in a rollout's later calls
    one = min(timed(call(1, seed), sync) for seed in (1, 2))
    full = timed(call(tokens, 3), sync)
    return batch * (tokens - 1) / max(full - one, 1e-9), batch * tokens / full


def products_rate(model: Any, batch: int, sync: Callable[[], None], repeats: int = 5) -> float:
    """Tokens per second of a decode step's matrix products alone: ``F.linear`` of a ``[batch, in]`` input with
    every ``Linear`` weight of ``model`` in module order (the projections, the LoRA adapters, the output layer),
    nothing else; the best of ``repeats`` passes. The ceiling that the machine's matrix-product kernels put on
    decoding at this batch, beside the bandwidth bound that assumes the weights stream at copy speed."""
    import torch

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {  # the adapters may keep float32 beside half-precision base weights
        (m.in_features, m.weight.dtype): torch.randn(
            batch, m.in_features, dtype=m.weight.dtype, device=m.weight.device
        )
        for m in linears
    }

    def step() -> None:
        with torch.no_grad():
            for m in linears:
                torch.nn.functional.linear(inputs[m.in_features, m.weight.dtype], m.weight)

    step()
    sync()
    return batch / min(timed(step, sync) for _ in range(repeats))


def train_rate(training: Any, batch: int, length: int, sync: Callable[[], None]) -> float:
    """Model-input tokens per second of ``forward_backward`` + ``optim_step`` over ``batch`` datums."""
    import numpy as np

    from tempo_rl.backends import AdamParams
    from tempo_rl.rollout.datums import completion_datum

    rng = np.random.default_rng(0)
    vocab = training.vocab_size
    datums = []
    for _ in range(batch):
        toks = rng.integers(3, vocab, size=length).tolist()
        half = length // 2
        datums.append(
            completion_datum(toks[:half], toks[half:], [-1.0] * (length - half), 0.5, vocab_size=vocab)
        )

    def step() -> None:
        training.forward_backward(datums, "importance_sampling")
        training.optim_step(AdamParams(learning_rate=1e-5))

    step()  # warm-up (allocates Adam's moments)
    return batch * length / timed(step, sync)


def activation_bytes(training: Any, lengths: list[int], device: str) -> int:
    """Memory one ``forward_backward`` over datums of ``lengths`` tokens adds (resident, or CUDA allocator)."""
    import numpy as np

    from tempo_rl.rollout.datums import completion_datum

    rng = np.random.default_rng(1)
    vocab = training.vocab_size
    datums = []
    for n in lengths:
        toks = rng.integers(3, vocab, size=n).tolist()
        cut = max(1, n - 32)  # a prompt and a 32-token completion, like the job's turns
        datums.append(completion_datum(toks[:cut], toks[cut:], [-1.0] * (n - cut), 0.5, vocab_size=vocab))
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        training.forward_backward(datums, "importance_sampling")
        return int(torch.cuda.max_memory_allocated() - before)
    gc.collect()
    trim_heap()
    before = rss_bytes()
    with RssWatch() as watch:
        training.forward_backward(datums, "importance_sampling")
    return watch.peak - before


def profile_decode(training: Any, prompt: list[int], batch: int, tokens: int) -> list[dict[str, Any]]:
    """The five operators with the most self time while decoding ``batch`` x ``tokens`` tokens."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from tempo_rl.backends import SamplingParams

    sampler = training.save_weights_and_get_sampling_client()
    params = SamplingParams(max_tokens=tokens, temperature=1.0, seed=0, stop=())
    sampler.sample(prompt, batch, params)  # the prompt's KV into the prefix cache
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts, record_shapes=True) as prof:
        sampler.sample(prompt, batch, params)
    on_gpu = torch.cuda.is_available() and str(training.device).startswith("cuda")

    def self_time(e: Any) -> float:  # the GPU's time on CUDA, the CPU's otherwise
        return float(getattr(e, "self_device_time_total", 0) if on_gpu else e.self_cpu_time_total)

    events = [e for e in prof.key_averages(group_by_input_shape=True) if self_time(e) > 0]
    total = sum(self_time(e) for e in events) or 1.0
    top = sorted(events, key=self_time, reverse=True)[:8]
    return [
        {
            "op": e.key,
            "shapes": str(e.input_shapes)[:80],
            "self_pct": round(100 * self_time(e) / total, 1),
            "calls": e.count,
        }
        for e in top
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a shorter job and shorter timings (same keys)")
    ap.add_argument("--no-job", action="store_true", help="skip the ALFWorld job (throughput only)")
    ap.add_argument("--model-path", default=None, help="a checkpoint directory (default: the cached smollm2)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument(
        "--dtypes", default="float32,bfloat16", help="comma-separated weight dtypes of the throughput figures"
    )
    args = ap.parse_args()

    import torch

    from tempo_rl.backends.local.pretrained import cached_model_path, model_dir

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out: dict[str, Any] = {"benchmark": "real_model", "quick": args.quick, "device": device}
    if device.startswith("cuda"):
        out["device_name"] = torch.cuda.get_device_name()
    model = Path(args.model_path) if args.model_path else cached_model_path("smollm2")
    if model is None:
        out["skipped"] = (
            f"the model is not in the cache ({model_dir('smollm2')}): tempo-rl model fetch smollm2"
        )
        print(json.dumps(out))
        return
    out["model"] = model.name
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    sync = synchronizer(device)
    q = args.quick
    trained: list[list[int]] = []
    if not args.no_job:
        job = run_job(model, device, q)
        trained = job.pop("_trained")
        out.update(job)
        if device.startswith("cuda"):
            out["cuda_peak_bytes"] = int(torch.cuda.max_memory_allocated())
    torch.set_num_threads(threads)  # the job's small-model rule does not apply; every core for the figures
    out["torch_threads"] = threads
    bandwidth = copy_bandwidth(device, mib=64 if q else 256)
    out["copy_bandwidth_bytes_per_s"] = round(bandwidth)
    tokens = 8 if q else 32
    train_len = 64 if q else 256
    dtypes = [d for d in args.dtypes.split(",") if d]
    if "float32" not in dtypes:
        dtypes.insert(0, "float32")  # the memory target and the profile are float32's
    for dtype in dtypes:
        gc.collect()
        training = load(model, dtype, device, threads)
        weights = weight_bytes_of(training.model)
        tok = training.tokenizer
        prompt = prompt_tokens(tok, 64 if q else 300)
        out[f"{dtype}_weight_bytes"] = weights
        for b in (1, TRAINER_BATCH):
            decode, whole = decode_rates(training, prompt, b, tokens, sync)
            bound = b * bandwidth / weights
            out[f"{dtype}_decode_tokens_per_s_b{b}"] = round(decode, 2)
            out[f"{dtype}_sampled_tokens_per_s_b{b}"] = round(whole, 2)
            out[f"{dtype}_decode_bound_tokens_per_s_b{b}"] = round(bound, 2)
            out[f"{dtype}_decode_of_bound_b{b}"] = float(f"{decode / bound:.4g}")
            products = products_rate(training.model, b, sync)
            out[f"{dtype}_products_tokens_per_s_b{b}"] = round(products, 2)
            out[f"{dtype}_products_of_bound_b{b}"] = float(f"{products / bound:.4g}")
            out[f"{dtype}_decode_of_products_b{b}"] = float(f"{decode / products:.4g}")
            out[f"{dtype}_trained_tokens_per_s_b{b}"] = round(train_rate(training, b, train_len, sync), 2)
        if dtype == "float32":
            out["weight_bytes"] = weights
            out["prefix_cache_budget_bytes"] = PREFIX_CACHE_BUDGET
            if trained:
                largest = max(trained, key=sum)
                out["job_largest_training_call_tokens"] = sum(largest)
                act = activation_bytes(training, largest, device)
                out["activation_bytes"] = act
                grown = out["peak_rss_bytes"] - out["base_rss_bytes"]
                target = 3 * weights + act + PREFIX_CACHE_BUDGET
                out["peak_over_weights"] = round(grown / weights, 2)
                out["target_bytes"] = target
                out["peak_within_target"] = grown <= target
            out["profile_decode_top"] = profile_decode(training, prompt, TRAINER_BATCH, tokens)
        del training, tok
    out.update(
        {
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_count": os.cpu_count(),
            "loadavg_1min": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
            "torch": torch.__version__,
        }
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
