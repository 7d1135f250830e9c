"""The TEMPO-vs-GRPO mechanism benchmark: same envs, same seeds, same budget of environment steps.

For each env (the long-horizon delayed-reward ``keydoor`` corridor and the ``knights`` puzzle with final
feedback) and each seed, one tiny local model is behaviour-cloned on noisy expert demos (the warm start,
shared by every arm of that seed: same initial weights, same tokenizer), then three arms train from it on the
local backend until each has used the same number of training env steps:

* ``grpo``      -- trajectory-level GRPO (full episodes, group-centred returns, no critic);
* ``tempo``     -- TEMPO (critic warm-up on Monte Carlo returns, then macro-step TD), prefix correction off;
* ``tempo_pc``  -- TEMPO with the clipped prefix importance correction.

Measured per arm (all against training env steps, i.e. ``rollout/turns`` summed over updates):

* success: greedy (``sampling.eval_temperature``) full episodes on fixed evaluation seeds, at regular points;
* the critic's ``abs_error_mean`` and ``value_corr`` (per update; TEMPO only, GRPO has no critic);
* the actor's degenerate-group rate (groups whose advantages are all 0: no gradient);
* the prefix weights (``tempo_pc``);
* the wall-time split (restore / sampling / env / training / prefix / store / eval seconds).

Writes ``results.json`` and ``mechanism.png`` into ``--out`` and prints ONE JSON line of headline figures
(ratios measured side by side in this run). ``--quick`` is a CI smoke run (< 60 s): one seed, keydoor only, a
tiny budget.

Usage::

    python benchmarks/mechanism.py --out benchmarks/results/mechanism          # the full run
    python benchmarks/mechanism.py --quick --out /tmp/mechanism-quick           # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tempo_rl.training.config import TrainConfig, validate_config
from tempo_rl.training.run import build_trainer, env_corpus
from tempo_rl.training.trainer import MacroStepTrainer

ARMS: dict[str, dict[str, Any]] = {
    "grpo": {"algorithm": "grpo"},
    "tempo": {"algorithm": "tempo", "prefix_correction": "off"},
    "tempo_pc": {"algorithm": "tempo", "prefix_correction": "clipped"},
}

TIME_PARTS = ("restore", "sampling", "env", "training", "prefix", "store")


@dataclass(frozen=True)
class EnvSetting:
    """One benchmark environment: its config table, T (episode limit) and H (macro-step rounds)."""

    name: str
    kwargs: Mapping[str, Any]
    max_rounds: int
    macro_rounds: int


@dataclass(frozen=True)
class Scale:
    """How big the run is (the same for every arm)."""

    seeds: tuple[int, ...]
    envs: tuple[str, ...]
    budget_steps: int
    eval_points: int
    eval_episodes: int
    warmstart_episodes: int
    warmstart_epochs: int
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_threads: int
    states_per_batch: int
    branches: int
    critic_samples: int
    endpoint_samples: int
    warmup_updates: int
    warmup_games: int
    grpo_games: int
    learning_rate: float


ENVS: dict[str, EnvSetting] = {
    # one key of 2 colours in a 12-step corridor (the walkthrough takes 9): the key choice is final and its
    # consequence (the lock) shows several steps later; reward 1 only at the exit
    "keydoor": EnvSetting("keydoor", {"horizon": 12, "keys": 1, "colours": 2}, 12, 4),
    # place 2 pieces on 4x4 with 1 fixed within 8 steps; conflicting placements are refused (and use a step)
    "knights": EnvSetting(
        "knights", {"size": 4, "preplaced": 1, "place": 2, "max_steps": 8, "feedback": "immediate"}, 8, 4
    ),
}

#: The quick smoke run uses the same envs (only the scale differs).
QUICK_ENVS: dict[str, EnvSetting] = dict(ENVS)

FULL = Scale(
    seeds=(0, 1, 2),
    envs=("keydoor", "knights"),
    budget_steps=768,
    eval_points=3,
    eval_episodes=12,
    warmstart_episodes=200,
    warmstart_epochs=3,
    hidden_size=64,
    num_layers=2,
    vocab_size=512,
    num_threads=1,
    states_per_batch=4,
    branches=4,
    critic_samples=4,
    endpoint_samples=1,
    warmup_updates=2,
    warmup_games=2,
    grpo_games=4,
    learning_rate=5e-4,
)

QUICK = Scale(
    seeds=(0,),
    envs=("keydoor",),
    budget_steps=48,
    eval_points=1,
    eval_episodes=2,
    warmstart_episodes=6,
    warmstart_epochs=1,
    hidden_size=32,
    num_layers=1,
    vocab_size=400,
    num_threads=1,
    states_per_batch=2,
    branches=2,
    critic_samples=2,
    endpoint_samples=1,
    warmup_updates=1,
    warmup_games=1,
    grpo_games=2,
    learning_rate=5e-4,
)


def make_config(
    env: EnvSetting, scale: Scale, seed: int, arm: str, run_dir: Path, tokenizer_dir: Path
) -> TrainConfig:
    """The run config of one (env, seed, arm); all arms share env, model, sampling and optimiser settings."""
    spec = ARMS[arm]
    h = env.macro_rounds
    return validate_config(
        {
            "algorithm": spec["algorithm"],
            "env": {"name": env.name, "kwargs": dict(env.kwargs), "train_seed_start": 10_000 * (seed + 1)},
            "backend": {
                "kind": "local",
                "tokenizer_path": str(tokenizer_dir),
                "hidden_size": scale.hidden_size,
                "num_layers": scale.num_layers,
                "num_heads": 4 if scale.hidden_size >= 64 else 2,
                "max_positions": 4096,
                "num_threads": scale.num_threads,
                "device": "cpu",
                "seed": seed,
                "state_dir": str(run_dir / "backend_states"),
            },
            "tempo": {
                "macro_rounds": h,
                "max_rounds": env.max_rounds,
                "branches": scale.branches,
                "critic_samples": scale.critic_samples,
                "endpoint_samples": scale.endpoint_samples,
                "states_per_batch": scale.states_per_batch,
                "warmup_updates": scale.warmup_updates,
                "warmup_games_per_batch": scale.warmup_games,
                "td_updates": 100_000,
                "prefix_correction": spec.get("prefix_correction", "off"),
                # the committed results were measured when branches at the episode limit T were bootstrapped
                # with V_hat; pinned so `--from-results` and a rerun stay comparable (the library's default is
                # now 0 at T; see docs/results.md)
                "bootstrap_episode_limit": True,
            },
            "grpo": {"updates": 100_000, "games_per_batch": scale.grpo_games, "group_size": scale.branches},
            "sampling": {
                "max_tokens": 24,
                "critic_max_tokens": 12,
                "max_trajectory_tokens": 4000,
                "critic_max_prompt_tokens": 3000,
                "show_remaining_steps": True,
            },
            "optim": {"learning_rate": scale.learning_rate, "grad_clip_norm": 1.0},
            "warmstart": {
                "enabled": True,
                "episodes": scale.warmstart_episodes,
                "epochs": scale.warmstart_epochs,
                "noise": 0.3,
                "learning_rate": 1e-2,
                "batch_size": 8,
            },
            "run": {
                "run_dir": str(run_dir),
                "seed": seed,
                "console": False,
                "save_trajectories": False,
                "eval_episodes": scale.eval_episodes,
            },
        }
    )


@dataclass
class ArmResult:
    """What one arm of one (env, seed) measured."""

    curve: list[tuple[int, float]] = field(default_factory=list)  # (training env steps, eval success)
    updates: list[dict[str, float]] = field(default_factory=list)  # per update: steps + chosen metrics
    time_s: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    steps: int = 0


_KEEP = (
    "critic/abs_error_mean",
    "critic/value_corr",
    "actor/degenerate_group_rate",
    "train/phase",
    "train/optim_steps",
    "train/actor_datums",
    "prefix/weight_min",
    "prefix/weight_mean",
    "prefix/weight_max",
    "prefix/weight_q10",
    "prefix/weight_q50",
    "prefix/weight_q90",
    "prefix/clipped_fraction",
    "prefix/stale_states",
    "warmup/success_rate",
    "grpo/success_rate",
    "actor/terminal_won_rate",
    "critic/parse_failure_rate",
    "critic/endpoint_parse_failure_rate",
    "rollout/valid_tool_call_rate",
)


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(float(x)) else None


def build_env_tokenizer(env: EnvSetting, scale: Scale, work: Path) -> Path:
    """The offline tokenizer of ``env`` (trained on its corpus), shared by every seed and arm."""
    from tempo_rl.backends.local.tokenizer import build_tokenizer

    tok_dir = work / f"{env.name}-tokenizer"
    if not tok_dir.is_dir():
        probe = make_config(env, scale, 0, "tempo", work / "probe", tok_dir)
        build_tokenizer(env_corpus(probe), vocab_size=scale.vocab_size).save_pretrained(str(tok_dir))
    return tok_dir


def warm_start_once(
    env: EnvSetting, scale: Scale, seed: int, work: Path, tok_dir: Path
) -> tuple[Path, float, dict[str, float]]:
    """Behaviour-clone the model once per (env, seed) and evaluate it (the step-0 point of every arm's curve).

    Returns (backend state path, seconds, warm-start and evaluation metrics).
    """
    from tempo_rl.training.warmstart import warm_start

    t0 = time.perf_counter()
    ws_dir = work / f"{env.name}-seed{seed}-warmstart"
    cfg = make_config(env, scale, seed, "tempo", ws_dir, tok_dir)
    # demos from seeds disjoint from the RL and evaluation games
    env_cfg = cfg.env.model_copy(update={"train_seed_start": 500_000 + 10_000 * seed})
    cfg = cfg.model_copy(update={"env": env_cfg})
    trainer = build_trainer(cfg, ws_dir)
    try:
        metrics = warm_start(trainer)
        path = trainer.c.training_client.save_state("warmstart")
        ws_s = time.perf_counter() - t0
        metrics.update(asyncio.run(trainer.evaluate(scale.eval_episodes)))
    finally:
        _close(trainer)
    return Path(path), ws_s, metrics


def _close(trainer: MacroStepTrainer) -> None:
    pool = trainer.c.pool
    if hasattr(pool, "close"):
        pool.close()
    trainer.c.store.close()


def run_arm(
    env: EnvSetting,
    scale: Scale,
    seed: int,
    arm: str,
    work: Path,
    tok_dir: Path,
    ws_state: Path,
    start_success: float,
    *,
    verbose: bool = False,
) -> ArmResult:
    """Train one arm from the shared warm start until the env-step budget is spent, evaluating on the way."""
    run_dir = work / f"{env.name}-seed{seed}-{arm}"
    cfg = make_config(env, scale, seed, arm, run_dir, tok_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    out = ArmResult()
    last: dict[str, float] = {}

    def log(_step: int, metrics: Mapping[str, float]) -> None:
        last.clear()
        last.update(metrics)

    t_start = time.perf_counter()
    trainer = build_trainer(cfg, run_dir, log=log, backend_state=str(ws_state))
    trainer.state.policy_version = 1  # the warm start was one policy version
    marks = [round(scale.budget_steps * (k + 1) / scale.eval_points) for k in range(scale.eval_points)]
    eval_s = 0.0

    def evaluate() -> None:
        nonlocal eval_s
        t0 = time.perf_counter()
        res = asyncio.run(trainer.evaluate(scale.eval_episodes))
        eval_s += time.perf_counter() - t0
        out.curve.append((out.steps, float(res["eval/success_rate"])))

    out.curve.append((0, start_success))  # the shared warm start, evaluated once for every arm
    try:
        while out.steps < scale.budget_steps:
            trainer.train(max_updates=1)
            turns = int(last.get("rollout/turns", 0))
            if turns <= 0:
                raise RuntimeError(
                    f"{env.name} seed {seed} {arm}: an update played no env step; see {run_dir}"
                )
            out.steps += turns
            rec = {"steps": float(out.steps)}
            rec.update({k: v for k in _KEEP if (v := _finite(last.get(k))) is not None})
            out.updates.append(rec)
            for part in TIME_PARTS:
                out.time_s[part] = out.time_s.get(part, 0.0) + float(last.get(f"time/{part}_s", 0.0) or 0.0)
            if verbose:
                print(
                    f"[mechanism]   {env.name} seed {seed} {arm} update {len(out.updates)}: "
                    f"steps {out.steps} "
                    + " ".join(f"{k}={v:.3g}" for k, v in rec.items() if k != "steps" and "prefix" not in k),
                    file=sys.stderr,
                    flush=True,
                )
            if marks and out.steps >= marks[0]:
                while marks and out.steps >= marks[0]:
                    marks.pop(0)
                evaluate()
    finally:
        _close(trainer)
    out.time_s["eval"] = eval_s
    out.wall_s = time.perf_counter() - t_start
    out.time_s["other"] = max(0.0, out.wall_s - sum(out.time_s.values()))  # setup, datums, bookkeeping
    return out


def run_seed(
    env: EnvSetting, scale: Scale, seed: int, work: Path, tok_dir: Path, verbose: bool = False
) -> tuple[dict[str, Any], float, dict[str, float]]:
    """Warm start once, then every arm from it: ``({arm: run record}, warm-start seconds, ws metrics)``."""
    ws_state, ws_s, ws_metrics = warm_start_once(env, scale, seed, work, tok_dir)
    start = float(ws_metrics["eval/success_rate"])
    per_arm: dict[str, Any] = {}
    for arm in ARMS:
        r = run_arm(env, scale, seed, arm, work, tok_dir, ws_state, start, verbose=verbose)
        per_arm[arm] = {
            "curve": r.curve,
            "updates": r.updates,
            "time_s": r.time_s,
            "wall_s": r.wall_s,
            "steps": r.steps,
        }
        print(
            f"[mechanism] {env.name} seed {seed} {arm}: steps {r.steps}, updates {len(r.updates)}, "
            f"success {r.curve[0][1]:.2f} -> {r.curve[-1][1]:.2f}, {r.wall_s:.0f}s",
            file=sys.stderr,
            flush=True,
        )
    return per_arm, ws_s, ws_metrics


# ------------------------------------------------------------------------------------------------ summary


def _interp_curve(curve: Sequence[tuple[int, float]], grid: np.ndarray) -> np.ndarray:
    xs = np.array([c[0] for c in curve], dtype=float)
    ys = np.array([c[1] for c in curve], dtype=float)
    return np.interp(grid, xs, ys)


def _auc(curve: Sequence[tuple[int, float]], budget: int) -> float:
    grid = np.linspace(0, budget, 41)
    return float(np.mean(_interp_curve(curve, grid)))


def _mean(xs: Sequence[float]) -> float | None:
    vals = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.mean(vals)) if vals else None


def _phase_values(updates: Sequence[Mapping[str, float]], key: str, phase: float | None) -> list[float]:
    return [u[key] for u in updates if key in u and (phase is None or u.get("train/phase") == phase)]


def summarize(results: Mapping[str, Any], scale: Scale) -> dict[str, Any]:
    """Headline figures per env and arm (means over seeds)."""
    out: dict[str, Any] = {}
    for env_name, per_seed in results["runs"].items():
        env_sum: dict[str, Any] = {}
        for arm in ARMS:
            runs = [per_seed[s][arm] for s in per_seed]
            finals = [r["curve"][-1][1] for r in runs]
            starts = [r["curve"][0][1] for r in runs]
            aucs = [_auc(r["curve"], scale.budget_steps) for r in runs]
            degenerate = [
                _mean(_phase_values(r["updates"], "actor/degenerate_group_rate", None)) for r in runs
            ]
            crit_err = [_phase_values(r["updates"], "critic/abs_error_mean", None) for r in runs]
            corr = [_phase_values(r["updates"], "critic/value_corr", None) for r in runs]
            env_sum[arm] = {
                "success_start": _mean(starts),
                "success_final": _mean(finals),
                "success_final_per_seed": finals,
                "success_auc": _mean(aucs),
                "success_at_budget": _mean(
                    [float(_interp_curve(r["curve"], np.array([scale.budget_steps]))[0]) for r in runs]
                ),
                "degenerate_group_rate": _mean([d for d in degenerate if d is not None]),
                "critic_abs_error_first": _mean([c[0] for c in crit_err if c]),
                "critic_abs_error_last": _mean([float(np.mean(c[-3:])) for c in crit_err if c]),
                "critic_value_corr_mean": _mean([float(np.mean(c)) for c in corr if c]),
                "optim_steps": _mean(
                    [sum(u.get("train/optim_steps", 0.0) for u in r["updates"]) for r in runs]
                ),
                "updates": _mean([len(r["updates"]) for r in runs]),
                "steps": _mean([r["steps"] for r in runs]),
                "wall_s": _mean([r["wall_s"] for r in runs]),
                "time_split_s": {
                    k: _mean([r["time_s"].get(k, 0.0) for r in runs]) for k in (*TIME_PARTS, "eval", "other")
                },
            }
            if arm == "tempo_pc":
                env_sum[arm]["prefix_weight_mean"] = _mean(
                    [v for r in runs for v in _phase_values(r["updates"], "prefix/weight_mean", 1.0)]
                )
                env_sum[arm]["prefix_weight_min"] = min(
                    (v for r in runs for v in _phase_values(r["updates"], "prefix/weight_min", 1.0)),
                    default=None,
                )
                env_sum[arm]["prefix_clipped_fraction"] = _mean(
                    [v for r in runs for v in _phase_values(r["updates"], "prefix/clipped_fraction", 1.0)]
                )
        out[env_name] = env_sum
    return out


def headline(summary: Mapping[str, Any], scale: Scale, wall_s: float) -> dict[str, Any]:
    """The one JSON line: per env, final success and AUC per arm, and the side-by-side ratios."""
    line: dict[str, Any] = {
        "benchmark": "mechanism",
        "seeds": len(scale.seeds),
        "budget_env_steps": scale.budget_steps,
        "wall_s": round(wall_s, 1),
    }
    for env_name, env_sum in summary.items():
        for arm, s in env_sum.items():
            line[f"{env_name}/{arm}/success_final"] = _round(s["success_final"])
            line[f"{env_name}/{arm}/success_auc"] = _round(s["success_auc"])
            line[f"{env_name}/{arm}/success_at_budget"] = _round(s["success_at_budget"])
            line[f"{env_name}/{arm}/degenerate_group_rate"] = _round(s["degenerate_group_rate"])
            line[f"{env_name}/{arm}/wall_s"] = _round(s["wall_s"])
        g, t, p = env_sum["grpo"], env_sum["tempo"], env_sum["tempo_pc"]
        line[f"{env_name}/auc_tempo_minus_grpo"] = _round(_diff(t["success_auc"], g["success_auc"]))
        line[f"{env_name}/auc_tempo_pc_minus_tempo"] = _round(_diff(p["success_auc"], t["success_auc"]))
        line[f"{env_name}/wall_ratio_tempo_over_grpo"] = _round(_ratio(t["wall_s"], g["wall_s"]))
        line[f"{env_name}/critic_abs_error_first_to_last"] = [
            _round(t["critic_abs_error_first"]),
            _round(t["critic_abs_error_last"]),
        ]
    return line


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


# ------------------------------------------------------------------------------------------------ plot

_COLOURS = {"grpo": "tab:gray", "tempo": "tab:blue", "tempo_pc": "tab:orange"}


def plot(results: Mapping[str, Any], summary: Mapping[str, Any], scale: Scale, path: Path) -> None:
    """Learning curves, degenerate-group rate, critic error/correlation and the wall-time split per env."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(results["runs"])
    fig, axes = plt.subplots(len(envs), 5, figsize=(22, 4.2 * len(envs)), squeeze=False)
    grid = np.linspace(0, scale.budget_steps, 41)
    for row, env_name in enumerate(envs):
        per_seed = results["runs"][env_name]
        ax_s, ax_d, ax_e, ax_c, ax_t = axes[row]
        for arm in ARMS:
            runs = [per_seed[s][arm] for s in per_seed]
            ys = np.array([_interp_curve(r["curve"], grid) for r in runs])
            m = ys.mean(axis=0)
            ax_s.plot(grid, m, color=_COLOURS[arm], label=arm)
            if len(runs) > 1:
                ax_s.fill_between(grid, ys.min(axis=0), ys.max(axis=0), color=_COLOURS[arm], alpha=0.15)
            for key, ax in (
                ("actor/degenerate_group_rate", ax_d),
                ("critic/abs_error_mean", ax_e),
                ("critic/value_corr", ax_c),
            ):
                for k, r in enumerate(runs):
                    pts = [(u["steps"], u[key]) for u in r["updates"] if key in u]
                    if pts:
                        xs, vs = zip(*pts)
                        ax.plot(xs, vs, color=_COLOURS[arm], alpha=0.6, lw=1, label=arm if k == 0 else None)
        ax_s.set_title(f"{env_name}: greedy eval success (mean, min-max over seeds)")
        ax_d.set_title(f"{env_name}: actor degenerate-group rate")
        ax_e.set_title(f"{env_name}: critic |V - G| (TEMPO arms)")
        ax_c.set_title(f"{env_name}: critic value correlation")
        for ax in (ax_s, ax_d, ax_e, ax_c):
            ax.set_xlabel("training env steps")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
            else:
                ax.text(0.5, 0.5, "no data (GRPO has no critic)", ha="center", transform=ax.transAxes)
        parts = (*TIME_PARTS, "eval", "other")
        bottom = np.zeros(len(ARMS))
        for part in parts:
            vals = np.array([summary[env_name][arm]["time_split_s"][part] or 0.0 for arm in ARMS])
            ax_t.bar(list(ARMS), vals, bottom=bottom, label=part)
            bottom += vals
        ax_t.set_title(f"{env_name}: wall-time split per run (s)")
        ax_t.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ main


def rebuild(results_path: Path, out_dir: Path) -> int:
    """Summary, JSON line and plot again from a saved ``results.json`` (the measured runs are not changed)."""
    results = json.loads(results_path.read_text())
    scale = Scale(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in results["scale"].items()})
    summary = summarize(results, scale)
    results["summary"] = summary
    line = headline(summary, scale, float(results.get("wall_s", math.nan)))
    results["headline"] = line
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, summary, scale, out_dir / "mechanism.png")
    print(json.dumps(line))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="CI smoke run (< 60 s): one seed, keydoor, tiny budget"
    )
    ap.add_argument("--out", default="benchmarks/results/mechanism", help="results folder (JSON + PNG)")
    ap.add_argument("--seeds", type=int, nargs="*", default=None, help="override the seeds")
    ap.add_argument("--envs", nargs="*", default=None, choices=sorted(ENVS), help="override the envs")
    ap.add_argument("--budget-steps", type=int, default=None, help="override the env-step budget per arm")
    ap.add_argument("--verbose", action="store_true", help="print every update's metrics to stderr")
    ap.add_argument("--jobs", type=int, default=1, help="(env, seed) tasks run in parallel processes")
    ap.add_argument("--work", default=None, help="scratch folder for run dirs (default: a temp dir)")
    ap.add_argument(
        "--from-results",
        default=None,
        help="recompute the summary, the JSON line and the PNG from an existing results.json (no training)",
    )
    args = ap.parse_args(argv)
    if args.from_results:
        return rebuild(Path(args.from_results), Path(args.out))

    scale = QUICK if args.quick else FULL
    updates: dict[str, Any] = {}
    if args.seeds:
        updates["seeds"] = tuple(args.seeds)
    if args.envs:
        updates["envs"] = tuple(args.envs)
    if args.budget_steps:
        updates["budget_steps"] = args.budget_steps
    if updates:
        from dataclasses import replace

        scale = replace(scale, **updates)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="tempo-mechanism-"))
    work.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    table = QUICK_ENVS if args.quick else ENVS
    results: dict[str, Any] = {
        "scale": {k: (list(v) if isinstance(v, tuple) else v) for k, v in scale.__dict__.items()},
        "envs": {
            e: {"kwargs": dict(table[e].kwargs), "T": table[e].max_rounds, "H": table[e].macro_rounds}
            for e in scale.envs
        },
        "arms": ARMS,
        "runs": {},
        "warmstart_s": {},
        "warmstart": {},
        "command": " ".join(
            ["python", "benchmarks/mechanism.py", *(argv if argv is not None else sys.argv[1:])]
        ),
    }
    try:
        tasks = []
        for env_name in scale.envs:
            env = table[env_name]
            tok_dir = build_env_tokenizer(env, scale, work)
            results["runs"][env_name] = {}
            tasks += [(env, scale, seed, work, tok_dir, args.verbose) for seed in scale.seeds]
        if args.jobs > 1:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
                done = list(pool.map(run_seed, *zip(*tasks)))
        else:
            done = [run_seed(*task) for task in tasks]
        for (env, _, seed, *_), (per_arm, ws_s, ws_metrics) in zip(tasks, done):
            results["runs"][env.name][str(seed)] = per_arm
            results["warmstart_s"][f"{env.name}/{seed}"] = ws_s
            results["warmstart"][f"{env.name}/{seed}"] = ws_metrics
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    wall = time.perf_counter() - t0
    summary = summarize(results, scale)
    results["summary"] = summary
    results["wall_s"] = wall
    line = headline(summary, scale, wall)
    results["headline"] = line
    (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, summary, scale, out_dir / "mechanism.png")
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
