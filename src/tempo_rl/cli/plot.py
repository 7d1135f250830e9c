"""``tempo-rl plot RUN_DIR``: PNGs of a run's actor and critic curves (needs the ``plot`` extra)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register the ``plot`` sub-command."""
    parser = subparsers.add_parser(
        "plot",
        help="write PNGs of a run's actor and critic curves",
        description="Read RUN_DIR/metrics.jsonl and write actor.png, critic.png and time.png.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a tempo-rl run directory (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="output folder (default: RUN_DIR/plots)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the plots; print one line per PNG. Exit code 1 when there is nothing to plot."""
    from tempo_rl.training.plots import plot_run

    try:
        written = plot_run(args.run_dir, args.out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"tempo-rl plot: {exc}", file=sys.stderr)
        return 1
    if not written:
        print("tempo-rl plot: metrics.jsonl has none of the plotted metrics", file=sys.stderr)
        return 1
    for path, panels in written.items():
        print(f"{path}: {', '.join(panels)}")
    return 0
