"""Smoke test of ``benchmarks/restore.py --quick``: one JSON line with every figure (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "restore.py"


def test_restore_benchmark_quick_prints_one_json_line():
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--quick"], capture_output=True, text=True, timeout=120, check=True
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    assert figures["depths"] == [10, 50, 200] and "textworld" not in figures
    for env in ("keydoor", "knights"):
        for depth in (10, 50, 200):
            for kind in ("replay", "fork", "ancestor"):
                assert figures[env][f"{kind}_ms_{depth}"] > 0
        assert figures[env]["fork_ratio_200_10"] > 0 and figures[env]["replay_ratio_200_10"] > 0
    assert isinstance(figures["target_fork_200_le_2x_10"], bool)
