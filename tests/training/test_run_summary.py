"""The end-of-run summary: critic error over the warm-up and the actor's eval success curve, from metrics.jsonl."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from tempo_rl.training.run import format_summary, summarize


def _write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _records() -> list[dict[str, object]]:
    return [
        {"step": 0, "metrics": {"eval/success_rate": 0.25, "eval/episodes": 32.0}},
        {"step": 1, "metrics": {"train/phase": 0.0, "critic/abs_error_mean": 0.5, "critic/value_corr": 0.1}},
        {"step": 2, "metrics": {"train/phase": 0.0, "critic/abs_error_mean": 0.4, "critic/value_corr": 0.6}},
        {
            "step": 3,
            "metrics": {
                "train/phase": 1.0,
                "critic/abs_error_mean": 0.3,
                "critic/value_corr": 0.5,
                "actor/terminal_won_rate": 0.5,
                "td/reused_states_total": 3.0,
                "eval/success_rate": 0.5,
                "eval/episodes": 32.0,
            },
        },
        {
            "step": 4,
            "metrics": {
                "train/phase": 1.0,
                "critic/abs_error_mean": 0.2,
                "critic/value_corr": float("nan"),  # every estimate alike: no correlation, skipped
                "actor/terminal_won_rate": 0.75,
                "td/reused_states_total": 6.0,
                "store/size": 9.0,
                "eval/success_rate": 0.625,
                "eval/episodes": 32.0,
            },
        },
    ]


def test_summary_has_the_eval_curve_and_the_warmup_critic_error(tmp_path: Path) -> None:
    summary = summarize(_write(tmp_path / "metrics.jsonl", _records()))
    assert summary["warmup_updates"] == 2 and summary["td_updates"] == 2
    assert summary["critic_abs_error_warmup"] == [0.5, 0.4]
    assert summary["critic_abs_error_first_warmup"] == 0.5
    assert summary["critic_abs_error_last_warmup"] == 0.4
    assert summary["critic_abs_error_td_last"] == 0.2
    assert summary["eval_success"] == [(0, 0.25), (3, 0.5), (4, 0.625)]
    assert summary["eval_success_first"] == 0.25 and summary["eval_success_last"] == 0.625
    assert summary["eval_games"] == 32.0
    assert summary["states_reused_total"] == 6.0
    assert summary["critic_value_corr_warmup"] == [0.1, 0.6]
    assert summary["critic_value_corr_td_mean"] == 0.5

    text = format_summary(summary)
    assert "critic abs error per warm-up update: 0.500 0.400" in text
    assert "warm-up, mean per 5 updates: 0.350; TD mean 0.500" in text
    assert "actor eval success on 32 held-out games" in text
    assert "u0=0.25, u3=0.50, u4=0.62; first 0.25 -> last 0.62 (+0.38)" in text


def test_summary_without_evaluations(tmp_path: Path) -> None:
    records = [r for r in _records() if "eval/success_rate" not in r["metrics"]]  # type: ignore[operator]
    summary = summarize(_write(tmp_path / "metrics.jsonl", records))
    assert summary["eval_success"] == []
    assert math.isnan(summary["eval_success_first"]) and math.isnan(summary["eval_games"])
    assert "actor eval success" not in format_summary(summary)


def test_summary_skips_a_torn_last_line(tmp_path: Path) -> None:
    """A run killed mid-write leaves half a record: the summary reads what is complete (as read_metrics does)."""
    path = _write(tmp_path / "metrics.jsonl", _records())
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"step": 5, "metrics": {"train/phase": 1.0, "critic/abs_')
    summary = summarize(path)
    assert summary["td_updates"] == 2 and summary["eval_success_last"] == 0.625


def test_summary_json_is_strict_with_null_for_undefined_figures(tmp_path: Path) -> None:
    from tempo_rl.training.summary import summary_json

    records = [r for r in _records() if "eval/success_rate" not in r["metrics"]]  # type: ignore[operator]
    summary = summarize(_write(tmp_path / "metrics.jsonl", records))
    summary["numpy"] = np.float32(0.5)
    text = summary_json(summary)
    assert "NaN" not in text

    def refuse(name: str) -> None:
        raise AssertionError(f"not strict JSON: {name}")

    data = json.loads(text, parse_constant=refuse)
    assert data["eval_games"] is None and data["eval_success_first"] is None
    assert data["numpy"] == 0.5 and data["critic_abs_error_warmup"] == [0.5, 0.4]
