"""Chaos run vs clean run: the same toy training with and without 5% injected faults of every kind.

Both runs train the local backend's tiny model on KeyDoor (scripted answers, see
:mod:`tempo_rl.testing.policies`, so every update has a training signal) from the same seed, side by side in one
process. The faulty run injects every fault of :mod:`tempo_rl.testing.faults` at ``--rate``; the script prints
exactly one JSON line: faults injected by kind, what the run did about them (branches dropped, states
quarantined, retries, lost acknowledgements settled), whether every update was applied exactly once, and the
time ratios faulty / clean (the update loop alone, and the whole run; a short untimed run warms up first).

Usage: ``python benchmarks/chaos.py [--quick] [--updates 20] [--rate 0.05] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIG: dict[str, Any] = {
    "env": {"name": "keydoor", "kwargs": {"horizon": 12, "keys": 1, "colours": 2}},
    "backend": {
        "kind": "local",
        "hidden_size": 16,
        "num_layers": 1,
        "num_heads": 2,
        "vocab_size": 1024,
        "max_positions": 2048,
    },
    "tempo": {
        "max_rounds": 12,
        "macro_rounds": 4,
        "branches": 2,
        "critic_samples": 2,
        "endpoint_samples": 1,
        "states_per_batch": 2,
        "warmup_games_per_batch": 1,
        "prefix_correction": "off",
    },
    "sampling": {
        "max_tokens": 48,
        "critic_max_tokens": 16,
        "critic_max_prompt_tokens": 1500,
        "max_trajectory_tokens": 1600,
        "show_remaining_steps": False,
        "critic_answer": "sampled",
    },
    "optim": {"learning_rate": 1e-3},
    "kl": {"coef": 0.0},
    "workers": {"step_timeout_s": 0.3},
    "run": {"loggers": []},
}


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _run(run_dir: Path, updates: int, rate: float, seed: int) -> dict[str, Any]:
    from tempo_rl.backends.config import RetryConfig
    from tempo_rl.testing.faults import FaultPlan, FaultRates, faulty_build_trainer
    from tempo_rl.testing.policies import innermost_client, use_scripted_policy
    from tempo_rl.training.config import validate_config
    from tempo_rl.training.run import train_run
    from tempo_rl.training.store import StateStore

    data = json.loads(json.dumps(CONFIG))
    warmup = max(1, updates // 10)
    data["tempo"].update({"warmup_updates": warmup, "td_updates": updates - warmup})
    data["run"]["seed"] = seed
    config = validate_config(data)
    plan = FaultPlan(FaultRates.uniform(rate), seed=seed, hang_s=0.6)
    retry = RetryConfig(backoff_initial_s=0.001, backoff_max_s=0.01, max_attempts=6)
    t0 = time.perf_counter()
    with faulty_build_trainer(plan, retry=retry, before=use_scripted_policy) as built:
        summary = train_run(run_dir, config, console=False)
    wall = time.perf_counter() - t0
    trainer = built[0]
    records = _records(run_dir)
    store = StateStore(run_dir / "store.sqlite")
    try:
        quarantined = len(store.quarantined())
    finally:
        store.close()
    stats = trainer.c.training_client.stats
    optim_steps = sum(r.get("train/optim_steps") or 0.0 for r in records)
    return {
        "updates_done": summary["updates_done"],
        "wall_s": round(wall, 2),
        "update_s": round(sum(r.get("time/update_seconds") or 0.0 for r in records), 2),
        "injected": dict(sorted(plan.injected.items())),
        "branches_dropped_env": int(sum(r.get("rollout/env_errors") or 0.0 for r in records)),
        "worker_timeouts": trainer.c.pool.stats.timeouts,
        "workers_replaced": trainer.c.pool.stats.replaced,
        "states_quarantined": quarantined,
        "divergences_undetected": sum(1 for _, _, ok in plan.divergence_log if not ok),
        "backend_retries": sum(stats.retries.values()),
        "optim_acks_settled": stats.optim_acknowledged,
        "optim_steps_logged": int(optim_steps),
        "optimizer_steps_applied": int(innermost_client(trainer).step),
        "exactly_once": int(innermost_client(trainer).step)
        == trainer.state.policy_version
        == int(optim_steps),
        "invalid_tool_calls": round(
            sum(r["rollout/turns"] * (1.0 - r["rollout/valid_tool_call_rate"]) for r in records)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="6 updates (smoke mode)")
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--rate", type=float, default=0.05, help="probability of each fault kind per call")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    updates = 6 if args.quick else args.updates
    with tempfile.TemporaryDirectory(prefix="tempo-chaos-") as tmp:
        _run(Path(tmp) / "warm", 2, 0.0, args.seed)  # one-off imports and caches, not timed
        clean = _run(Path(tmp) / "clean", updates, 0.0, args.seed)
        faulty = _run(Path(tmp) / "faulty", updates, args.rate, args.seed)
    print(
        json.dumps(
            {
                "benchmark": "chaos",
                "updates": updates,
                "fault_rate": args.rate,
                "completed": faulty["updates_done"] == updates,
                "faulty": faulty,
                "clean": clean,
                "update_time_ratio_faulty_over_clean": round(faulty["update_s"] / clean["update_s"], 3),
                "wall_ratio_faulty_over_clean": round(faulty["wall_s"] / clean["wall_s"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
