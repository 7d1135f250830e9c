"""The signals benchmark runs, prints one JSON line and its two results agree (no timing asserts)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "signals.py"


def test_benchmark_quick_prints_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("signals_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    record = module.main(["--quick", "--groups", "300"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == record
    assert record["groups"] == 300 and record["n_branches"] == 8 and record["k_samples"] == 8
    assert record["max_abs_diff"] <= 1e-12
    assert record["speedup"] == pytest.approx(record["per_group_loop_s"] / record["batched_s"], rel=0.01)
