"""``tempo-rl report``: one self-contained HTML page of what a run did, to look at rather than read.

The page (``RUN_DIR/report.html`` by default) needs no server and no network: it embeds plotly's offline
bundle for the curves and the run's data as one JSON document; a small script of its own draws the rest.

What it shows:

* **curves**: the panels ``tempo-rl plot`` draws (:data:`~tempo_rl.training.plots.ACTOR_PANELS`,
  :data:`~tempo_rl.training.plots.CRITIC_PANELS`, the time split), interactive (zoom, hover);
* **updates**: every update of ``trajectories.jsonl``; each start state (fresh or restored, depth in rounds and
  macro-steps, the policy version that sampled it) expands into its N branches: each turn's action and
  observation (invalid actions marked), ``r_n`` (the segment's summed reward), the endpoint value ``V_hat_n``,
  ``R_n = r_n + V_hat_n``, ``A_n = R_n - G`` and how the branch ended; beside them the critic's K samples on the
  start (completion text, parsed value, reward, advantage) and their target G. Warm-up episodes show their
  boundary states with the Monte Carlo targets ``G_t`` and the critic's samples;
* **quarantined states**: the states whose restore diverged (``store.sqlite``), under the update that
  quarantined them;
* **filters** by phase, update range, game and outcome, and a search over the text;
* a **partial** banner when the run is still running or was stopped before its last update: the page shows
  what is on disk, and a torn last line of a JSONL file (a process killed mid-write) is skipped.

:func:`report_data` is the data the page embeds (plain JSON: non-finite numbers become ``null``);
:func:`write_report` writes the page. plotly is imported lazily (the ``report`` extra).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sqlite3
import tempfile
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tempo_rl._optional import require
from tempo_rl.training.metrics import json_safe
from tempo_rl.training.plots import (
    ACTOR_PANELS,
    CRITIC_PANELS,
    Panel,
    load_metrics,
    panel_series,
    time_panels,
)
from tempo_rl.training.rundir import (
    CONFIG_FILE,
    LOCK_FILE,
    METRICS_FILE,
    STORE_FILE,
    SUMMARY_FILE,
    TRAJECTORIES_FILE,
)

__all__ = [
    "REPORT_FILE",
    "JsonlFile",
    "RunStatus",
    "curve_html",
    "quarantined_states",
    "read_jsonl",
    "render_report",
    "report_data",
    "run_status",
    "write_report",
]

REPORT_FILE = "report.html"

#: metrics shown on each update's summary line (when logged)
UPDATE_METRICS = (
    "warmup/success_rate",
    "actor/terminal_won_rate",
    "grpo/success_rate",
    "critic/abs_error_mean",
    "critic/value_corr",
    "td/fresh_share",
    "td/replay_divergences",
    "store/size",
    "train/policy_version",
)


@dataclass(frozen=True)
class JsonlFile:
    """The records of a JSONL file as far as they can be read.

    Attributes:
        records: the parsed lines, in order.
        torn: the last line was cut mid-write (a killed process) and was skipped.
        missing: the file does not exist.
    """

    records: list[dict[str, Any]]
    torn: bool = False
    missing: bool = False


def read_jsonl(path: Path | str) -> JsonlFile:
    """Read a JSONL file written by a run: a torn last line is skipped (and flagged), a missing file is empty.

    Raises:
        ValueError: a line other than the last is not a JSON object (the file is damaged, not just cut).
    """
    path = Path(path)
    if not path.exists():
        return JsonlFile([], missing=True)
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    records: list[dict[str, Any]] = []
    torn = False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        last = i == len(lines) - 1 or all(not x.strip() for x in lines[i + 1 :])
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if last:
                torn = True
                break
            raise ValueError(
                f"{path}:{i + 1} is not valid JSON ({exc}); only a torn last line can be skipped: the file is "
                "damaged, restore it from a copy of the run"
            ) from exc
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{i + 1} is a JSON {type(record).__name__}, not an object")
        records.append(record)
    return JsonlFile(records, torn=torn)


@dataclass(frozen=True)
class RunStatus:
    """Whether a run directory holds a whole run or part of one.

    Attributes:
        partial: the run is running, or stopped before its last update, or a file was cut.
        reasons: why it is partial (one sentence each; empty when it is complete).
        updates_on_disk: updates logged in ``metrics.jsonl``.
        updates_total: updates the config asks for (None when ``config.toml`` cannot be read).
        running_pid: the pid written in the lock held by a live writer (None when no process holds it).
    """

    partial: bool
    reasons: tuple[str, ...] = ()
    updates_on_disk: int = 0
    updates_total: int | None = None
    running_pid: str | None = None


def _lock_holder(run_dir: Path) -> str | None:
    """The pid in ``RUN_DIR/.lock`` when a process holds that lock (a run is training there), else None."""
    path = run_dir / LOCK_FILE
    if not path.exists():
        return None
    import fcntl

    with open(path, encoding="utf-8") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return fh.read().strip() or "unknown"
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return None


def _config_total(run_dir: Path) -> tuple[int | None, str]:
    """``(updates the config asks for, algorithm)`` from ``config.toml`` (None when it cannot be read)."""
    from tempo_rl.training.config import GrpoConfig, TempoConfig

    try:
        data = tomllib.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None, "tempo"
    algorithm = str(data.get("algorithm", "tempo"))

    def setting(section: str, key: str, model: Any) -> int:
        value = data.get(section, {}).get(key, model.model_fields[key].default)
        return int(value)

    if algorithm in ("grpo", "gigpo"):
        return setting("grpo", "updates", GrpoConfig), algorithm
    return (
        setting("tempo", "warmup_updates", TempoConfig) + setting("tempo", "td_updates", TempoConfig),
        algorithm,
    )


def run_status(
    run_dir: Path | str,
    metrics: Sequence[Mapping[str, Any]],
    *,
    torn: Iterable[str] = (),
) -> RunStatus:
    """Whether ``run_dir`` holds a whole run: a run is complete when no process holds its lock, it wrote
    ``summary.json``, and ``metrics.jsonl`` logs every update its config asks for; ``torn`` names files whose
    last line was cut."""
    run_dir = Path(run_dir)
    steps = [int(m["step"]) for m in metrics if isinstance(m.get("step"), int | float)]
    on_disk = max(steps, default=0)
    total, _ = _config_total(run_dir)
    reasons: list[str] = []
    pid = _lock_holder(run_dir)
    if pid is not None:
        reasons.append(f"the run is still training (pid {pid} holds its lock): this is what is on disk now")
    elif not (run_dir / SUMMARY_FILE).exists():
        reasons.append("there is no summary.json: the run was stopped or killed before it finished")
    if total is not None and on_disk < total:
        reasons.append(f"{on_disk} of the {total} updates the config asks for are on disk")
    reasons.extend(f"the last line of {name} was cut mid-write and is left out" for name in torn)
    return RunStatus(bool(reasons), tuple(reasons), on_disk, total, pid)


def quarantined_states(run_dir: Path | str) -> tuple[list[dict[str, Any]], str | None]:
    """The quarantined states of ``RUN_DIR/store.sqlite`` (opened read-only), oldest first, and a note when the
    store cannot be read (None when it could, or when there is none).

    Each state: ``id``, ``game_id``, ``policy_version``, ``macro_index``, ``parent_id``, ``reason`` (the replay
    error), ``diff`` (expected vs actual observation) and ``quarantined_at`` (Unix seconds)."""
    path = Path(run_dir) / STORE_FILE
    if not path.exists():
        return [], None
    from tempo_rl.training.store import connect_read_only

    try:
        db = connect_read_only(path)
        try:
            rows = db.execute(
                "SELECT id, game_id, policy_version, macro_index, parent_id, reason, diff, quarantined_at "
                "FROM states WHERE quarantined = 1 ORDER BY quarantined_at, seq"
            ).fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        return [], f"{STORE_FILE} could not be read ({exc}): quarantined states are not shown"
    keys = ("id", "game_id", "policy_version", "macro_index", "parent_id", "reason", "diff", "quarantined_at")
    return [dict(zip(keys, row)) for row in rows], None


_START_KEYS = ("start_id", "game_id", "fresh", "start_round", "start_macro_index", "start_policy_version")
#: what a record holds besides its branch: the update, the phase and the start state (its keys and ``start``)
_NOT_BRANCH_KEYS = frozenset({"update", "phase", "start", *_START_KEYS})


def _branch(record: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if k not in _NOT_BRANCH_KEYS}
    rewards = record.get("rewards")
    out["r"] = float(sum(rewards)) if isinstance(rewards, list) else None  # r_n, the segment's reward
    return out


def _group_starts(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One update's records grouped into start states (consecutive records of one start; GRPO records, which
    name no start, are grouped by game)."""
    starts: list[dict[str, Any]] = []
    for record in records:
        key = (record.get("start_id"), record.get("game_id"))
        new_start = not starts or starts[-1]["_key"] != key or "start" in record
        if new_start:
            start = {k: record.get(k) for k in _START_KEYS}
            start["_key"] = key
            start["phase"] = record.get("phase")
            start["policy_version"] = record.get("policy_version")
            start["start"] = record.get("start")
            start["branches"] = []
            starts.append(start)
        starts[-1]["branches"].append(_branch(record))
    for start in starts:
        del start["_key"]
    return starts


