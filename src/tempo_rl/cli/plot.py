"""``tempo-rl plot RUN_DIR``: PNGs of a run's actor and critic curves (needs the ``plot`` extra)."""

from __future__ import annotations

import argparse
from typing import Any

from tempo_rl.cli import CommandError, command, set_command


def add_parser(subparsers: Any) -> None:
    """Register the ``plot`` sub-command."""
    parser = subparsers.add_parser(
        "plot",
        help="write PNGs of a run's actor and critic curves",
        description="Read RUN_DIR/metrics.jsonl and write actor.png, critic.png and time.png.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a tempo-rl run directory (holds metrics.jsonl)")
    parser.add_argument("--out", default=None, help="output folder (default: RUN_DIR/plots)")
    set_command(parser, run)


@command("plot")
def run(args: argparse.Namespace) -> int:
    """Write the plots; print one line per PNG. Exit code 2 when RUN_DIR holds no readable metrics, nothing to
    plot, or ``--out`` cannot be written (checked before anything is drawn; the run directory is never
    changed)."""
    from tempo_rl.cli import checks
    from tempo_rl.training.plots import load_metrics, plot_run
    from tempo_rl.training.rundir import METRICS_FILE

    run_dir = checks.run_to_read(args.run_dir, needs=METRICS_FILE)
    if args.out is not None:
        out = checks.output_dir("--out", args.out, fix="pass a folder for the PNGs")
    else:
        out = checks.output_dir(
            "RUN_DIR", run_dir / "plots", fix="pass --out DIR to write the PNGs elsewhere"
        )
    if not load_metrics(run_dir):
        raise CommandError(
            f"{run_dir / METRICS_FILE} holds no records yet; train for at least one update first"
        )
    written = plot_run(run_dir, out)
    if not written:
        raise CommandError(f"{run_dir / METRICS_FILE} holds none of the plotted metrics; nothing to plot")
    for path, panels in written.items():
        print(f"{path}: {', '.join(panels)}")
    return 0
