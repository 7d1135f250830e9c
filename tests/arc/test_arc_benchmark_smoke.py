"""``benchmarks/arc_restore.py --quick`` runs and prints one JSON line of side-by-side figures (no timing asserts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_arc_restore_benchmark_quick() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "arc_restore.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    assert figures["benchmark"] == "arc_restore"
    for depth in ("depth_10", "depth_50"):
        row = figures["arc_stub"][depth]
        assert row["replay_ms"] > 0 and row["fork_ms"] > 0 and row["ratio"] > 0
