"""``tempo-rl race``: TEMPO against GRPO from one warm start, on one env, at equal env steps.

Examples::

    tempo-rl race --run-dir runs/race                           # the built-in long-horizon race, offline
    tempo-rl race --config my.toml --budget-env-steps 20000     # a job: [tempo] for TEMPO, [grpo] for GRPO

Both algorithms start from the same supervised warm start and train until each has used the same env steps,
in two processes; the console shows their held-out success side by side at the same env-step marks and a
one-line verdict. The run directory gets ``summary.json`` (the race), ``race.png`` and one sub-folder per
algorithm (``warmstart/``, ``tempo/``, ``grpo/``, each with its ``metrics.jsonl``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tempo_rl.cli import CommandError, add_config_options, checks, command, set_command

__all__ = ["add_parser", "run"]

#: The built-in race's env-step budget per algorithm and its evaluation marks.
DEFAULT_BUDGET = 4608
DEFAULT_MARKS = 6


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``race``."""
    p = subparsers.add_parser(
        "race",
        help="train TEMPO and GRPO from one warm start at equal env steps and compare them",
        description=(__doc__ or "").split("\n\n")[0],
    )
    add_config_options(p, default="the built-in job", example="run.eval_episodes=16")
    p.add_argument("--run-dir", type=Path, default=Path("runs/race"), help="where the race is written")
    p.add_argument(
        "--budget-env-steps",
        type=int,
        default=DEFAULT_BUDGET,
        help=f"env steps each algorithm trains for (default {DEFAULT_BUDGET})",
    )
    p.add_argument(
        "--marks",
        type=int,
        default=DEFAULT_MARKS,
        help=f"evaluations per algorithm (default {DEFAULT_MARKS})",
    )
    p.add_argument("--jobs", type=int, default=2, help="processes (default 2: one per algorithm)")
    p.add_argument("--quiet", action="store_true", help="no console output")
    set_command(p, run, imports=True)


@command("race")
def run(args: argparse.Namespace) -> int:
    """Run ``tempo-rl race``; 0 done, 2 a bad input (nothing written)."""
    from tempo_rl.training.config import apply_overrides, configs_for, read_config_file
    from tempo_rl.training.race import RACE_ALGORITHMS, RACE_CONFIG, RACE_OPTIONS, race

    checks.whole("--budget-env-steps", args.budget_env_steps, at_least=1)
    checks.whole("--marks", args.marks, at_least=1)
    checks.whole("--jobs", args.jobs, at_least=1)
    run_dir = checks.output_dir("--run-dir", args.run_dir)
    if run_dir.exists() and any(run_dir.iterdir()):
        raise CommandError(f"--run-dir {run_dir} is not empty; a race starts in a new folder: choose another")
    if args.config is not None:
        checks.existing_file("--config", args.config, what="a TOML config")
    job = read_config_file(args.config if args.config is not None else RACE_CONFIG)
    configs = configs_for(apply_overrides(job, args.overrides), RACE_ALGORITHMS)
    say = (lambda _line: None) if args.quiet else (lambda line: print(line, flush=True))
    race(
        configs,
        run_dir,
        budget_env_steps=args.budget_env_steps,
        marks=args.marks,
        jobs=args.jobs,
        say=say,
        options=RACE_OPTIONS if args.config is None else None,  # the built-in race's critic design
    )
    return 0
