"""Benchmark: TEMPO signals for many start states with the batched API vs a per-group pure-Python loop.

Computes, for G groups of N branches and K critic samples (default 100,000 x 8 x 8):
R = branch_returns, G = td_targets, A = group_advantages, critic rewards -|V_k - G| / R_max (NaN -> -1) and
their centred advantages; once with ``tempo_rl.signals`` on [G, N] / [G, K] numpy arrays and once with a
straightforward loop over groups on Python lists, side by side in one run. Both results are checked to agree.

Prints exactly one JSON line; ``--quick`` runs 5,000 groups. Usage::

    python benchmarks/signals.py [--quick] [--groups 100000] [--repeats 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tempo_rl.signals import branch_returns, critic_rewards, group_advantages, td_targets

N_BRANCHES = 8
K_SAMPLES = 8
R_MAX = 1.0
FAILURE_REWARD = -1.0


def make_inputs(groups: int, seed: int) -> dict[str, np.ndarray]:
    """Random realistic inputs: binary segment rewards, values in [0, 1], ~30% terminated, ~5% unparsed."""
    rng = np.random.default_rng(seed)
    shape_n, shape_k = (groups, N_BRANCHES), (groups, K_SAMPLES)
    terminated = rng.random(shape_n) < 0.3
    segment_rewards = np.where(terminated, (rng.random(shape_n) < 0.5).astype(np.float64), 0.0)
    endpoint_values = np.where(terminated, np.nan, rng.random(shape_n))
    estimates = np.where(rng.random(shape_k) < 0.05, np.nan, rng.random(shape_k))
    return {
        "segment_rewards": segment_rewards,
        "endpoint_values": endpoint_values,
        "terminated": terminated,
        "estimates": estimates,
    }


def batched(inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """All five signals for every group with the batched tempo_rl.signals API."""
    returns = branch_returns(inputs["segment_rewards"], inputs["endpoint_values"], inputs["terminated"])
    targets = td_targets(returns)
    advantages = group_advantages(returns)
    rewards = critic_rewards(inputs["estimates"], targets, r_max=R_MAX, failure_reward=FAILURE_REWARD)
    critic_advantages = group_advantages(rewards)
    return returns, targets, advantages, rewards, critic_advantages


def per_group_loop(inputs: dict[str, list[Any]]) -> tuple[list[Any], ...]:
    """The same maths, one group at a time, in plain Python on lists."""
    all_returns: list[list[float]] = []
    all_targets: list[float] = []
    all_advantages: list[list[float]] = []
    all_rewards: list[list[float]] = []
    all_critic_advantages: list[list[float]] = []
    for seg, values, done, estimates in zip(
        inputs["segment_rewards"], inputs["endpoint_values"], inputs["terminated"], inputs["estimates"]
    ):
        returns = [r if d else r + v for r, v, d in zip(seg, values, done)]
        target = sum(returns) / len(returns)
        advantages = [x - target for x in returns]
        rewards = [FAILURE_REWARD if math.isnan(e) else -abs(e - target) / R_MAX for e in estimates]
        mean_reward = sum(rewards) / len(rewards)
        critic_advantages = [x - mean_reward for x in rewards]
        all_returns.append(returns)
        all_targets.append(target)
        all_advantages.append(advantages)
        all_rewards.append(rewards)
        all_critic_advantages.append(critic_advantages)
    return all_returns, all_targets, all_advantages, all_rewards, all_critic_advantages


def best_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Minimum wall time (seconds) over ``repeats`` calls, and the last result."""
    best, result = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: 5,000 groups, 1 repeat")
    parser.add_argument("--groups", type=int, default=None, help="number of start states (default 100,000)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timing repeats of the loop, best kept; the batched API gets 5x (default 3)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    groups = args.groups if args.groups is not None else (5_000 if args.quick else 100_000)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if groups <= 0 or repeats <= 0:
        parser.error("--groups and --repeats must be positive")

    inputs = make_inputs(groups, args.seed)
    as_lists = {name: arr.tolist() for name, arr in inputs.items()}

    # The batched run is ~50x shorter, so it gets 5x the repeats: its minimum is otherwise dominated by noise.
    batched_s, fast = best_time(lambda: batched(inputs), 5 * repeats)
    loop_s, slow = best_time(lambda: per_group_loop(as_lists), repeats)

    max_abs_diff = max(float(np.max(np.abs(np.asarray(f) - np.asarray(s)))) for f, s in zip(fast, slow))
    if not max_abs_diff <= 1e-12:
        raise SystemExit(f"batched and per-group results disagree (max |diff| = {max_abs_diff})")
    speedup = loop_s / batched_s
    record = {
        "benchmark": "signals",
        "quick": args.quick,
        "groups": groups,
        "n_branches": N_BRANCHES,
        "k_samples": K_SAMPLES,
        "signals": ["R", "G", "A", "critic_rewards", "critic_advantages"],
        "repeats": {"batched": 5 * repeats, "per_group_loop": repeats},
        "batched_s": round(batched_s, 6),
        "per_group_loop_s": round(loop_s, 6),
        "speedup": round(speedup, 2),
        "target_speedup": 30.0,
        "meets_target": speedup >= 30.0,
        "max_abs_diff": max_abs_diff,
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main()
