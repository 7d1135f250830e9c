"""The race: TEMPO and GRPO trained from one warm start, on one env, at equal env steps.

:func:`race` runs, in ``run_dir``:

1. ``warmstart/``: the supervised warm start of TEMPO's config (its critic's answer-format examples are part of
   it), saved as a backend state and evaluated (success at 0 env steps). It runs alone, so on a local backend
   it takes the threads of both arms (:func:`warm_start_threads`);
2. ``tempo/`` and ``grpo/``: each algorithm's config (one job's, :func:`~tempo_rl.training.config.configs_for`:
   the settings both read are shared, ``[tempo]`` goes to TEMPO and ``[grpo]`` to GRPO), each loaded from that state
   and trained until it has used ``budget_env_steps`` env steps (``cost/env_steps``: every action sent to an env
   by training, the warm-up's episodes included; evaluation is not counted), evaluated on the same held-out
   games (``run.eval_episodes`` of ``env.eval_*``) at ``marks`` evenly spaced env-step marks; each writes its
   per-update metrics to its ``metrics.jsonl``. The two run in parallel processes (``jobs``), each with the
   backend's ``num_threads``.

The race's record, ``summary.json`` (and :func:`race` returns it): per algorithm the env steps, tokens
processed (``cost/tokens``: prefill + sampled + trained) and success at each mark and the held-out games each
mark evaluates, and a one-line verdict comparing the final marks with the standard error of their difference.
``race.png`` plots success against env steps and against tokens (with the ``plot`` extra). Success at a mark is
the evaluation made at the first update that reached it (one evaluation stands for every mark that update
passed, so each algorithm has one entry per mark).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tempo_rl.training.config import TrainConfig
from tempo_rl.training.options import TrainerOptions

__all__ = [
    "RACE_ALGORITHMS",
    "RACE_CONFIG",
    "RACE_OPTIONS",
    "race",
    "race_marks",
    "race_table",
    "verdict",
    "warm_start_threads",
]

#: The built-in race's config: the long-horizon KeyDoor corridor on the local backend (``tempo-rl race``).
RACE_CONFIG = Path(__file__).with_name("race_job.toml")

#: The algorithms a race trains, in the order it reports them.
RACE_ALGORITHMS = ("tempo", "grpo")
#: The built-in race's critic design beyond its config (the keydoor_rule setting of benchmarks/mechanism.py):
#: the critic's own weights step at 3e-3, it reads the last turn, the current observation and its note, its
#: turn starts with "<value>", and the warm start's step size falls to 0 over the last third of its steps.
RACE_OPTIONS = TrainerOptions(
    critic_history_turns=1,
    critic_answer_prefix="<value>",
    critic_learning_rate=3e-3,
    warmstart_cooldown=1 / 3,
)
#: Success within this of the other's counts as a tie (one evaluation game of 32 is 0.031).
TIE = 1e-9


def race_marks(budget_env_steps: int, marks: int) -> list[int]:
    """``marks`` evenly spaced env-step marks ending at the budget: ``round(budget * k / marks)``, k = 1..marks."""
    if budget_env_steps < 1 or marks < 1:
        raise ValueError(
            f"a race needs budget_env_steps >= 1 and marks >= 1; got {budget_env_steps}, {marks}"
        )
    return [round(budget_env_steps * k / marks) for k in range(1, marks + 1)]


def arm_config(config: TrainConfig, run_dir: Path) -> TrainConfig:
    """``config`` as one arm of the race: its run folder, updates bounded by the env-step budget (not by a count),
    no evaluation of its own (the race evaluates at its marks) and no console."""
    update: dict[str, Any] = {
        "run": config.run.model_copy(update={"run_dir": str(run_dir), "eval_every": 0, "loggers": []})
    }
    if config.algorithm == "tempo":
        update["tempo"] = config.tempo.model_copy(update={"td_updates": 1_000_000})
    else:
        update["grpo"] = config.grpo.model_copy(update={"updates": 1_000_000})
    return config.model_copy(update=update, deep=True)


def close_trainer(trainer: Any) -> None:
    """Close a trainer built for one run: its env worker pool, its state store and its event loop."""
    pool = trainer.c.pool
    if hasattr(pool, "close"):
        pool.close()
    trainer.c.store.close()
    trainer.close()


#: The warm start's demonstrations are played on the training games this far past ``env.train_seed_start``,
#: so that the games RL trains on were never demonstrated.
DEMO_SEED_OFFSET = 500_000


def warm_start_state(
    config: TrainConfig, ws_dir: Path, options: TrainerOptions | None = None
) -> tuple[str, float]:
    """The warm start of ``config`` in ``ws_dir``: ``(backend state path, held-out success)``; without
    a warm start (``warmstart.episodes = 0``) the initial weights' state. Its demos are games ``env.train_seed_start +``
    :data:`DEMO_SEED_OFFSET` onward."""
    from tempo_rl.training.run import build_trainer
    from tempo_rl.training.warmstart import warm_start

    env = config.env.model_copy(update={"train_seed_start": config.env.train_seed_start + DEMO_SEED_OFFSET})
    config = config.model_copy(update={"env": env})
    ws_dir.mkdir(parents=True, exist_ok=True)
    trainer = build_trainer(config, ws_dir, options=options)
    try:
        if config.warmstart.enabled:
            warm_start(trainer)
        state = str(trainer.c.training_client.save_state("warmstart"))
        result = trainer.run_async(trainer.evaluate(config.run.eval_episodes, updates_done=0))
    finally:
        close_trainer(trainer)
    return state, float(result["eval/success_rate"])


def warm_start_threads(config: TrainConfig) -> TrainConfig:
    """``config`` for the warm start, which runs before the arms and alone: a local backend with
    ``num_threads = t`` per arm gets ``t x len(RACE_ALGORITHMS)`` torch threads, every core the arms will share.

    The count does not depend on ``jobs``: float sums split over another number of threads may round differently,
    and the warm start's weights are the same for every race of one config. Other backends, and a local one
    with automatic threads (``num_threads = None``), are returned as they are."""
    backend = config.backend
    threads = getattr(backend, "num_threads", None)
    if backend.kind != "local" or threads is None:
        return config
    shared = backend.model_copy(update={"num_threads": threads * len(RACE_ALGORITHMS)})
    return config.model_copy(update={"backend": shared})


def shared_tokenizer(config: TrainConfig, ws_dir: Path) -> TrainConfig:
    """``config`` whose arms read the warm start's tokenizer (``ws_dir/tokenizer``): a local backend without a
    tokenizer of its own trains one on its env corpus in each run directory, and the warm start's weights mean
    something only under the token ids they were trained with."""
    backend = config.backend
    built = ws_dir / "tokenizer"
    if backend.kind != "local" or getattr(backend, "tokenizer_path", None) is not None or not built.is_dir():
        return config
    return config.model_copy(update={"backend": backend.model_copy(update={"tokenizer_path": str(built)})})


def run_arm(
    config_json: str,
    run_dir: str,
    warm_state: str,
    warm_success: float,
    budget: int,
    marks: Sequence[int],
    options: TrainerOptions | None = None,
) -> dict[str, Any]:
    """One arm of the race (in its own process): train from ``warm_state`` until ``budget`` env steps, evaluating
    at ``marks``. Returns ``{"env_steps", "tokens", "success", "eval_episodes", "updates", "seconds"}``, the
    first entries the warm start's (0 env steps, 0 tokens)."""
    from tempo_rl.training.config import validate_config
    from tempo_rl.training.run import build_trainer

    config = validate_config(json.loads(config_json))
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    last: dict[str, float] = {}
    out = path / "metrics.jsonl"

    def log(step: int, metrics: Mapping[str, float]) -> None:
        last.clear()
        last.update(metrics)
        with out.open("a", encoding="utf-8") as fh:
            row = {
                k: (v if isinstance(v, float | int) and math.isfinite(v) else None)
                for k, v in metrics.items()
            }
            fh.write(json.dumps({"step": step, **row}) + "\n")

    t0 = time.perf_counter()
    trainer = build_trainer(config, path, log=log, backend_state=warm_state, options=options)
    trainer.state.warmstart_done = True
    trainer.state.policy_version = (
        1  # the warm start was one policy version (a critic of its own loads it too)
    )
    record: dict[str, Any] = {
        "env_steps": [0],
        "tokens": [0],
        "success": [warm_success],
        "eval_episodes": config.run.eval_episodes,
        "updates": 0,
    }
    pending = list(marks)
    steps = 0
    try:
        while pending:
            trainer.train(max_updates=1)
            new_steps = int(last["cost/env_steps"])
            if new_steps <= steps:
                raise RuntimeError(f"the {config.algorithm} arm's update played no env step; see {path}")
            steps = new_steps
            record["updates"] += 1
            passed = sum(1 for m in pending if steps >= m)
            if passed:  # one evaluation of this policy stands for every mark its update passed
                del pending[:passed]
                res = trainer.run_async(
                    trainer.evaluate(config.run.eval_episodes, updates_done=len(record["success"]))
                )
                record["env_steps"].extend([steps] * passed)
                record["tokens"].extend([int(last["cost/tokens"])] * passed)
                record["success"].extend([float(res["eval/success_rate"])] * passed)
    finally:
        close_trainer(trainer)
    record["seconds"] = time.perf_counter() - t0
    return record