def _update_of(quarantined_at: float | None, metrics: Sequence[Mapping[str, Any]]) -> int | None:
    """The 0-based update during which a state was quarantined: update u is logged (step u + 1) at the first
    metrics time at or after the quarantine; None when no logged update ends after it (the one in progress)."""
    if quarantined_at is None:
        return None
    for m in metrics:
        t, step = m.get("time"), m.get("step")
        if isinstance(t, int | float) and isinstance(step, int | float) and step >= 1 and t >= quarantined_at:
            return int(step) - 1
    return None


def report_data(run_dir: Path | str) -> dict[str, Any]:
    """Everything the page shows, as plain JSON (non-finite numbers as null).

    Keys: ``run`` (name, algorithm, :class:`RunStatus` fields, notes), ``games`` (sorted game ids), ``updates``
    (per update with records: ``update``, ``phase``, ``metrics`` (:data:`UPDATE_METRICS` of its step),
    ``quarantined``, ``starts``; each start: its id, game, ``fresh``, depth ``start_round`` and
    ``start_macro_index``, ``start_policy_version``, the sampling ``policy_version``, ``start`` (task, history,
    observation, critic samples, when recorded) and ``branches``: each with its turns, ``r`` (= r_n),
    ``endpoint_value``, ``return`` (R_n), ``advantage`` (A_n) and end), and ``quarantined_unplaced`` (quarantined
    states no logged update ends after).

    Raises:
        FileNotFoundError: ``run_dir`` holds neither ``metrics.jsonl`` nor ``trajectories.jsonl``.
        ValueError: one of them is damaged (:class:`~tempo_rl.training.plots.MetricsFileError` for the
            metrics); the message names the file, the line and the fix.
    """
    run_dir = Path(run_dir)
    if (run_dir / METRICS_FILE).exists():
        load_metrics(run_dir / METRICS_FILE)  # every record checked: file, line and fix on a damaged one
    metrics_file = read_jsonl(run_dir / METRICS_FILE)
    traj_file = read_jsonl(run_dir / TRAJECTORIES_FILE)
    for i, record in enumerate(traj_file.records):
        update = record.get("update", -1)
        if isinstance(update, bool) or not isinstance(update, int):
            raise ValueError(
                f"{run_dir / TRAJECTORIES_FILE}: record {i + 1} has 'update' {update!r}, not a whole number; the "
                "file is damaged or is not a tempo-rl trajectories file: restore it from a copy of the run"
            )
    if metrics_file.missing and traj_file.missing:
        raise FileNotFoundError(
            f"{run_dir} holds neither {METRICS_FILE} nor {TRAJECTORIES_FILE}: is it a tempo-rl run directory "
            "(the run.run_dir of a `tempo-rl train` config)?"
        )
    metrics = metrics_file.records
    torn = [n for n, f in ((METRICS_FILE, metrics_file), (TRAJECTORIES_FILE, traj_file)) if f.torn]
    status = run_status(run_dir, metrics, torn=torn)
    _, algorithm = _config_total(run_dir)
    notes: list[str] = []
    if traj_file.missing:
        notes.append(
            f"there is no {TRAJECTORIES_FILE} (run.save_trajectories = false?): only curves are shown"
        )
    quarantined, store_note = quarantined_states(run_dir)
    if store_note:
        notes.append(store_note)

    by_step = {int(m["step"]): m for m in metrics if isinstance(m.get("step"), int | float)}
    by_update: dict[int, list[dict[str, Any]]] = {}
    for record in traj_file.records:
        by_update.setdefault(int(record.get("update", -1)), []).append(record)
    placed: dict[int, list[dict[str, Any]]] = {}
    unplaced: list[dict[str, Any]] = []
    for q in quarantined:
        u = _update_of(q.get("quarantined_at"), metrics)
        if u is None:
            unplaced.append(q)
        else:
            placed.setdefault(u, []).append(q)
            by_update.setdefault(u, [])
    updates = []
    for u in sorted(by_update):
        records = by_update[u]
        step = by_step.get(u + 1, {})
        phase = (
            records[0].get("phase")
            if records
            else {0.0: "warmup", 1.0: "td", 2.0: "grpo", 3.0: "gigpo"}.get(step.get("train/phase", -1.0), "?")
        )
        updates.append(
            {
                "update": u,
                "phase": phase,
                "metrics": {k: step[k] for k in UPDATE_METRICS if k in step},
                "quarantined": placed.get(u, []),
                "starts": _group_starts(records),
            }
        )
    games = sorted({str(r.get("game_id")) for r in traj_file.records if r.get("game_id") is not None})
    return json_safe(
        {
            "run": {
                "name": run_dir.resolve().name,
                "algorithm": algorithm,
                "partial": status.partial,
                "reasons": list(status.reasons),
                "updates_on_disk": status.updates_on_disk,
                "updates_total": status.updates_total,
                "records": len(traj_file.records),
                "notes": notes,
            },
            "games": games,
            "updates": updates,
            "quarantined_unplaced": unplaced,
        }
    )


