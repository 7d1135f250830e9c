"""Benchmark: how many warm-up env steps the generative critic needs at T = 48 before its values correlate.

Issue 22 asks for the mechanism benchmark's generative critic to reach a value correlation of 0.7 with its Monte
Carlo targets by the end of its warm-up, on every seed, within the arm's budget of 4,608 env steps
(``benchmarks/mechanism.py``). This runs that arm's warm-up alone for longer, to see what it would take.

Per seed it starts from the mechanism benchmark's own ``keydoor_rule`` warm start (:func:`mechanism.warm_start_task`,
cached in ``--work`` like the benchmark's) and runs ``--updates`` critic warm-up updates of the generative arm's
config (T = 48, H = 8, N = 4 branches), each on ``--games`` fresh games with ``--states`` critic states per
episode (the arm uses 2 games and 2 states). An update's ``critic/value_corr`` is the Pearson correlation, over
its states, between the critic's value V_hat (the expectation over its answers, read *before* the update trains
on them) and the state's Monte Carlo target (the return its branch got from there); it is undefined (null) when
every target of the update is equal.

Prints ONE JSON line: per seed, per update, the correlation, the critic's mean estimate (it tracks the targets'
mean, the policy's success from those states) and the cumulative env steps; and per seed the env steps after
which the correlation stays at or above ``--bar`` (0.7) for the rest of the run (null: never).

Measured 2026-12-04 (``--seeds 0 1 --jobs 2``, 30 updates of 8 games and 6 states: 23 minutes on 2 cores,
warm starts included): ``docs/results.md``, "What is open".

Usage::

    python benchmarks/critic_warmup.py --seeds 0 1 --jobs 2
    python benchmarks/critic_warmup.py --quick          # a smoke run (tiny model, 2 updates)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

_KEYS = ("critic/value_corr", "critic/mean_estimate_mean", "cost/env_steps")


def warmup_curve(seed: int, updates: int, games: int, states: int, work: Path, quick: bool) -> dict[str, Any]:
    """The generative arm's warm-up on ``keydoor_rule`` from the benchmark's warm start of ``seed``, run for
    ``updates`` updates: ``{"corr": [...], "mean_estimate": [...], "env_steps": [...]}``, one entry per update."""
    import mechanism

    from tempo_rl.training.run import build_trainer

    scale = mechanism.QUICK if quick else mechanism.FULL
    env = (mechanism.QUICK_ENVS if quick else mechanism.ENVS)["keydoor_rule"]
    tok_dir = mechanism.build_env_tokenizer(env, scale, work)
    warm = mechanism.warm_start_task(env, scale, seed, work, tok_dir)
    run_dir = work / f"{env.name}-seed{seed}-critic-warmup-{updates}x{games}x{states}"
    cfg = mechanism.make_config(env, scale, seed, "generative", run_dir, tok_dir)
    tempo = cfg.tempo.model_copy(
        update={
            "warmup_updates": updates,
            "warmup_games_per_batch": games,
            "warmup_states_per_episode": states,
        }
    )
    cfg = cfg.model_copy(update={"tempo": tempo})
    last: dict[str, float] = {}

    def log(_step: int, metrics: Any) -> None:
        last.clear()
        last.update(metrics)

    trainer = build_trainer(cfg, run_dir, log=log, backend_state=str(warm["state"]))
    trainer.state.policy_version = 1  # as the benchmark: the warm start was one policy version
    out: dict[str, list[float | None]] = {"corr": [], "mean_estimate": [], "env_steps": []}
    try:
        for _ in range(updates):
            trainer.train(max_updates=1)
            corr, mean, steps = (mechanism._round(last.get(k)) for k in _KEYS)
            out["corr"].append(corr)
            out["mean_estimate"].append(mean)
            out["env_steps"].append(steps)
    finally:
        mechanism._close(trainer)
    return out


def steps_to_bar(curve: dict[str, Any], bar: float) -> float | None:
    """The env steps of the update after which every later update's correlation is >= ``bar`` (an undefined
    correlation breaks the run), or None when the last update's is not."""
    reached = None
    for corr, steps in zip(curve["corr"], curve["env_steps"]):
        if corr is None or corr < bar:
            reached = None
        elif reached is None:
            reached = steps
    return reached


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--games", type=int, default=8, help="fresh games per warm-up update (the arm: 2)")
    ap.add_argument("--states", type=int, default=6, help="critic states per episode (the arm: 2)")
    ap.add_argument("--bar", type=float, default=0.7)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("runs/mechanism-work"), help="the benchmark's cache")
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 updates of 1 game: a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.updates, args.games, args.states = [0], 2, 1, 2
    args.work.mkdir(parents=True, exist_ok=True)
    jobs = [(s, args.updates, args.games, args.states, args.work, args.quick) for s in args.seeds]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            curves = list(pool.map(warmup_curve, *zip(*jobs)))
    else:
        curves = [warmup_curve(*job) for job in jobs]
    out: dict[str, Any] = {
        "benchmark": "critic_warmup",
        "env": "keydoor_rule",
        "updates": args.updates,
        "games_per_update": args.games,
        "states_per_episode": args.states,
        "bar": args.bar,
    }
    for seed, curve in zip(args.seeds, curves):
        out[f"seed{seed}"] = {**curve, "env_steps_to_bar": steps_to_bar(curve, args.bar)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