def difference_se(a: float, n_a: int, b: float, n_b: int) -> float:
    """The standard error of the difference of two success rates, each over its own independent games:
    ``sqrt(a (1 - a) / n_a + b (1 - b) / n_b)`` (binomial), in success units."""
    if n_a < 1 or n_b < 1:
        raise ValueError(f"a success rate needs at least one game; got {n_a} and {n_b}")
    return math.sqrt(a * (1.0 - a) / n_a + b * (1.0 - b) / n_b)


def verdict(result: Mapping[str, Any]) -> str:
    """One line: which algorithm leads at the final mark, by how much +- the standard error of the difference
    (:func:`difference_se` over each arm's ``eval_episodes`` held-out games), and at the same env steps; a lead
    of at most 2 standard errors says so."""
    tempo, grpo = result["tempo"], result["grpo"]
    a, b = tempo["success"][-1], grpo["success"][-1]
    n_a, n_b = int(tempo["eval_episodes"]), int(grpo["eval_episodes"])
    steps = max(tempo["env_steps"][-1], grpo["env_steps"][-1])
    if abs(a - b) <= TIE:
        return f"TEMPO and GRPO tie at {a:.2f} success ({_games(n_a, n_b)}) after about {steps} env steps"
    (lead, hi, n_hi), (trail, lo, n_lo) = sorted(
        [("TEMPO", a, n_a), ("GRPO", b, n_b)], key=lambda arm: arm[1], reverse=True
    )
    se = difference_se(a, n_a, b, n_b)
    noise = ", within 2 standard errors" if hi - lo <= 2 * se else ""
    return (
        f"{lead} leads {trail} by {hi - lo:.2f} +- {se:.2f} success ({hi:.2f} vs {lo:.2f} on "
        f"{_games(n_hi, n_lo)}{noise}) after about {steps} env steps"
    )


