"""Console and summary formatting of a run: one line per update, and the end-of-run summary.

:func:`console_line` is what ``tempo-rl train`` prints after each update; :func:`summarize` reads
``metrics.jsonl`` (through :func:`tempo_rl.training.metrics.read_metrics`, which skips a torn last line) into the
end-of-run summary that ``summary.json`` holds, and :func:`format_summary` prints it. :func:`summary_json`
serialises a summary as strict JSON: an undefined figure (NaN, e.g. a correlation over fewer than two points)
is written as ``null``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tempo_rl.training.metrics import json_safe, read_metrics
from tempo_rl.training.metrics import nanmean as _nanmean

__all__ = ["console_line", "format_summary", "summarize", "summary_json"]


_CONSOLE_KEYS = (
    ("critic/abs_error_mean", "critic_err"),
    ("critic/parse_failure_rate", "parse_fail"),
    ("critic/value_corr", "v_corr"),
    ("warmup/success_rate", "warm_succ"),
    ("actor/terminal_won_rate", "won"),
    ("actor/degenerate_group_rate", "degen"),
    ("td/reused_states", "reused"),
    ("td/fresh_states", "fresh"),
    ("store/size", "store"),
    ("eval/success_rate", "EVAL_SUCC"),
    ("warmstart/loss_last", "ws_loss"),
    ("time/update_seconds", "sec"),
)


def console_line(step: int, metrics: Mapping[str, float]) -> str:
    """One short console line per update."""
    phase = {0.0: "warm-up", 1.0: "TD", 2.0: "GRPO", 3.0: "GiGPO"}.get(
        float(metrics.get("train/phase", -1.0)), "start"
    )
    parts = [f"[{step:>3}] {phase:<7}"]
    for key, short in _CONSOLE_KEYS:
        value = metrics.get(key)
        if isinstance(value, int | float) and not math.isnan(value):
            parts.append(f"{short}={value:.3g}")
    if metrics.get("tempo/handover") == 1.0:
        reading = float(metrics.get("tempo/handover_reading", math.nan))
        why = (
            "the warm-up cap"
            if metrics.get("tempo/handover_at_cap") == 1.0
            else f"the critic's reading {reading:.3g} reached the gate"
        )
        parts.append(f"| hands over to TD: {why}")
    return " ".join(parts)


def _metric(record: Mapping[str, Any], key: str) -> float:
    value = record.get(key)
    if value is None and isinstance(record.get("metrics"), Mapping):
        value = record["metrics"].get(key)
    return float(value) if isinstance(value, int | float) else math.nan


def summarize(metrics_path: Path) -> dict[str, Any]:
    """The end-of-run summary from ``metrics.jsonl``: critic error first vs last warm-up update, the correlation
    of its estimates with their targets (per warm-up update; TD mean, NaN-skipping), the TD
    success curve (eval success where evaluated, else the terminal-won rate of TD branches), states reused."""
    records = read_metrics(metrics_path) if Path(metrics_path).exists() else []
    warm = [r for r in records if _metric(r, "train/phase") == 0.0]
    td = [r for r in records if _metric(r, "train/phase") == 1.0]
    grpo = [r for r in records if _metric(r, "train/phase") in (2.0, 3.0)]  # GRPO's or GiGPO's batches
    err = [_metric(r, "critic/abs_error_mean") for r in warm]
    eval_records = [r for r in records if not math.isnan(_metric(r, "eval/success_rate"))]
    evals = [(int(r.get("step", 0)), _metric(r, "eval/success_rate")) for r in eval_records]
    return {
        "updates": len(warm) + len(td) + len(grpo),
        "warmup_updates": len(warm),
        "td_updates": len(td),
        "grpo_updates": len(grpo),
        "grpo_success_rate": [_metric(r, "grpo/success_rate") for r in grpo],
        "critic_abs_error_first_warmup": err[0] if err else math.nan,
        "critic_abs_error_last_warmup": err[-1] if err else math.nan,
        "critic_abs_error_warmup": err,
        "critic_abs_error_td_last": _metric(td[-1], "critic/abs_error_mean") if td else math.nan,
        "critic_value_corr_warmup": [_metric(r, "critic/value_corr") for r in warm],
        "critic_value_corr_td_mean": _nanmean([_metric(r, "critic/value_corr") for r in td]),
        "td_terminal_won_rate": [_metric(r, "actor/terminal_won_rate") for r in td],
        "eval_success": evals,
        "eval_games": _metric(eval_records[-1], "eval/episodes") if eval_records else math.nan,
        "eval_success_first": evals[0][1] if evals else math.nan,
        "eval_success_last": evals[-1][1] if evals else math.nan,
        "states_reused_total": _metric(td[-1], "td/reused_states_total") if td else 0.0,
        "store_size": _metric(records[-1], "store/size") if records else math.nan,
    }


def format_summary(summary: Mapping[str, Any]) -> str:
    """A short human-readable end-of-run summary."""

    def f(x: Any) -> str:
        return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"

    lines = [
        "== tempo-rl run summary ==",
        f"updates: {summary.get('updates')} ({summary.get('warmup_updates')} warm-up, {summary.get('td_updates')} TD, "
        f"{summary.get('grpo_updates')} GRPO)",
        f"critic abs error, warm-up: first {f(summary.get('critic_abs_error_first_warmup'))} -> last "
        f"{f(summary.get('critic_abs_error_last_warmup'))}; last TD {f(summary.get('critic_abs_error_td_last'))}",
    ]
    err = summary.get("critic_abs_error_warmup") or []
    if err:
        lines.append("critic abs error per warm-up update: " + " ".join(f(x) for x in err))
    corr = summary.get("critic_value_corr_warmup") or []
    if corr:
        blocks = [_nanmean(corr[i : i + 5]) for i in range(0, len(corr), 5)]
        lines.append(
            "critic value correlation with its targets, warm-up, mean per 5 updates: "
            + " ".join(f(x) for x in blocks)
            + f"; TD mean {f(summary.get('critic_value_corr_td_mean'))}"
        )
    evals = summary.get("eval_success") or []
    if evals:
        games = summary.get("eval_games")
        n = f"{games:.0f}" if isinstance(games, int | float) and not math.isnan(games) else "?"
        first, last = evals[0][1], evals[-1][1]
        lines.append(
            f"actor eval success on {n} held-out games, by updates done (u0 = after the warm start): "
            + ", ".join(f"u{s}={v:.2f}" for s, v in evals)
            + f"; first {first:.2f} -> last {last:.2f} ({last - first:+.2f})"
        )
    won = summary.get("td_terminal_won_rate") or []
    if won:
        lines.append("TD branch success: " + " ".join(f(x) for x in won))
    grpo = summary.get("grpo_success_rate") or []
    if grpo:
        lines.append("GRPO episode success: " + " ".join(f(x) for x in grpo))
    lines.append(
        f"stored states restored and reused in TD: {f(summary.get('states_reused_total'))}; "
        f"store size {f(summary.get('store_size'))}"
    )
    return "\n".join(lines)


def summary_json(summary: Mapping[str, Any]) -> str:
    """``summary`` as strict JSON text (``null`` for an undefined figure, never ``NaN``)."""
    return json.dumps(json_safe(summary), indent=1, allow_nan=False) + "\n"
