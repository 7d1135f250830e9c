"""``tempo-rl report RUN_DIR``: one self-contained HTML page of a run (needs the ``report`` extra)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register the ``report`` sub-command."""
    parser = subparsers.add_parser(
        "report",
        help="write one self-contained HTML page of a run: curves and browsable branch trees",
        description="Read RUN_DIR (metrics.jsonl, trajectories.jsonl, store.sqlite) and write one HTML file "
        "that works offline: interactive curves, every update's start states with their branches, "
        "endpoint values, advantages and critic samples, filters and a search. A running or stopped run "
        "gets a report of what is on disk, marked partial.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a tempo-rl run directory")
    parser.add_argument(
        "--out", default=None, metavar="FILE", help="output file (default: RUN_DIR/report.html)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the report; print its path and size. Exit code 1 when RUN_DIR is not a readable run."""
    from tempo_rl._optional import MissingDependencyError
    from tempo_rl.training.report import write_report

    try:
        path = write_report(args.run_dir, args.out)
    except (FileNotFoundError, ValueError, MissingDependencyError) as exc:
        print(f"tempo-rl report: {exc}", file=sys.stderr)
        return 1
    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0
