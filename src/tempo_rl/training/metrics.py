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
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tempo_rl._optional import require

if TYPE_CHECKING:
    from tempo_rl.critic.base import CriticEstimates
    from tempo_rl.rollout.branches import BranchResult, RolloutStats
    from tempo_rl.signals.td import TDBatch
    from tempo_rl.training.types import EndpointValues, StartState

__all__ = [
    "METRICS_FILE",
    "MetricsLogger",
    "ProgressBar",
    "branch_metrics",
    "critic_metrics",
    "json_lines",
    "json_safe",
    "read_metrics",
    "rollout_metrics",
    "td_metrics",
]

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
    return [
        {k: (math.nan if v is None else v) for k, v in raw.items()}
        for _, raw in json_lines(path, path.read_text(encoding="utf-8"))
    ]


def json_lines(
    path: Path, text: str, error: Callable[[str], Exception] = ValueError
) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` for each non-blank line of ``text``, the JSON-lines content of ``path``; ``where`` is
    ``path:line``. A last line that is not JSON was cut mid-write (a killed process) and is skipped; such a line
    elsewhere raises ``error(message)``, the message naming the file and the line."""
    lines = text.split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        where = f"{path}:{i + 1}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == last:
                return  # torn final write
            raise error(f"{where} is not JSON ({exc.msg})") from None
        yield where, value


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


# ------------------------------------------------------------------------------------------------ update metrics
# What one update reports, as functions of its data. Counts are floats (the JSONL's one value type); rates are
# fractions of the set named in their definition; NaN where that set is empty (undefined, not 0).


def nanmean(values: Sequence[float] | np.ndarray) -> float:
    """The mean of the finite entries of ``values``; NaN when there is none."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else math.nan


def correlation(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation over pairs where both are finite; NaN with < 2 pairs or zero variance."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 2 or a.std() == 0 or b.std() == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])


def critic_metrics(estimates: Sequence[CriticEstimates], targets: Sequence[float]) -> dict[str, float]:
    """Critic metrics over start/boundary states, each with K samples and its target G.

    * ``critic/abs_error_mean``: mean ``|V_k - G|`` over parsed samples (R_max units as the values); for
      estimates with an exact ``expectation`` V, ``|V - G|`` (weighted by K like the samples; for 0/1 answers
      and a 0/1 target it is the expected ``|V_k - G|`` of a draw);
    * ``critic/parse_failure_rate``: unparsed samples / samples (a fraction of samples);
    * ``critic/prompt_too_long_rate``: states whose prompt had to be shortened / states (a fraction of states);
    * ``critic/mean_estimate_mean``: mean over states of the mean parsed estimate (or the ``expectation``);
    * ``critic/value_corr``: Pearson correlation between the per-state mean estimate and G across states;
    * ``critic/states``: how many states.
    """
    errors: list[float] = []
    means: list[float] = []
    samples = failures = too_long = 0
    for est, g in zip(estimates, targets):
        parsed = est.values[np.isfinite(est.values)]
        if (
            est.expectation is not None
        ):  # the critic's value is its exact expectation: count it once per sample
            errors.extend([abs(est.expectation - g)] * est.k)
            means.append(float(est.expectation))
        else:
            errors.extend(np.abs(parsed - g).tolist())
            means.append(float(parsed.mean()) if parsed.size else math.nan)
        samples += est.k
        failures += est.parse_failures
        too_long += int(est.prompt_too_long)
    n = len(estimates)
    return {
        "critic/abs_error_mean": nanmean(errors),
        "critic/parse_failure_rate": failures / samples if samples else math.nan,
        "critic/prompt_too_long_rate": too_long / n if n else math.nan,
        "critic/mean_estimate_mean": nanmean(means),
        "critic/value_corr": correlation(means, list(targets)),
        "critic/states": float(n),
    }


def rollout_metrics(stats: RolloutStats, prefix: str = "rollout") -> dict[str, float]:
    """Tool-call and action validity rates, each a fraction of the turns named in its definition.

    * ``valid_tool_call_rate`` = turns with a readable tool call / turns;
    * ``admissible_action_rate`` = admissible actions / turns with a readable call and a known admissible list;
    * ``valid_action_rate`` = turns with a readable call whose action was admissible / turns with a known list;
    * ``template_restarts`` = chat-template history rewrites (each starts a new training sequence of its branch).
    """
    turns = stats.turns
    return {
        f"{prefix}/turns": float(turns),
        f"{prefix}/valid_tool_call_rate": stats.valid_tool_calls / turns if turns else math.nan,
        f"{prefix}/admissible_action_rate": (
            stats.admissible_actions / stats.admissible_known_valid
            if stats.admissible_known_valid
            else math.nan
        ),
        f"{prefix}/valid_action_rate": (
            stats.admissible_actions / stats.admissible_known if stats.admissible_known else math.nan
        ),
        f"{prefix}/env_errors": float(stats.env_errors),
        f"{prefix}/sampled_tokens": float(stats.sampled_tokens),
        f"{prefix}/template_restarts": float(stats.template_restarts),
    }


def branch_metrics(branches: Sequence[BranchResult], kept: np.ndarray) -> dict[str, float]:
    """How the played branches ended (``actor/*``): each rate is a fraction of all branches; ``kept`` marks
    the branches whose return counts."""
    return {
        "actor/terminal_won_rate": nanmean([b.won for b in branches]),
        "actor/terminated_rate": nanmean([b.terminated for b in branches]),
        "actor/macro_boundary_rate": nanmean([b.end_reason == "macro_boundary" for b in branches]),
        "actor/max_rounds_rate": nanmean([b.end_reason == "max_rounds" for b in branches]),
        "actor/token_budget_rate": nanmean([b.end_reason == "token_budget" for b in branches]),
        "actor/dropped_branches": float(np.sum(~np.asarray(kept, dtype=bool))),
        "actor/env_errors": float(sum(b.end_reason == "error" for b in branches)),
    }


def td_metrics(
    starts: Sequence[StartState],
    results: Sequence[Sequence[BranchResult]],
    batch: TDBatch,
    endpoints: EndpointValues,
) -> dict[str, float]:
    """The actor side of a TD update: starts, branch outcomes, returns and targets, endpoint values.

    ``actor/value_gap_zero_reward`` is the mean, over starts with >= 2 kept, bootstrapped, zero-reward branches,
    of the spread (max - min) of those branches' endpoint values: how much the critic separates branches that
    the env reward alone cannot.
    """
    mask, bootstrap, seg, values = (
        batch.mask,
        endpoints.bootstrap,
        endpoints.segment_rewards,
        endpoints.values,
    )
    valid = np.flatnonzero(mask.any(axis=1))
    gaps = []
    for i in range(len(results)):
        js = np.flatnonzero(mask[i] & bootstrap[i] & (seg[i] == 0.0))
        if len(js) >= 2:
            gaps.append(float(np.ptp(values[i, js])))
    n_fresh = sum(1 for s in starts if s.fresh)
    valued = [values[i, j] for i, j in endpoints.queried if mask[i, j]]
    return {
        "td/fresh_states": float(n_fresh),
        "td/fresh_share": n_fresh / len(starts) if starts else math.nan,
        "td/macro_index_mean": nanmean([s.state.macro_index for s in starts]),
        "td/start_round_mean": nanmean([s.state.snapshot.round_index for s in starts]),
        "actor/segment_reward_mean": nanmean(seg[mask]),
        **branch_metrics([b for row in results for b in row], mask.ravel()),
        "actor/degenerate_group_rate": float(np.mean(batch.degenerate[valid])) if valid.size else math.nan,
        "actor/value_target_mean": nanmean(batch.targets[valid]),
        "actor/value_target_std": float(np.std(batch.targets[valid])) if valid.size else math.nan,
        "actor/value_gap_zero_reward": nanmean(gaps),
        "actor/return_mean": nanmean(batch.returns[mask]),
        "critic/endpoint_value_mean": nanmean(valued),
        "critic/endpoint_parse_failures": float(endpoints.unparsed),
        "critic/endpoint_parse_failure_rate": (
            endpoints.unparsed / len(endpoints.queried) if endpoints.queried else math.nan
        ),
    }


def json_safe(value: Any) -> Any:
    """``value`` made strict-JSON-safe, recursively: every non-finite float (NaN, inf) becomes None (JSON has no
    NaN), numpy scalars and arrays become Python numbers and lists, mapping keys become strings."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
