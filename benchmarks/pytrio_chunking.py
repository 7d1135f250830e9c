"""What ``optim.chunk_datums`` does to the gradient on PyTRIO, against the documented sum.

tempo-rl documents every loss as a **sum** over target positions (:mod:`tempo_rl.backends.types`); the local
backend computes exactly that. pytrio 0.2.9 instead normalises each ``forward_backward`` call over totals of
that call's whole batch: ``plan_training_batch`` computes ``total_samples``, ``total_active_tokens`` (every
target that is not -100 *and*, for policy losses, every context token: tempo-rl's context targets are real
tokens with advantage 0) and ``total_advantage_tokens`` (targets with a non-zero advantage), and sends the same
totals with every micro-batch of the call, so the Trainer divides by one of them. The trainer splits an update
into calls of ``chunk_datums`` datums, so each call gets its own divisor.

This script builds an ALFWorld-shaped TEMPO update (``examples/configs/alfworld_pytrio.toml``: 4 states x (4
branches + 4 critic samples) = 32 datums; actor datums are 10-turn segments, critic datums one long prompt and
one reasoned answer; lengths drawn from a seeded RNG, not recorded from a run), runs pytrio's own
``plan_training_batch`` on it for several ``chunk_datums``, and reports for each divisor the weight every datum's
summed-loss gradient gets relative to the documented sum (1.0): its mean over datums, and max / min (1.0 = all
datums weighted alike). One JSON line.

Usage: ``python benchmarks/pytrio_chunking.py [--seed 0]``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np


def alfworld_like_batch(rng: np.random.Generator) -> list[Any]:
    """32 datums: 16 actor segments (10 turns) and 16 critic samples, ids in a 1000-token vocabulary."""
    from tempo_rl.rollout.datums import SequenceBuilder

    def ids(n: int) -> list[int]:
        return rng.integers(1, 1000, size=n).tolist()

    out = []
    for _ in range(16):  # actor: 4 states x 4 branches
        b = SequenceBuilder()
        b.add_context(ids(int(rng.integers(600, 1200))))  # task, room description
        for _turn in range(10):
            n = int(rng.integers(15, 60))
            b.add_sampled(ids(n), [-0.5] * n)
            b.add_context(ids(int(rng.integers(60, 250))))  # observation
        out.append(b.to_datum(float(rng.normal())))
    for _ in range(16):  # critic: 4 states x 4 samples
        b = SequenceBuilder()
        b.add_context(ids(int(rng.integers(1500, 6000))))
        n = int(rng.integers(40, 512))
        b.add_sampled(ids(n), [-0.5] * n)
        out.append(b.to_datum(float(rng.normal())))
    return out


def weights(datums: list[Any], chunk: int) -> dict[str, Any]:
    """Per-datum weight under each candidate divisor when the batch is sent in calls of ``chunk`` datums."""
    import pytrio
    from pytrio.client.training_batch import plan_training_batch
    from pytrio.model.limits import TrainingLimits

    from tempo_rl.backends.remote import to_service_datum

    limits = TrainingLimits(max_batch_size=None, max_tokens_per_request=None, max_seq_len=None)
    per: dict[str, list[float]] = {"active_tokens": [], "advantage_tokens": [], "samples": []}
    calls = 0
    for i in range(0, len(datums), chunk):
        part = [to_service_datum(d, pytrio.types) for d in datums[i : i + chunk]]
        totals = plan_training_batch(
            part, loss_fn="importance_sampling", auto_shift=False, limits=limits, tokenizer_vocab_size=1000
        ).totals
        calls += 1
        for _ in part:
            per["active_tokens"].append(1.0 / totals.total_active_tokens)
            per["advantage_tokens"].append(1.0 / max(totals.total_advantage_tokens, 1))
            per["samples"].append(1.0 / totals.total_samples)
    out: dict[str, Any] = {"calls": calls}
    for name, w in per.items():
        arr = np.asarray(w)
        out[name] = {"mean_weight": float(arr.mean()), "max_over_min": float(arr.max() / arr.min())}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    datums = alfworld_like_batch(np.random.default_rng(args.seed))
    active = sum(len(d.model_input) for d in datums)
    sampled = int(sum(np.count_nonzero(d.loss_fn_inputs["advantages"]) for d in datums))
    record = {
        "benchmark": "pytrio_chunking",
        "seed": args.seed,
        "datums": len(datums),
        "active_tokens": active,
        "advantage_tokens": sampled,
        "chunk_datums": {str(c): weights(datums, c) for c in (32, 16, 8, 1)},
    }
    print(json.dumps(record, sort_keys=True))


if __name__ == "__main__":
    main()