def _games(first: int, second: int) -> str:
    """How many held-out games the two success rates are over, in the order they are named."""
    return f"{first} held-out games each" if first == second else f"{first} and {second} held-out games"


def race_table(result: Mapping[str, Any]) -> str:
    """The side-by-side table: per mark, each algorithm's env steps, success and tokens processed (millions)."""
    lines = [
        f"{'mark':>4}  {'TEMPO steps':>11} {'success':>7} {'Mtokens':>7}   {'GRPO steps':>10} {'success':>7} {'Mtokens':>7}"
    ]
    tempo, grpo = result["tempo"], result["grpo"]
    for k in range(min(len(tempo["success"]), len(grpo["success"]))):
        lines.append(
            f"{k:>4}  {tempo['env_steps'][k]:>11} {tempo['success'][k]:>7.2f} {tempo['tokens'][k] / 1e6:>7.2f}   "
            f"{grpo['env_steps'][k]:>10} {grpo['success'][k]:>7.2f} {grpo['tokens'][k] / 1e6:>7.2f}"
        )
    return "\n".join(lines)


def plot_race(result: Mapping[str, Any], path: Path) -> bool:
    """``race.png``: success against env steps and against tokens processed; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, colour in (("tempo", "tab:blue"), ("grpo", "tab:gray")):
        arm = result[name]
        label = "TEMPO" if name == "tempo" else "GRPO"
        axes[0].plot(arm["env_steps"], arm["success"], "o-", color=colour, label=label)
        axes[1].plot([t / 1e6 for t in arm["tokens"]], arm["success"], "o-", color=colour, label=label)
    axes[0].set_xlabel("env steps")
    axes[1].set_xlabel("tokens processed (millions)")
    for ax in axes:
        ax.set_ylabel("held-out success")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(verdict(result))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def race(
    configs: Mapping[str, TrainConfig],
    run_dir: Path,
    *,
    budget_env_steps: int,
    marks: int = 6,
    jobs: int = 2,
    say: Callable[[str], None] | None = None,
    options: TrainerOptions | None = None,
) -> dict[str, Any]:
    """Race TEMPO against GRPO from one warm start at equal env steps (see the module docstring); ``configs``
    holds each algorithm's config (of :data:`RACE_ALGORITHMS`; :func:`~tempo_rl.training.config.configs_for`
    builds them from one job). Writes ``summary.json`` and ``race.png`` into ``run_dir`` and returns the summary.
    ``options`` go to every trainer of the race (the built-in race: :data:`RACE_OPTIONS`)."""
    say = say or (lambda _line: None)
    points = race_marks(budget_env_steps, marks)
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    missing = [
        name for name in RACE_ALGORITHMS if configs.get(name) is None or configs[name].algorithm != name
    ]
    if missing:
        raise ValueError(
            f"a race needs a config with algorithm = {', '.join(map(repr, missing))} under that key of configs; "
            "build them with tempo_rl.training.config.configs_for(job, RACE_ALGORITHMS)"
        )
    warm = warm_start_threads(configs["tempo"])
    say(f"warm start on {warm.warmstart.episodes} expert demos (shared by both algorithms)...")
    state, success = warm_start_state(arm_config(warm, run_dir / "warmstart"), run_dir / "warmstart", options)
    arms_config = {name: shared_tokenizer(configs[name], run_dir / "warmstart") for name in RACE_ALGORITHMS}
    say(
        f"warm start done: held-out success {success:.2f}; training TEMPO and GRPO to {budget_env_steps} env steps each..."
    )
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(RACE_ALGORITHMS)))) as pool:
        futures = {
            name: pool.submit(
                run_arm,
                arm_config(arms_config[name], run_dir / name).model_dump_json(),
                str(run_dir / name),
                state,
                success,
                budget_env_steps,
                points,
                options,
            )
            for name in RACE_ALGORITHMS
        }
        arms = {name: f.result() for name, f in futures.items()}
    result: dict[str, Any] = {
        "budget_env_steps": budget_env_steps,
        "marks": points,
        **arms,
        "seconds": time.perf_counter() - t0,
    }
    result["verdict"] = verdict(result)
    summary = {"race": result}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    plotted = plot_race(result, run_dir / "race.png")
    say(race_table(result))
    say(result["verdict"])
    if plotted:
        say(f"plot: {run_dir / 'race.png'}")
    say(f"{time.perf_counter() - t0:.0f} s; {os.path.join(str(run_dir), 'summary.json')}")
    return summary