@dataclass(frozen=True)
class _Figure:
    title: str
    panels: tuple[Panel, ...]
    html: list[str] = field(default_factory=list)


def curve_html(metrics: Sequence[Mapping[str, Any]]) -> str:
    """The curves as HTML: one interactive plotly chart per panel that has data (plotly's bundle embedded
    once, before the first chart); an empty string when no panel has data."""
    records = [{k: (math.nan if v is None else v) for k, v in m.items()} for m in metrics if "step" in m]
    figures = [
        _Figure("Actor", ACTOR_PANELS),
        _Figure("Critic", CRITIC_PANELS),
        _Figure("Time", time_panels(records)),
    ]
    drawable = [(f, p, panel_series(records, p)) for f in figures for p in f.panels]
    drawable = [d for d in drawable if d[2]]
    if not drawable:
        return ""
    require("plotly", "report")
    import plotly.graph_objects as go

    for n, (fig_group, panel, series) in enumerate(drawable):
        fig = go.Figure()
        span = max(max(xs) for _, xs, _ in series) - min(min(xs) for _, xs, _ in series)
        for key, xs, ys in series:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=key, marker={"size": 4}))
        fig.update_layout(
            title={"text": panel.title, "font": {"size": 13}},
            height=300,
            margin={"l": 50, "r": 10, "t": 40, "b": 40},
            legend={"font": {"size": 9}, "orientation": "h", "y": -0.25},
            xaxis_title="update step",
            yaxis_title=panel.ylabel,
            template="plotly_white",
        )
        if span <= 10:  # update steps are integers: no tick at 1.5
            fig.update_xaxes(dtick=1)
        fig_group.html.append(
            fig.to_html(
                full_html=False,
                include_plotlyjs=n == 0,
                div_id=f"curve-{n}",
                config={"displaylogo": False, "responsive": True},
            )
        )
    parts = []
    for f in figures:
        if f.html:
            charts = "".join(f'<div class="chart">{h}</div>' for h in f.html)
            parts.append(f'<h3>{f.title}</h3><div class="charts">{charts}</div>')
    return "".join(parts)


