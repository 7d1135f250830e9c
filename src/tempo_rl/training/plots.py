"""PNG plots of a run's ``metrics.jsonl``: actor curves, critic curves and the time split.

Each figure is a grid of panels; a panel plots every listed metric that the run logged (x = update step,
NaN / missing points skipped, markers so that sparse series such as evaluations stay visible). Panels with no
data are left out, and a figure with no panel is not written. matplotlib is imported lazily (the ``plot``
extra) and drawn with the Agg canvas, so no display and no global pyplot state are needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempo_rl._optional import require
from tempo_rl.training.metrics import json_lines
from tempo_rl.training.rundir import METRICS_FILE

__all__ = [
    "ACTOR_PANELS",
    "CRITIC_PANELS",
    "MetricsFileError",
    "Panel",
    "load_metrics",
    "panel_series",
    "plot_metrics",
    "plot_run",
    "time_panels",
]


@dataclass(frozen=True)
class Panel:
    """One subplot: a title, the metric keys to draw, and the y-axis label."""

    title: str
    keys: tuple[str, ...]
    ylabel: str = ""


CRITIC_PANELS: tuple[Panel, ...] = (
    Panel("critic absolute error |V - target|", ("critic/abs_error_mean",), "mean abs error"),
    Panel("value correlation (V vs target)", ("critic/value_corr",), "Pearson r"),
    Panel(
        "critic parse failures",
        ("critic/parse_failure_rate", "critic/endpoint_parse_failure_rate", "critic/prompt_too_long_rate"),
        "fraction of samples",
    ),
    Panel(
        "values and targets",
        (
            "critic/mean_estimate_mean",
            "critic/endpoint_value_mean",
            "target/mc_return_mean",
            "actor/value_target_mean",
        ),
        "value",
    ),
)

ACTOR_PANELS: tuple[Panel, ...] = (
    Panel(
        "success",
        (
            "warmup/success_rate",
            "actor/terminal_won_rate",
            "eval/success_rate",
            "grpo/success_rate",
        ),
        "success rate",
    ),
    Panel(
        "degenerate groups (all equal returns)",
        ("actor/degenerate_group_rate", "critic/degenerate_group_rate"),
        "rate",
    ),
    Panel("fresh starts", ("td/fresh_share",), "share of start states"),
    Panel("state store", ("td/store_size", "store/size", "td/reused_states", "td/new_endpoints"), "states"),
    Panel(
        "segment reward and return",
        ("actor/segment_reward_mean", "actor/return_mean", "eval/return_mean"),
        "",
    ),
    Panel("episode steps", ("warmup/steps_mean", "eval/steps_mean", "grpo/steps_mean"), "steps"),
)


class MetricsFileError(ValueError):
    """A ``metrics.jsonl`` that is not what a run writes: not UTF-8 text, a line in the middle that is not a
    JSON object, a ``step`` that is not a whole number, or a metric that is not a number. The message names the
    file, the line and the fix."""


_DAMAGED_FIX = "the file is damaged or is not a tempo-rl metrics file: restore it from a copy of the run"


def load_metrics(path: Path | str) -> list[dict[str, float]]:
    """The records of a run's ``metrics.jsonl`` (``path`` is the file or its run directory), checked line by
    line, ``null`` read as NaN.

    Every record must be a JSON object whose ``step`` is a whole number >= 0 and whose other values are numbers
    (``null`` / ``NaN`` included), as :class:`~tempo_rl.training.metrics.MetricsLogger` writes them. A last line
    that is not JSON at all was cut mid-write (a killed run) and is skipped.

    Raises:
        FileNotFoundError: there is no metrics file (the message says what to pass instead).
        MetricsFileError: the file is not UTF-8 text or a record breaks the rules above (file, line and fix in
            the message).
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"no {METRICS_FILE} at {path}; pass the run directory of a tempo-rl run (its run.run_dir)"
        )
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        raise MetricsFileError(
            f"{path}:{line_no} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); {_DAMAGED_FIX}"
        ) from None
    return [
        _checked_record(raw, where)
        for where, raw in json_lines(
            path, text, lambda message: MetricsFileError(f"{message}; {_DAMAGED_FIX}")
        )
    ]


