"""Run a script of ``benchmarks/`` as a user does and read the one JSON line it must print."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(script: str, *args: str, timeout: int = 600) -> dict[str, Any]:
    """``python benchmarks/<script> <args>`` from the repository root; fails unless it exits 0 and prints
    exactly one non-empty line, a JSON object, which is returned."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout
    figures = json.loads(lines[0])
    assert isinstance(figures, dict), lines[0]
    return figures
