"""``benchmarks/td_update.py --quick`` runs and prints one JSON line with the env vs trainer time split."""

from __future__ import annotations

import pytest
from benchmark_runs import run_benchmark


@pytest.mark.slow
@pytest.mark.alfworld
def test_td_update_benchmark_quick() -> None:
    pytest.importorskip("alfworld")
    figures = run_benchmark("td_update.py", "--quick")
    assert figures["benchmark"] == "td_update" and figures["quick"] is True
    assert figures["env_total_s"] > 0 and figures["other_s"] >= 0
    assert figures["reused_states"] >= 1  # the measured update restored stored states