def _checked_record(raw: Any, where: str) -> dict[str, float]:
    """One metrics record checked against what a run writes (see :func:`load_metrics`)."""
    if not isinstance(raw, dict):
        raise MetricsFileError(f"{where} is a JSON {type(raw).__name__}, not an object; {_DAMAGED_FIX}")
    step = raw.get("step")
    if isinstance(step, bool) or not isinstance(step, int | float) or step != step or step < 0 or step % 1:
        raise MetricsFileError(f"{where}: 'step' is {step!r}, not a whole number >= 0; {_DAMAGED_FIX}")
    record: dict[str, float] = {}
    for key, value in raw.items():
        if value is None:
            record[key] = math.nan
        elif isinstance(value, int | float) and not isinstance(value, bool):
            record[key] = value
        else:
            raise MetricsFileError(f"{where}: {key!r} is {value!r}, not a number; {_DAMAGED_FIX}")
    record["step"] = int(step)
    return record


def _series(records: Sequence[dict[str, float]], key: str) -> tuple[list[float], list[float]]:
    """``(update steps, values)`` of one metric: its finite numeric values, in record order."""
    xs, ys = [], []
    for record in records:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            xs.append(float(record["step"]))
            ys.append(float(value))
    return xs, ys


def panel_series(
    records: Sequence[dict[str, float]], panel: Panel
) -> list[tuple[str, list[float], list[float]]]:
    """``(key, steps, values)`` of each of the panel's metrics that has at least one finite value."""
    series = [(key, *_series(records, key)) for key in panel.keys]
    return [s for s in series if s[1]]


def time_panels(records: Sequence[dict[str, float]]) -> tuple[Panel, ...]:
    """The time-split panel: every ``time/*`` metric the run logged (none: no panel)."""
    time_keys = sorted({k for r in records for k in r if k.startswith("time/")})
    return (Panel("time split", tuple(time_keys), "seconds"),) if time_keys else ()


def plot_metrics(
    records: Sequence[dict[str, float]], panels: Sequence[Panel], path: Path, title: str
) -> list[str]:
    """Draw the panels that have data into one PNG at ``path``; returns the titles drawn (none: no file)."""
    drawable = [(p, panel_series(records, p)) for p in panels]
    drawable = [(p, series) for p, series in drawable if series]
    if not drawable:
        return []
    require("matplotlib", "plot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    cols = 2 if len(drawable) > 1 else 1
    rows = -(-len(drawable) // cols)
    fig = Figure(figsize=(6.0 * cols, 3.4 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(title)
    for i, (panel, series) in enumerate(drawable):
        ax: Any = fig.add_subplot(rows, cols, i + 1)
        for key, xs, ys in series:
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=key)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel("update step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if panel.ylabel:
            ax.set_ylabel(panel.ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return [panel.title for panel, _ in drawable]


def plot_run(run_dir: Path | str, out_dir: Path | str | None = None) -> dict[str, list[str]]:
    """Write ``actor.png``, ``critic.png`` and ``time.png`` for a run; returns ``{png path: panel titles}``.

    Args:
        run_dir: a run directory holding ``metrics.jsonl``.
        out_dir: where to write the PNGs (default ``run_dir/plots``).

    Raises:
        FileNotFoundError: no ``metrics.jsonl`` in ``run_dir``.
        MetricsFileError: the file is damaged (see :func:`load_metrics`).
        ValueError: the file holds no record.
    """
    run_dir = Path(run_dir)
    records = load_metrics(run_dir)
    if not records:
        raise ValueError(f"{run_dir}/metrics.jsonl holds no records yet; train for at least one update first")
    out = Path(out_dir) if out_dir is not None else run_dir / "plots"
    figures = {
        "actor.png": (ACTOR_PANELS, f"actor: {run_dir.name}"),
        "critic.png": (CRITIC_PANELS, f"critic: {run_dir.name}"),
        "time.png": (time_panels(records), "time"),
    }
    written: dict[str, list[str]] = {}
    for name, (panels, title) in figures.items():
        drawn = plot_metrics(records, panels, out / name, title)
        if drawn:
            written[str(out / name)] = drawn
    return written
