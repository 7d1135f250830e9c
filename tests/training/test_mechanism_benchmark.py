"""Smoke test of ``benchmarks/mechanism.py --quick``: one JSON line, results.json and the PNG (no timing asserts)."""

from __future__ import annotations

import json

import pytest
from benchmark_runs import run_benchmark


@pytest.mark.slow
@pytest.mark.torch
def test_mechanism_benchmark_quick_writes_results_and_one_json_line(tmp_path):
    pytest.importorskip("torch", reason="the benchmark trains on the local backend (torch)")
    pytest.importorskip("matplotlib", reason="the benchmark plots with matplotlib")
    out = tmp_path / "mechanism"
    line = run_benchmark("mechanism.py", "--quick", "--out", str(out), timeout=400)
    assert line["benchmark"] == "mechanism" and line["seeds"] == 1
    for arm in ("grpo", "tempo", "tempo_pc"):
        assert 0.0 <= line[f"keydoor/{arm}/success_final"] <= 1.0
    results = json.loads((out / "results.json").read_text())
    budget = results["scale"]["budget_steps"]
    runs = results["runs"]["keydoor"]["0"]
    assert set(runs) == {"grpo", "tempo", "tempo_pc"}
    for arm, run in runs.items():
        # every arm spends (at least) the same env-step budget, and its curve starts at step 0
        assert run["steps"] >= budget, arm
        assert run["curve"][0][0] == 0 and run["curve"][-1][0] == run["steps"]
        assert all(0.0 <= s <= 1.0 for _, s in run["curve"])
        steps = [u["steps"] for u in run["updates"]]
        assert steps == sorted(steps) and steps[-1] == run["steps"]
        assert set(run["time_s"]) >= {"sampling", "env", "training", "eval"}
    # GRPO has no critic; the prefix weights are logged by the TEMPO arms' TD updates
    assert not any("critic/abs_error_mean" in u for u in runs["grpo"]["updates"])
    td = [u for u in runs["tempo_pc"]["updates"] if u.get("train/phase") == 1.0]
    assert td and all("prefix/weight_mean" in u for u in td)
    assert (out / "mechanism.png").stat().st_size > 10_000
