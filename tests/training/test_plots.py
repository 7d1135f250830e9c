"""Plots: PNGs from metrics.jsonl, panels only for logged metrics, and the ``tempo-rl plot`` command."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tempo_rl.cli import main
from tempo_rl.training.metrics import MetricsLogger
from tempo_rl.training.plots import plot_run

pytest.importorskip("matplotlib", reason="needs the plot extra")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_run(run_dir: Path) -> None:
    with MetricsLogger(run_dir, console=False) as logger:
        for step in range(6):
            logger.log(
                step,
                {
                    "critic/abs_error_mean": 0.5 - 0.05 * step,
                    "critic/value_corr": math.nan if step == 0 else 0.1 * step,
                    "critic/parse_failure_rate": 0.1,
                    "warmup/success_rate": 0.2 if step < 3 else math.nan,
                    "actor/degenerate_group_rate": 0.5,
                    "td/fresh_share": 0.25,
                    "time/env_seconds": 1.0,
                    "time/sampling_seconds": 2.0,
                },
            )
        logger.log(5, {"eval/success_rate": 0.4})


def test_plot_run_writes_pngs_with_the_logged_panels(tmp_path: Path) -> None:
    _write_run(tmp_path)
    written = plot_run(tmp_path)
    plots = tmp_path / "plots"
    assert set(written) == {str(plots / "actor.png"), str(plots / "critic.png"), str(plots / "time.png")}
    for path in written:
        data = Path(path).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
    assert written[str(plots / "critic.png")] == [
        "critic absolute error |V - target|",
        "value correlation (V vs target)",
        "critic parse failures",
    ]
    actor = written[str(plots / "actor.png")]
    assert "success" in actor and "fresh starts" in actor and "state store" not in actor


def test_cli_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_run(tmp_path / "run")
    assert main(["plot", str(tmp_path / "run"), "--out", str(tmp_path / "pngs")]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "pngs" / "critic.png") in out
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err
