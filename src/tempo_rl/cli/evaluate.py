"""``tempo-rl eval RUN_DIR``: evaluate a run's latest checkpoint; JSONL of every trajectory plus a summary."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from tempo_rl.cli import add_import_option, import_user_modules


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
        default=["valid_seen", "valid_unseen"],
        help="ALFWorld splits (with --alfworld-root)",
    )
    parser.add_argument("--per-split", type=int, default=None, help="ALFWorld games per split (default: all)")
    add_import_option(parser)
    parser.set_defaults(func=run)


def _fmt(value: Any) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def run(args: argparse.Namespace) -> int:
    """Evaluate and print the summary; exit code 1 on a configuration problem."""
    from tempo_rl.training.config import ConfigError
    from tempo_rl.training.evaluate import EVAL_SUMMARY_FILE, alfworld_games, evaluate_run

    if not import_user_modules("eval", getattr(args, "imports", [])):
        return 1
    if args.episodes is not None and args.episodes < 1:
        print("tempo-rl eval: --episodes must be >= 1", file=sys.stderr)
        return 1
    try:
        games = None
        if args.alfworld_root is not None:
            from tempo_rl.training.config import load_config
            from tempo_rl.training.run import CONFIG_FILE

            config = load_config(f"{args.run_dir}/{CONFIG_FILE}")
            kwargs = {k: v for k, v in config.env.kwargs.items() if k != "game_file"}
            games = alfworld_games(
                args.alfworld_root, args.splits, per_split=args.per_split, env_kwargs=kwargs
            )
        summary = evaluate_run(
            args.run_dir,
            games=games,
            episodes=args.episodes,
            temperature=args.temperature,
            out_dir=args.out,
            batch_size=args.batch_size,
        )
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"tempo-rl eval: {exc}", file=sys.stderr)
        return 1
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
