"""``benchmarks/td_update.py --quick`` runs and prints one JSON line with the env vs trainer time split."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.alfworld
def test_td_update_benchmark_quick() -> None:
    pytest.importorskip("alfworld")
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "td_update.py"), "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, out.stdout
    figures = json.loads(lines[0])
    assert figures["benchmark"] == "td_update" and figures["quick"] is True
    assert figures["env_total_s"] > 0 and figures["other_s"] >= 0
    assert figures["reused_states"] >= 1  # the measured update restored stored states
