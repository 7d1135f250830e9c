"""``benchmarks/store.py --quick`` runs and prints one JSON line: shared prefixes cost less than private copies."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))

from benchmark_runs import run_benchmark


def test_store_benchmark_quick() -> None:
    figures = run_benchmark("store.py", "--quick")
    assert figures["benchmark"] == "store" and figures["quick"] is True
    assert 0 < figures["bytes_per_state_shared"] < figures["bytes_per_state_naive"]
