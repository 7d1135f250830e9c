"""Benchmark: could any critic reach a value correlation of 0.7 on this env? The generative arm's warm-up and
value probe, alone.

The mechanism benchmark's generative critic is meant to reach a value correlation of at least 0.7 with Monte
Carlo returns at the end of its warm-up, on every seed. How high a critic can score depends on the env and the
policy as much as on the critic: a single return is ``G = V_pi(s) + e`` with ``E[e | s] = 0``, so no critic
beats the ceiling ``corr(V_pi, G) = sd(V_pi) / sd(G)`` on average (:func:`mechanism.value_probe`). Where the
policy's own sampling, not the state, decides most returns, the ceiling is low, and the env tests no critic.

This runs, per seed, what the benchmark's generative arm runs before TD, with the env setting changed:

1. the shared warm start (:func:`mechanism.warm_start_task`, cached in ``--work`` like the benchmark's);
2. the arm's critic warm-up (:func:`mechanism.make_config`'s ``generative`` arm: ``tempo.warmup_updates``
   updates of ``warmup_games_per_batch`` games, every round a critic state, replayed);
3. the value probe on 8 held-out games x N branches: the critic against single returns and against V_pi (M
   rollouts from the state, :func:`mechanism.probe_rollouts`: knights 32, else 8), and the ceiling ``corr(V_pi, G)``.

What can change (each only for this run, never the benchmark's table): ``--set KEY=JSON`` the env's kwargs (e.g.
``--set feedback='"immediate"'``), ``--max-rounds`` T, ``--macro-rounds`` H (the probe's states sit at rounds
H, 2H, ...), ``--demo-episodes`` (the warm start's demo games), ``--temperature`` (the actor's sampling
temperature in the warm-up and the probe; the warm start's evaluation keeps the env's ``eval_temperature``),
``--warmup-updates`` (the critic's warm-up; the arm: 4 updates), ``--warmup-games`` (games per warm-up
update), ``--probe-rollouts`` (M), ``--critic-learning-rate`` (the critic's own step size, ``actor``: the
actor's) and ``--critic-history-turns`` (the turns its prompt shows, ``all``: the whole history).

Prints ONE JSON line: the setting, and per seed the warm start's evaluation (success, invalid actions per
episode), each warm-up update's ``warmup/success_rate`` and ``critic/value_corr``, and the probe's figures; then
over the seeds the min / median / max of the ceiling and of the critic's two correlations.

The knights figures are in ``docs/results.md``. The benchmark's knights runs the actor at temperature 0.5 with
512 demo games, H = 2 and the conflict note; its probe reads V_pi from 32 rollouts per state; its critic steps
at 3e-3, sees the last turn only and warms up on 16 games per update. Other settings measured there: an actor at
temperature 1.0 on 96 demo games (``--temperature 1.0 --demo-episodes 96 --macro-rounds 4 --warmup-games 4``,
the env's note on), a probe of 8 rollouts (``--probe-rollouts 8``), and a critic with the actor's step size that
sees the whole history (``--critic-learning-rate actor --critic-history-turns all --warmup-games 8``). Usage::

    python benchmarks/warmup_probe.py --env knights --seeds 0 1 2 3 4 --jobs 2      # the benchmark's knights
    python benchmarks/warmup_probe.py --env knights --seeds 0 1 2 3 4 --jobs 2 \
        --temperature 1.0 --demo-episodes 96 --macro-rounds 4 --warmup-games 4      # an actor at temperature 1.0
    python benchmarks/warmup_probe.py --quick                                       # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import shutil
import statistics
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: the probe's figures summarised over the seeds
PROBE_KEYS = ("ceiling_vpi_return", "corr_v_return", "corr_v_vpi", "mean_return")


def env_setting(
    name: str,
    quick: bool,
    kwargs: Mapping[str, Any],
    max_rounds: int | None = None,
    macro_rounds: int | None = None,
    demo_episodes: int | None = None,
    warmup_games: int | None = None,
    probe_rollouts: int | None = None,
    critic: Mapping[str, Any] | None = None,
) -> Any:
    """The mechanism benchmark's setting of env ``name`` (``ENVS``, or ``QUICK_ENVS`` with ``quick``) with
    ``kwargs`` over its env kwargs and, where given, T, H, the warm start's demo games, the generative arm's
    games per warm-up update and the probe's rollouts per state replaced; ``critic`` replaces the setting's
    ``critic_learning_rate`` and ``critic_history_turns`` it names (a None value: the actor's step size, the
    whole history)."""
    import mechanism

    table = mechanism.QUICK_ENVS if quick else mechanism.ENVS
    if name not in table:
        raise SystemExit(f"unknown env {name!r}: choose one of {sorted(table)}")
    env = table[name]
    return replace(
        env,
        kwargs={**env.kwargs, **kwargs},
        max_rounds=env.max_rounds if max_rounds is None else max_rounds,
        macro_rounds=env.macro_rounds if macro_rounds is None else macro_rounds,
        demo_episodes=env.demo_episodes if demo_episodes is None else demo_episodes,
        warmup_games=env.warmup_games if warmup_games is None else warmup_games,
        probe_rollouts=env.probe_rollouts if probe_rollouts is None else probe_rollouts,
        **(critic or {}),
    )


def arm_config(
    env: Any,
    scale: Any,
    seed: int,
    run_dir: Path,
    tok_dir: Path,
    temperature: float | None = None,
    warmup_updates: int | None = None,
) -> Any:
    """The benchmark's generative arm with the critic-only warm-up of a fixed length
    (``generative_critic_only``, :func:`mechanism.make_config`), the actor sampling at ``temperature`` and the
    critic warmed up for ``warmup_updates`` updates where given; validated again, so a bad value fails with the
    config's own error (:class:`~tempo_rl.training.config.ConfigError`)."""
    import mechanism

    from tempo_rl.training.config import validate_config

    cfg = mechanism.make_config(env, scale, seed, "generative_critic_only", run_dir, tok_dir)
    data = cfg.model_dump()
    if temperature is not None:
        data["sampling"]["temperature"] = temperature
    if warmup_updates is not None:
        data["tempo"]["warmup_updates"] = warmup_updates
    return validate_config(data)


