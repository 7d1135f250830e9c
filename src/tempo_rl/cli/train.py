"""``tempo-rl train``: train with TEMPO (or the GRPO baseline) from a TOML config, or resume a run.

Examples::

    tempo-rl train                                         # the built-in offline main job
    tempo-rl train --config examples/configs/keydoor_local.toml --set tempo.td_updates=20
    tempo-rl train --resume runs/keydoor                   # continue after a crash / kill
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tempo_rl.cli import add_import_option, import_user_modules

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    """Register ``train``."""
    p = subparsers.add_parser(
        "train",
        help="train an agent with TEMPO (or GRPO) from a config, or resume a run",
        description="Train with TEMPO (or the GRPO baseline). Without --config, the built-in offline main job "
        "runs: the local backend (tiny transformer, offline tokenizer) on the long-horizon KeyDoor env.",
    )
    p.add_argument(
        "--config", "-c", type=Path, default=None, help="TOML config (default: the built-in main job)"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set tempo.branches=8 (repeatable)",
    )
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
    add_import_option(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``tempo-rl train``; returns the exit code: 0 done, 2 an invalid config or an unusable run directory
    (the message names the problem and the fix; nothing was written), 130 interrupted (Ctrl-C; the run stays
    resumable from its last checkpoint)."""
    from tempo_rl.training.config import ConfigError, load_config
    from tempo_rl.training.run import DEFAULT_CONFIG, train_run

    if not import_user_modules("train", getattr(args, "imports", [])):
        return 2
    console = False if args.quiet else None
    run_dir: Path | None = None
    try:
        if args.resume is not None:
            if args.config is not None:
                raise ConfigError(
                    "--resume continues a run with its own config.toml; do not pass --config too"
                )
            if args.overwrite:
                raise ConfigError("--overwrite starts a new run; it cannot be combined with --resume")
            train_run(
                args.resume,
                resume=True,
                overrides=args.overrides,
                max_updates=args.max_updates,
                console=console,
            )
            return 0
        config_path = args.config if args.config is not None else DEFAULT_CONFIG
        config = load_config(config_path, args.overrides)
        run_dir = args.run_dir if args.run_dir is not None else Path(config.run.run_dir)
        if args.run_dir is not None:
            config = config.model_copy(
                update={"run": config.run.model_copy(update={"run_dir": str(run_dir)})}
            )
        train_run(run_dir, config, max_updates=args.max_updates, console=console, overwrite=args.overwrite)
        return 0
    except ConfigError as exc:
        print(f"tempo-rl train: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        where = args.resume if args.resume is not None else run_dir
        hint = f": tempo-rl train --resume {where}" if where is not None else ""
        print(
            f"tempo-rl train: interrupted; the run stays resumable from its last checkpoint{hint}",
            file=sys.stderr,
        )
        return 130
