"""Metrics: always ``metrics.jsonl`` in the run directory; optionally SwanLab and W&B; a console progress bar.

Every :meth:`MetricsLogger.log` call appends one JSON object ``{"step": int, "time": unix seconds, key: value,
...}`` to ``run_dir/metrics.jsonl`` and flushes + fsyncs it, so the file is complete up to the last logged
step whatever kills the process. Keys are slash-namespaced (``critic/abs_error_mean``, ``time/env_seconds``).
Values are floats; NaN or inf (e.g. a correlation over fewer than two points, undefined this step) is
written as ``null`` so the file stays strict JSON, and read back as NaN by :func:`read_metrics`.

Resume: ``MetricsLogger(run_dir, resume_from_step=k)`` first drops every record with ``step > k`` (the steps a
killed run logged after its last checkpoint, which the resumed run will redo) and any torn last line, so no
step appears twice.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tempo_rl._optional import require

__all__ = ["METRICS_FILE", "MetricsLogger", "ProgressBar", "read_metrics"]

#: The metrics file name inside a run directory.
METRICS_FILE = "metrics.jsonl"


def _as_float(key: str, value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        item = value.item()
        if isinstance(item, numbers.Real):
            return float(item)
    raise TypeError(f"metric {key!r} must be a real number, got {type(value).__name__} ({value!r})")


def read_metrics(path: Path | str) -> list[dict[str, float]]:
    """The records of a ``metrics.jsonl`` (or of ``run_dir/metrics.jsonl``), ``null`` read as NaN.

    A torn last line (a process killed mid-write) is skipped; a malformed line elsewhere raises ValueError.
    """
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no metrics file at {path}; is this a tempo-rl run directory?")
    lines = path.read_text(encoding="utf-8").splitlines()
    records: list[dict[str, float]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1:
                break  # torn final write
            raise ValueError(f"{path}:{i + 1} is not valid JSON: {exc}") from exc
        records.append({k: (math.nan if v is None else v) for k, v in raw.items()})
    return records


class ProgressBar:
    """A console progress bar over ``total`` steps: tqdm when installed, else rich, else plain lines."""

    def __init__(self, total: int, desc: str = "updates", *, enabled: bool = True) -> None:
        self.total = total
        self.desc = desc
        self.n = 0
        self._bar: Any = None
        self._rich: Any = None
        self._task: Any = None
        self.enabled = enabled
        if not enabled:
            return
        try:
            tqdm = require("tqdm", "progress").tqdm
            self._bar = tqdm(total=total, desc=desc, dynamic_ncols=True, file=sys.stderr)
        except ImportError:
            try:
                progress = require("rich.progress", "progress", package="rich")
                self._rich = progress.Progress(transient=False)
                self._task = self._rich.add_task(desc, total=total)
                self._rich.start()
            except ImportError:
                self._rich = None

    def update(self, n: int = 1, postfix: Mapping[str, float] | None = None) -> None:
        """Advance by ``n`` steps and show ``postfix`` figures next to the bar."""
        self.n += n
        if not self.enabled:
            return
        shown = {k: f"{v:.3g}" for k, v in (postfix or {}).items()}
        if self._bar is not None:
            self._bar.update(n)
            if shown:
                self._bar.set_postfix(shown, refresh=False)
        elif self._rich is not None:
            self._rich.update(
                self._task, advance=n, description=f"{self.desc} {shown}" if shown else self.desc
            )
        else:
            print(f"{self.desc}: {self.n}/{self.total} {shown}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Finish the bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._rich is not None:
            self._rich.stop()
            self._rich = None


class MetricsLogger:
    """Writes metrics to ``run_dir/metrics.jsonl`` and forwards them to SwanLab / W&B when asked.

    Args:
        run_dir: the run directory (created if missing).
        swanlab: also log to SwanLab (needs ``pip install 'tempo-rl[swanlab]'``).
        wandb: also log to Weights & Biases (needs ``pip install 'tempo-rl[wandb]'``).
        project: the SwanLab / W&B project name (default ``"tempo-rl"``).
        console: show progress bars from :meth:`progress` on the console.
        config: the run configuration, passed to SwanLab / W&B ``init``.
        run_name: the run's display name (default: the run directory's name).
        resume_from_step: drop records with ``step`` greater than this first (see the module docstring).
    """

    def __init__(
        self,
        run_dir: Path | str,
        *,
        swanlab: bool = False,
        wandb: bool = False,
        project: str | None = None,
        console: bool = True,
        config: Mapping[str, Any] | None = None,
        run_name: str | None = None,
        resume_from_step: int | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.console = console
        if resume_from_step is not None and self.path.exists():
            self._truncate_after(resume_from_step)
        self._file: Any = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
        self._sinks: list[tuple[str, Any]] = []
        name = run_name or self.run_dir.name
        project = project or "tempo-rl"
        if swanlab:
            module = require("swanlab", "swanlab")
            module.init(project=project, experiment_name=name, config=dict(config or {}))
            self._sinks.append(("swanlab", module))
        if wandb:
            module = require("wandb", "wandb")
            module.init(project=project, name=name, config=dict(config or {}), dir=str(self.run_dir))
            self._sinks.append(("wandb", module))

    def _truncate_after(self, step: int) -> None:
        kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= step]
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for record in kept:
                fh.write(_dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Append ``metrics`` at ``step`` to metrics.jsonl (flushed + fsynced) and forward them to sinks."""
        if self._file is None:
            raise RuntimeError("the MetricsLogger is closed")
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        values: dict[str, float] = {}
        for key, value in metrics.items():
            if not isinstance(key, str) or not key or key in ("step", "time"):
                raise ValueError(f"metric keys must be non-empty str other than 'step'/'time', got {key!r}")
            values[key] = _as_float(key, value)
        record: dict[str, float] = {"step": int(step), "time": time.time(), **values}
        self._file.write(_dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        finite = {k: v for k, v in values.items() if math.isfinite(v)}
        for _, module in self._sinks:
            module.log(finite, step=int(step))

    @contextlib.contextmanager
    def progress(self, total: int, desc: str = "updates") -> Iterator[ProgressBar]:
        """A console progress bar over ``total`` steps (silent when ``console=False``)."""
        bar = ProgressBar(total, desc, enabled=self.console)
        try:
            yield bar
        finally:
            bar.close()

    def close(self) -> None:
        """Close the file and finish the SwanLab / W&B runs (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        for _, module in self._sinks:
            module.finish()
        self._sinks = []

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _dumps(record: Mapping[str, float]) -> str:
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
    return json.dumps(clean, separators=(",", ":"), allow_nan=False)
