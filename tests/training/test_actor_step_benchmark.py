"""``benchmarks/actor_step.py --quick`` runs and prints one JSON line with the one-step surrogate figures."""

from __future__ import annotations

import math

import numpy as np
import pytest
from benchmark_runs import run_benchmark

from tempo_rl.rollout.datums import make_datum


def test_the_surrogate_counts_only_tokens_with_an_advantage_and_splits_off_the_decision() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "actor_step.py"
    spec = importlib.util.spec_from_file_location("actor_step", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # tokens 5 (context), 7 = "take", 3 = the decision, 9: advantages on the last two predictions only
    d = make_datum([5, 7, 3, 9], [0.0, 0.0, -0.5, -1.0], [0.0, 0.0, 2.0, -1.0])
    before = [np.array([-1.0, -0.5, -1.0])]  # per prediction: of 7, of 3, of 9
    after = [np.array([-3.0, -0.25, -1.5])]
    total, decision, n = bench.surrogate([d], before, after, after_token=7)
    assert total == pytest.approx(
        2.0 * 0.25 + (-1.0) * (-0.5)
    )  # the context token's change counts for nothing
    assert (decision, n) == (pytest.approx(0.5), 1)


@pytest.mark.slow
def test_actor_step_benchmark_quick() -> None:
    pytest.importorskip("torch")
    figures = run_benchmark("actor_step.py", "--quick")
    assert figures["benchmark"] == "actor_step" and figures["steps"] == 2
    assert (
        figures["decision_tokens_per_update"] > 0
    )  # the warm-started actor takes keys, the oracle splits them
    assert all(math.isfinite(figures[k]) for k in ("train_surrogate_mean", "heldout_surrogate_mean"))
