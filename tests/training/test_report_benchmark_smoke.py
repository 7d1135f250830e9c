"""``benchmarks/report_page.py --quick --no-browser`` runs and prints one JSON line (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("plotly")

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "report_page.py"


def test_report_benchmark_quick_prints_one_json_line() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCHMARK), "--quick", "--no-browser"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    lines = out.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    # 2 warm-up updates x 2 games x 4 episodes + 4 TD updates x 6 starts x 4 branches
    assert record["benchmark"] == "report_page" and record["updates"] == 6 and record["records"] == 112
    assert record["report_mb"] > record["trajectories_mb"] > 0
