"""``tempo-rl train``: train with TEMPO (or the GRPO baseline) from a TOML config, or resume a run.

Examples::

    tempo-rl train                                         # the built-in offline main job
    tempo-rl train --config examples/configs/keydoor_local.toml --set tempo.td_updates=20
    tempo-rl train --resume runs/keydoor                   # continue after a crash / kill
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tempo_rl.cli import CommandError, add_config_options, checks, command, set_command

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``train``."""
    p = subparsers.add_parser(
        "train",
        help="train an agent with TEMPO (or GRPO) from a config, or resume a run",
        description="Train with TEMPO (or the GRPO baseline). Without --config, the built-in offline main job "
        "runs: the local backend (tiny transformer, offline tokenizer) on the long-horizon KeyDoor env.",
    )
    add_config_options(p, default="the built-in main job", example="tempo.branches=8")
    p.add_argument(
        "--run-dir", type=Path, default=None, help="run directory (default: run.run_dir of the config)"
    )
    p.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR", help="continue the run in RUN_DIR")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="start anew in a run directory that holds a run: the old run is moved aside to "
        "RUN_DIR.replaced-<UTC time> (never deleted)",
    )
    p.add_argument("--max-updates", type=int, default=None, help="stop after this many updates (resumable)")
    p.add_argument("--quiet", action="store_true", help="no console output")
    set_command(p, run, imports=True)


@command("train")
def run(args: argparse.Namespace) -> int:
    """Run ``tempo-rl train``; returns the exit code: 0 done, 2 a bad option, an invalid config, a refused
    resume change or an unusable run directory (the message names the problem and the fix; nothing was
    written), 1 a full disk or a refused write during the run (the message says from which checkpoint it
    resumes), 130 interrupted (Ctrl-C; the run stays resumable from its last checkpoint). The errors are turned
    into messages by :func:`tempo_rl.cli.run_command`."""
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import DEFAULT_CONFIG, train_run
    from tempo_rl.training.rundir import CONFIG_FILE, check_run_dir_path

    checks.whole("--max-updates", args.max_updates, at_least=0)
    console = False if args.quiet else None
    if args.resume is not None:
        if args.overwrite:
            raise CommandError("--overwrite starts a new run; it cannot be combined with --resume: drop one")
        for option, given in (("--config", args.config is not None), ("--run-dir", args.run_dir is not None)):
            if given:
                raise CommandError(
                    f"--resume continues the run in {args.resume} in place, with its own config.toml; {option} "
                    f"cannot be combined with it: drop {option} (to continue a copy elsewhere, copy the run "
                    "directory and resume the copy)"
                )
        run_dir = checks.existing_dir(
            "--resume", args.resume, what="the run directory of a `tempo-rl train` run (its run.run_dir)"
        )
        if not (run_dir / CONFIG_FILE).is_file():
            raise CommandError(
                f"--resume {run_dir} has no {CONFIG_FILE}; it is not a tempo-rl run directory to resume (pass the "
                "run.run_dir of a `tempo-rl train` run)"
            )
        args.active_run = run_dir
        train_run(
            run_dir, resume=True, overrides=args.overrides, max_updates=args.max_updates, console=console
        )
        return 0
    config = load_config(args.config if args.config is not None else DEFAULT_CONFIG, args.overrides)
    run_dir = args.run_dir if args.run_dir is not None else Path(config.run.run_dir)
    if args.run_dir is None and not config.run.run_dir.strip():
        raise CommandError(
            "run.run_dir is empty, which would be the current directory; name a folder of its own for the run, "
            "e.g. --run-dir runs/NAME"
        )
    run_dir = run_dir.expanduser()
    check_run_dir_path(run_dir)
    if args.run_dir is not None:
        config = config.model_copy(update={"run": config.run.model_copy(update={"run_dir": str(run_dir)})})
    args.active_run = run_dir
    train_run(run_dir, config, max_updates=args.max_updates, console=console, overwrite=args.overwrite)
    return 0
