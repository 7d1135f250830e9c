"""The built-in race (``tempo-rl race``) on several seeds: TEMPO's and GRPO's held-out success at the final
mark per seed, and the spread of TEMPO - GRPO (min / median / max), one JSON line.

Seed ``s`` is the race with ``run.seed = s``, ``backend.seed = s`` (the model's initial weights) and
``env.train_seed_start = 10000 (s + 1)`` (its training games and, offset, its demonstrations), as in
``benchmarks/mechanism.py``; the held-out games are the same for every seed. Each race runs ``tempo-rl race``
in a process of its own (its two algorithms side by side, one per core), one seed after the other, so that
each race's wall time is what a user sees.

Per seed it also reads where TEMPO's TD signal went (:func:`td_signal`, from the TEMPO run's ``metrics.jsonl``):
the spread of the TD targets G over the start states of an update (``actor/value_target_std``: 0 means every
start got the same target and the update's group advantages carry no difference between states), the mean
target, the macro-step index of the stored states TD restarted from, and the share of TD branches whose episode
ended inside their segment (the only place an outcome's reward enters a TD target).

Usage: ``python benchmarks/race_seeds.py [--seeds 0 1 2 3 4] [--out benchmarks/results/race]
[--work runs/race-seeds]``; ``--from-results FILE`` recomputes the line and the table from a results.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def race_command(seed: int, run_dir: Path) -> list[str]:
    """The ``tempo-rl race`` command line of one seed."""
    sets = [f"run.seed={seed}", f"backend.seed={seed}", f"env.train_seed_start={10_000 * (seed + 1)}"]
    return [
        sys.executable,
        "-m",
        "tempo_rl.cli",
        "race",
        "--run-dir",
        str(run_dir),
        "--quiet",
        *(arg for s in sets for arg in ("--set", s)),
    ]


def seed_record(summary: Mapping[str, Any], wall_s: float) -> dict[str, Any]:
    """What one seed's race contributes: each algorithm's final success and tokens, the difference, the wall
    time (seconds) and the verdict."""
    race = summary["race"]
    tempo, grpo = race["tempo"], race["grpo"]
    return {
        "tempo_final": tempo["success"][-1],
        "grpo_final": grpo["success"][-1],
        "tempo_minus_grpo": tempo["success"][-1] - grpo["success"][-1],
        "tempo_tokens": tempo["tokens"][-1],
        "grpo_tokens": grpo["tokens"][-1],
        "env_steps": max(tempo["env_steps"][-1], grpo["env_steps"][-1]),
        "wall_s": wall_s,
        "verdict": race["verdict"],
    }


def td_signal(metrics_jsonl: Path) -> dict[str, float | int | None]:
    """Where one TEMPO run's TD signal went, from its ``metrics.jsonl`` (the updates with ``train/phase`` = 1):

    * ``td_updates``;
    * ``target_std_first`` / ``target_std_last``: the mean of ``actor/value_target_std`` (the TD targets' spread
      across the update's start states) over the first and the last quarter of the TD updates (at least one);
    * ``target_mean_last``: the mean of ``actor/value_target_mean`` over the last quarter;
    * ``stored_macro_index``: the mean macro-step index of the restored start states,
      ``sum(macro_index_mean x starts) / sum(restored starts)`` (fresh starts are index 0);
    * ``episode_end_share``: the mean over TD updates of the share of branches that ended their episode inside
      the segment (``actor/terminated_rate + actor/max_rounds_rate``).

    None where the run has no TD update."""
    rows = [json.loads(line) for line in metrics_jsonl.read_text().splitlines() if line.strip()]
    td = [r for r in rows if r.get("train/phase") == 1.0]
    if not td:
        return dict.fromkeys(
            (
                "td_updates",
                "target_std_first",
                "target_std_last",
                "target_mean_last",
                "stored_macro_index",
                "episode_end_share",
            ),
            None,
        ) | {"td_updates": 0}
    q = max(1, len(td) // 4)

    def mean(xs: Sequence[Mapping[str, Any]], key: str) -> float:
        return statistics.fmean(float(r[key]) for r in xs)

    starts = [r["td/reused_states"] + r["td/fresh_states"] for r in td]
    restored = sum(r["td/reused_states"] for r in td)
    index_sum = sum(r["td/macro_index_mean"] * n for r, n in zip(td, starts))
    ends = [r["actor/terminated_rate"] + r["actor/max_rounds_rate"] for r in td]
    return {
        "td_updates": len(td),
        "target_std_first": mean(td[:q], "actor/value_target_std"),
        "target_std_last": mean(td[-q:], "actor/value_target_std"),
        "target_mean_last": mean(td[-q:], "actor/value_target_mean"),
        "stored_macro_index": index_sum / restored if restored else None,
        "episode_end_share": statistics.fmean(ends),
    }


def spread(xs: Sequence[float]) -> dict[str, float]:
    """``{"min", "median", "max"}`` of ``xs``."""
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def headline(per_seed: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON line: per-seed finals, the spread of TEMPO - GRPO and of the wall time, seeds TEMPO leads."""
    seeds = sorted(per_seed, key=int)
    diff = [per_seed[s]["tempo_minus_grpo"] for s in seeds]
    return {
        "benchmark": "race_seeds",
        "seeds": [int(s) for s in seeds],
        "tempo_final": [per_seed[s]["tempo_final"] for s in seeds],
        "grpo_final": [per_seed[s]["grpo_final"] for s in seeds],
        "tempo_minus_grpo": spread(diff),
        "tempo_ahead": sum(1 for d in diff if d > 0),
        "tempo_final_spread": spread([per_seed[s]["tempo_final"] for s in seeds]),
        "grpo_final_spread": spread([per_seed[s]["grpo_final"] for s in seeds]),
        "wall_s": spread([per_seed[s]["wall_s"] for s in seeds]),
    }


def results_table(line: Mapping[str, Any]) -> str:
    """The Markdown table of the race on its seeds (min / median / max), as README and docs print it."""

    def row(name: str, s: Mapping[str, float], fmt: str = "{:.2f}") -> str:
        return f"| {name} | {fmt.format(s['min'])} | {fmt.format(s['median'])} | {fmt.format(s['max'])} |"

    n = len(line["seeds"])
    return "\n".join(
        [
            "| race, final success | min | median | max |",
            "|---|---|---|---|",
            row("TEMPO (generative critic)", line["tempo_final_spread"]),
            row("GRPO", line["grpo_final_spread"]),
            row(
                f"TEMPO - GRPO (ahead on {line['tempo_ahead']} of {n} seeds)",
                line["tempo_minus_grpo"],
                "{:+.2f}",
            ),
            row("wall time (minutes)", {k: v / 60 for k, v in line["wall_s"].items()}, "{:.1f}"),
        ]
    )


def td_signal_table(per_seed: Mapping[str, Mapping[str, Any]]) -> str:
    """The Markdown table of :func:`td_signal` per seed, beside TEMPO - GRPO at the final mark."""
    rows = [
        "| seed | TEMPO - GRPO, final | TD target spread, first / last quarter | mean TD target, last quarter "
        "| restored start's macro-step index | TD branches that end their episode |",
        "|---|---|---|---|---|---|",
    ]
    for s in sorted(per_seed, key=int):
        rec, sig = per_seed[s], per_seed[s].get("td_signal") or {}
        if not sig.get("td_updates"):
            rows.append(f"| {s} | {rec['tempo_minus_grpo']:+.2f} | no TD update | | | |")
            continue
        rows.append(
            f"| {s} | {rec['tempo_minus_grpo']:+.2f} | {sig['target_std_first']:.2f} / {sig['target_std_last']:.2f} "
            f"| {sig['target_mean_last']:.2f} | {sig['stored_macro_index']:.1f} | {sig['episode_end_share']:.0%} |"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    ap.add_argument("--out", default="benchmarks/results/race", help="results folder (results.json)")
    ap.add_argument(
        "--work", default="runs/race-seeds", help="the races' run directories (git-ignored runs/)"
    )
    ap.add_argument(
        "--from-results", default=None, help="recompute the line and the table from a results.json"
    )
    args = ap.parse_args(argv)
    if args.from_results:
        results = json.loads(Path(args.from_results).read_text())
    else:
        per_seed: dict[str, Any] = {}
        for seed in args.seeds:
            run_dir = Path(args.work) / f"seed{seed}"
            t0 = time.perf_counter()
            subprocess.run(race_command(seed, run_dir), check=True)
            summary = json.loads((run_dir / "summary.json").read_text())
            per_seed[str(seed)] = seed_record(summary, time.perf_counter() - t0)
            per_seed[str(seed)]["td_signal"] = td_signal(run_dir / "tempo" / "metrics.jsonl")
        results = {
            "command": " ".join(
                ["python", "benchmarks/race_seeds.py", *(argv if argv is not None else sys.argv[1:])]
            ),
            "per_seed": per_seed,
        }
    results["headline"] = headline(results["per_seed"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(results_table(results["headline"]))
    if all("td_signal" in r for r in results["per_seed"].values()):
        print(td_signal_table(results["per_seed"]))
    print(json.dumps(results["headline"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