def _script_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>`` or ``<!--`` can appear in it)."""
    text = json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def render_report(run_dir: Path | str) -> str:
    """The report page of ``run_dir`` as one HTML string (see the module docstring)."""
    from html import escape

    from tempo_rl.training.report_page import PAGE_CSS, PAGE_JS, PAGE_TEMPLATE

    run_dir = Path(run_dir)
    data = report_data(run_dir)
    curves = curve_html(read_jsonl(run_dir / METRICS_FILE).records)
    if not curves:
        curves = '<p class="note">metrics.jsonl holds none of the plotted metrics yet.</p>'
    parts = {
        "TITLE": escape(f"tempo-rl report: {data['run']['name']}"),
        "CSS": PAGE_CSS,
        "CURVES": curves,
        "DATA": _script_json(data),
        "JS": PAGE_JS,
    }
    # one pass over the template: text inserted from the run is never searched for another placeholder
    return re.sub(r"@(TITLE|CSS|CURVES|DATA|JS)@", lambda m: parts[m.group(1)], PAGE_TEMPLATE)


def write_report(run_dir: Path | str, out: Path | str | None = None) -> Path:
    """Write the report page (default ``RUN_DIR/report.html``) and return its path.

    The page is written to a temporary file beside ``out`` and renamed over it, so a failure leaves neither a
    half-written page nor the temporary file. Only ``out`` is written: the run directory is read, never changed
    (the state store is opened read-only, see :func:`~tempo_rl.training.store.connect_read_only`).

    Raises:
        FileNotFoundError: ``run_dir`` is not a run directory.
        IsADirectoryError: ``out`` is a directory (pass a file path).
        ValueError: a JSONL file of the run is damaged in the middle (not just cut at the end).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a directory; pass the run directory of a tempo-rl run")
    path = Path(out) if out is not None else run_dir / REPORT_FILE
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory; pass a file path such as {path / REPORT_FILE}")
    html = render_report(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(html)
        os.chmod(tmp, 0o644 & ~_umask())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path


def _umask() -> int:
    """The process's file mode creation mask (read without changing it for longer than the call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