def probe_seed(
    seed: int,
    env: Any,
    quick: bool,
    work: Path,
    temperature: float | None = None,
    warmup_updates: int | None = None,
) -> dict[str, Any]:
    """One seed: the warm start, the generative arm's warm-up and the value probe (see the module docstring)."""
    import mechanism

    scale = mechanism.QUICK if quick else mechanism.FULL
    tok_dir = mechanism.build_env_tokenizer(env, scale, work)
    warm = mechanism.warm_start_task(env, scale, seed, work, tok_dir)
    tag = f"T{env.max_rounds}-H{env.macro_rounds}-t{temperature}-w{warmup_updates}"
    run_dir = work / f"{env.name}-seed{seed}-warmup-probe-{tag}-{warm['key']}"
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an earlier or interrupted run: start over (as the benchmark's arms)
    run_dir.mkdir(parents=True)
    cfg = arm_config(env, scale, seed, run_dir, tok_dir, temperature, warmup_updates)
    trainer, last = mechanism.warm_started_trainer(
        cfg, run_dir, warm, mechanism.make_options(env, "generative_critic_only")
    )
    warmup: dict[str, list[Any]] = {"success_rate": [], "value_corr": [], "env_steps": []}
    try:
        for _ in range(cfg.tempo.warmup_updates):
            trainer.train(max_updates=1)
            for key, metric in (
                ("success_rate", "warmup/success_rate"),
                ("value_corr", "critic/value_corr"),
                ("env_steps", "cost/env_steps"),
            ):
                warmup[key].append(mechanism._round(mechanism._finite(last.get(metric))))
        probe = mechanism.value_probe(
            trainer, scale.probe_games, mechanism.probe_rollouts(env, scale), aside=True
        )
    finally:
        mechanism._close(trainer)
    ws = warm["metrics"]
    return {
        "warm_start": {
            "success": mechanism._round(ws.get("eval/success_rate")),
            "invalid_actions_mean": mechanism._round(ws.get("eval/invalid_actions_mean")),
        },
        "warmup": warmup,
        "probe": {k: mechanism._round(v) if isinstance(v, float) else v for k, v in probe.items()},
    }


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Min / median / max of the defined ``values`` and how many seeds had none (an undefined correlation:
    every return of the probe equal)."""
    defined = [float(v) for v in values if v is not None]
    if not defined:
        return {"min": None, "median": None, "max": None, "undefined": len(values)}
    return {
        "min": round(min(defined), 4),
        "median": round(statistics.median(defined), 4),
        "max": round(max(defined), 4),
        "undefined": len(values) - len(defined),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="knights", help="an env of the mechanism benchmark (default knights)")
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="an env kwarg over the benchmark's, e.g. --set max_steps=8 or --set feedback='\"immediate\"'",
    )
    ap.add_argument("--max-rounds", type=int, default=None, help="T (default: the benchmark's)")
    ap.add_argument("--macro-rounds", type=int, default=None, help="H (default: the benchmark's)")
    ap.add_argument("--demo-episodes", type=int, default=None, help="the warm start's demo games")
    ap.add_argument("--temperature", type=float, default=None, help="the actor's sampling temperature")
    ap.add_argument(
        "--warmup-updates", type=int, default=None, help="the critic's warm-up updates (default: the arm's)"
    )
    ap.add_argument(
        "--warmup-games", type=int, default=None, help="games per warm-up update (default: the benchmark's)"
    )
    ap.add_argument(
        "--probe-rollouts",
        type=int,
        default=None,
        help="M, V_pi's rollouts per probe state (default: the benchmark's)",
    )
    ap.add_argument(
        "--critic-learning-rate",
        default=None,
        help="the critic's own step size, or 'actor' for the actor's (default: the benchmark's)",
    )
    ap.add_argument(
        "--critic-history-turns",
        default=None,
        help="the turns the critic is shown, or 'all' (default: the benchmark's)",
    )
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("runs/mechanism-work"), help="the benchmark's cache")
    ap.add_argument("--quick", action="store_true", help="the benchmark's quick scale, seed 0: a smoke run")
    args = ap.parse_args(argv)
    import mechanism

    kwargs: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        try:
            if not sep or not key:
                raise ValueError("no '='")
            kwargs[key] = json.loads(value)
        except ValueError as err:
            raise SystemExit(
                f"--set {item!r}: expected KEY=JSON, e.g. --set max_steps=8 or --set feedback='\"final\"' ({err})"
            ) from None
    if args.quick:
        args.seeds = [0]
    critic: dict[str, Any] = {}
    try:
        if args.critic_learning_rate is not None:
            lr = args.critic_learning_rate
            critic["critic_learning_rate"] = None if lr == "actor" else float(lr)
        if args.critic_history_turns is not None:
            turns = args.critic_history_turns
            critic["critic_history_turns"] = None if turns == "all" else int(turns)
    except ValueError as err:
        raise SystemExit(
            "--critic-learning-rate takes a number or 'actor', --critic-history-turns an integer or 'all' "
            f"({err})"
        ) from None
    env = env_setting(
        args.env,
        args.quick,
        kwargs,
        args.max_rounds,
        args.macro_rounds,
        args.demo_episodes,
        args.warmup_games,
        args.probe_rollouts,
        critic,
    )
    scale = mechanism.QUICK if args.quick else mechanism.FULL
    args.work.mkdir(parents=True, exist_ok=True)
    run = functools.partial(
        probe_seed,
        env=env,
        quick=args.quick,
        work=args.work,
        temperature=args.temperature,
        warmup_updates=args.warmup_updates,
    )
    rows: dict[str, Any] = {}
    with ProcessPoolExecutor(args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
        for seed, row in zip(args.seeds, pool.map(run, args.seeds) if pool else map(run, args.seeds)):
            print(json.dumps({"seed": seed, **row}), file=sys.stderr, flush=True)  # progress, in seed order
            rows[f"seed{seed}"] = row
    out: dict[str, Any] = {
        "benchmark": "warmup_probe",
        "env": args.env,
        "kwargs": env.kwargs,
        "T": env.max_rounds,
        "H": env.macro_rounds,
        "demo_episodes": env.demo_episodes,
        "warmup_games": env.warmup_games,
        "critic_learning_rate": env.critic_learning_rate,
        "critic_history_turns": env.critic_history_turns,
        "temperature": args.temperature,
        "warmup_updates": scale.warmup_updates if args.warmup_updates is None else args.warmup_updates,
        "probe_rollouts": mechanism.probe_rollouts(env, scale),
        **rows,
    }
    for key in PROBE_KEYS:
        out[key] = spread([row["probe"].get(key) for row in rows.values()])
    print(json.dumps(mechanism.json_safe(out), allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
