"""``tempo-rl report RUN_DIR``: one self-contained HTML page of a run (needs the ``report`` extra)."""

from __future__ import annotations

import argparse
from typing import Any

from tempo_rl.cli import CommandError, command, set_command


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
    set_command(parser, run)


@command("report")
def run(args: argparse.Namespace) -> int:
    """Write the report; print its path and size. Exit code 2 when RUN_DIR is not a readable run or ``--out``
    cannot be written (checked before the page is built; the run directory is never changed)."""
    from tempo_rl.cli import checks
    from tempo_rl.training.report import REPORT_FILE, write_report
    from tempo_rl.training.rundir import METRICS_FILE, TRAJECTORIES_FILE

    run_dir = checks.existing_dir("RUN_DIR", args.run_dir, what="the run directory of a tempo-rl run")
    if not any((run_dir / name).is_file() for name in (METRICS_FILE, TRAJECTORIES_FILE)):
        raise CommandError(
            f"RUN_DIR {run_dir} holds neither {METRICS_FILE} nor {TRAJECTORIES_FILE}: it is not a tempo-rl run "
            "directory; pass the run.run_dir of a `tempo-rl train` run"
        )
    if args.out is not None:
        out = checks.output_file("--out", args.out, example=REPORT_FILE)
    else:
        out = checks.output_file(
            "RUN_DIR",
            run_dir / REPORT_FILE,
            example=REPORT_FILE,
            fix="pass --out FILE to write the page elsewhere",
        )
    path = write_report(run_dir, out)
    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0
