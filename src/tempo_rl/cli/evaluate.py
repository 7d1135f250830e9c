"""``tempo-rl eval RUN_DIR``: evaluate a run's latest checkpoint; JSONL of every trajectory plus a summary."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from tempo_rl.cli import CommandError, checks, command, set_command


def add_parser(subparsers: Any) -> None:
    """Register the ``eval`` sub-command."""
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a run's latest checkpoint (success by split and task type)",
        description=(
            "Play one full episode per evaluation game with the run's latest checkpoint and write "
            "eval_trajectories.jsonl (every trajectory + a summary line) and eval_summary.json. By default "
            "the games are the run config's evaluation seeds; --alfworld-root evaluates ALFWorld splits."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory made by `tempo-rl train`")
    parser.add_argument(
        "--episodes", type=int, default=None, help="evaluation seeds to play (default: config)"
    )
    parser.add_argument("--temperature", type=float, default=None, help="default: sampling.eval_temperature")
    parser.add_argument("--out", default=None, help="output folder (default: RUN_DIR/eval/update-N)")
    parser.add_argument("--batch-size", type=int, default=8, help="games played concurrently")
    parser.add_argument("--alfworld-root", default=None, help="ALFWorld data root: evaluate its splits")
    parser.add_argument(
        "--splits",
        nargs="+",
        default=None,
        help="ALFWorld splits (with --alfworld-root; default: valid_seen valid_unseen)",
    )
    parser.add_argument("--per-split", type=int, default=None, help="ALFWorld games per split (default: all)")
    set_command(parser, run, imports=True)


def _fmt(value: Any) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _check(args: argparse.Namespace) -> tuple[Path, Any]:
    """Check every input before anything is built or played; returns the run directory and its config.

    Raises:
        CommandError: a bad option, a run directory that is not a readable run with a checkpoint, an env that
            is not registered, or an output folder that cannot be written.
    """
    from tempo_rl.training.checkpoint import latest_checkpoint
    from tempo_rl.training.config import load_config
    from tempo_rl.training.rundir import CONFIG_FILE

    checks.whole("--episodes", args.episodes, at_least=1)
    checks.whole("--batch-size", args.batch_size, at_least=1)
    checks.whole("--per-split", args.per_split, at_least=1)
    checks.number("--temperature", args.temperature, at_least=0.0)
    if args.alfworld_root is None:
        given = [o for o, v in (("--splits", args.splits), ("--per-split", args.per_split)) if v is not None]
        if given:
            raise CommandError(
                f"{' and '.join(given)} choose ALFWorld games and need --alfworld-root DIR (the ALFWorld data "
                "root); pass it, or drop them to evaluate the run's own evaluation seeds"
            )
    else:
        checks.existing_dir(
            "--alfworld-root", args.alfworld_root, what="the ALFWorld data root (holds json_2.1.1/)"
        )
        if args.episodes is not None:
            raise CommandError(
                "--episodes counts the run's evaluation seeds, not ALFWorld games; with --alfworld-root use "
                "--per-split N instead"
            )
    run_dir = checks.run_to_read(args.run_dir, needs=CONFIG_FILE)
    config = load_config(run_dir / CONFIG_FILE)
    from tempo_rl.envs.registry import UnknownEnvError, available, get_factory

    if args.alfworld_root is None:
        try:
            get_factory(config.env.name)
        except UnknownEnvError:
            raise CommandError(
                f"the run's env {config.env.name!r} (env.name in {run_dir / CONFIG_FILE}) is not registered; "
                "pass --import MODULE with the module that registers it (available envs: "
                f"{', '.join(available())})"
            ) from None
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise CommandError(
            f"RUN_DIR {run_dir} has no checkpoint yet (the run stopped before its first one), so there is no "
            f"trained policy to evaluate; continue it with `tempo-rl train --resume {run_dir}` first"
        )
    if args.out is not None:
        checks.output_dir(
            "--out", args.out, fix="pass a folder for eval_trajectories.jsonl and eval_summary.json"
        )
    else:
        checks.output_dir("RUN_DIR", run_dir / "eval", fix="pass --out DIR to write the evaluation elsewhere")
    return run_dir, config


@command("eval")
def run(args: argparse.Namespace) -> int:
    """Evaluate and print the summary; exit code 2 on a bad input (checked before any game is played)."""
    from tempo_rl.training.evaluate import EVAL_SUMMARY_FILE, alfworld_games, evaluate_run

    run_dir, config = _check(args)
    games = None
    if args.alfworld_root is not None:
        kwargs = {k: v for k, v in config.env.kwargs.items() if k != "game_file"}
        splits = args.splits if args.splits is not None else ["valid_seen", "valid_unseen"]
        games = alfworld_games(args.alfworld_root, splits, per_split=args.per_split, env_kwargs=kwargs)
        if not games:
            raise CommandError(
                f"--alfworld-root {args.alfworld_root} holds no game of the splits {' '.join(splits)}; pass the "
                "folder that holds json_2.1.1/ and splits it has (tempo-rl data alfworld lists them)"
            )
    summary = evaluate_run(
        run_dir,
        games=games,
        episodes=args.episodes,
        temperature=args.temperature,
        out_dir=args.out,
        batch_size=args.batch_size,
    )
    overall = summary["overall"]
    print(
        f"episodes {int(overall['episodes'])}  success {_fmt(overall['success_rate'])}  "
        f"steps {_fmt(overall['steps_mean'])}  invalid actions {_fmt(overall['invalid_actions_mean'])}"
    )
    for split, stats in summary["by_split"].items():
        print(f"  split {split}: success {_fmt(stats['success_rate'])} over {int(stats['episodes'])}")
    for task_type, stats in summary["by_task_type"].items():
        print(f"  task {task_type}: success {_fmt(stats['success_rate'])} over {int(stats['episodes'])}")
    print(f"wrote {summary['out_dir']}/{EVAL_SUMMARY_FILE}")
    return 0
