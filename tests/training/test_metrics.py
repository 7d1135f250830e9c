"""MetricsLogger: metrics.jsonl records, NaN handling, resume truncation, optional sinks, progress bar."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tempo_rl._optional import MissingDependencyError
from tempo_rl.training.metrics import MetricsLogger, ProgressBar, read_metrics


def test_each_log_is_one_flushed_json_line(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path / "run", console=False) as logger:
        logger.log(0, {"critic/abs_error_mean": 0.5, "td/store_size": np.int64(3), "actor/flag": True})
        # readable before close: flushed per line
        lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        assert len(lines) == 1
        logger.log(1, {"critic/value_corr": math.nan, "critic/abs_error_mean": np.float32(0.25)})
    raw = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert raw[0]["step"] == 0 and raw[0]["td/store_size"] == 3.0 and raw[0]["actor/flag"] == 1.0
    assert raw[1]["critic/value_corr"] is None  # strict JSON, no NaN literal
    records = read_metrics(tmp_path / "run")
    assert math.isnan(records[1]["critic/value_corr"]) and records[1]["critic/abs_error_mean"] == 0.25
    assert all(isinstance(r["time"], float) for r in records)


def test_bad_input_is_rejected(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path, console=False)
    with pytest.raises(ValueError, match="step must be an int >= 0"):
        logger.log(-1, {})
    with pytest.raises(TypeError, match="metric 'a' must be a real number, got str"):
        logger.log(0, {"a": "high"})
    with pytest.raises(ValueError, match="metric keys must be"):
        logger.log(0, {"step": 1.0})
    logger.close()
    logger.close()
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(0, {"a": 1.0})
    with pytest.raises(FileNotFoundError, match="tempo-rl run directory"):
        read_metrics(tmp_path / "nowhere")


def test_resume_drops_steps_after_the_checkpoint_and_a_torn_line(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, console=False) as logger:
        for step in range(5):
            logger.log(step, {"x": float(step)})
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 5, "x": 5')  # killed mid-write
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4]
    with MetricsLogger(tmp_path, console=False, resume_from_step=2) as logger:
        logger.log(3, {"x": 30.0})
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 30.0)]


class _FakeSink(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.calls: list[tuple[str, Any, Any]] = []

    def init(self, **kw: Any) -> None:
        self.calls.append(("init", kw, None))

    def log(self, data: dict[str, float], step: int) -> None:
        self.calls.append(("log", data, step))

    def finish(self) -> None:
        self.calls.append(("finish", None, None))


def test_swanlab_and_wandb_get_finite_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    swan, wandb = _FakeSink("swanlab"), _FakeSink("wandb")
    monkeypatch.setitem(sys.modules, "swanlab", swan)
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    logger = MetricsLogger(
        tmp_path / "r1", swanlab=True, wandb=True, project="p", config={"lr": 1e-3}, console=False
    )
    logger.log(7, {"a": 1.0, "b": math.nan})
    logger.close()
    assert swan.calls[0] == ("init", {"project": "p", "experiment_name": "r1", "config": {"lr": 1e-3}}, None)
    assert wandb.calls[0][1]["dir"] == str(tmp_path / "r1") and wandb.calls[0][1]["name"] == "r1"
    for sink in (swan, wandb):
        assert sink.calls[1:] == [("log", {"a": 1.0}, 7), ("finish", None, None)]


def test_missing_sink_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "swanlab", None)  # import fails
    with pytest.raises(MissingDependencyError, match=r"pip install 'tempo-rl\[swanlab\]'"):
        MetricsLogger(tmp_path, swanlab=True)


def test_progress_bar_counts_and_is_silent_when_disabled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with MetricsLogger(tmp_path, console=False).progress(3) as bar:
        bar.update(2, {"critic/abs_error_mean": 0.1})
    assert bar.n == 2 and capsys.readouterr().err == ""
    loud = ProgressBar(2, "warm-up")
    loud.update(1, {"success": 0.5})
    loud.close()
    assert "warm-up" in capsys.readouterr().err
