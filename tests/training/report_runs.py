"""Run directories for the report tests, written by the real trainer and the real run-directory writers.

:func:`scripted_run_dir` trains the scripted KeyDoor actor and oracle-like critic of ``trainer_doubles`` (no
model, deterministic) for one warm-up update and three TD updates, through :class:`MetricsLogger` and
:class:`JsonlWriter` exactly as ``train_run`` writes ``metrics.jsonl`` and ``trajectories.jsonl``, with the
store in ``store.sqlite``, the config in ``config.toml`` and a ``summary.json``: a finished run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from trainer_doubles import scripted_components, tiny_config

from tempo_rl.training.metrics import MetricsLogger
from tempo_rl.training.rundir import JsonlWriter
from tempo_rl.training.summary import summarize, summary_json
from tempo_rl.training.tempo import TempoTrainer

SCRIPTED = ("tempo.warmup_updates=1", "tempo.td_updates=3", "tempo.fresh_share=0.5", "run.seed=3")


def scripted_run_dir(run_dir: Path) -> Path:
    """Train the scripted run into ``run_dir`` (created) and return it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = tiny_config(*SCRIPTED)
    (run_dir / "config.toml").write_text(cfg.to_toml())
    comps, _sampler, _training = scripted_components(
        cfg, store_path=run_dir / "store.sqlite", p_right=0.5, undecided=0.5
    )
    logger = MetricsLogger(run_dir, console=False)
    writer = JsonlWriter(run_dir / "trajectories.jsonl")
    trainer = TempoTrainer(cfg, comps, log=logger.log, write_trajectories=writer.write)
    try:
        trainer.train()
    finally:
        logger.close()
        writer.close()
        comps.pool.close()
        comps.store.close()
    summary = summarize(run_dir / "metrics.jsonl")
    summary["updates_done"] = trainer.state.update
    (run_dir / "summary.json").write_text(summary_json(summary))
    return run_dir


def records(run_dir: Path) -> list[dict[str, Any]]:
    """The trajectory records of a run directory (every line whole)."""
    text = (run_dir / "trajectories.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def killed_copy(run_dir: Path, dest: Path) -> Path:
    """A copy of ``run_dir`` as a run killed in its last TD update leaves it: no summary.json, the last update's
    metrics line missing and its trajectory file cut in the middle of a line."""
    shutil.copytree(run_dir, dest)
    (dest / "summary.json").unlink()
    metrics = (dest / "metrics.jsonl").read_text().splitlines(keepends=True)
    (dest / "metrics.jsonl").write_text("".join(metrics[:-1]))
    data = (dest / "trajectories.jsonl").read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1  # start of the last line
    (dest / "trajectories.jsonl").write_bytes(data[: last + (len(data) - last) // 2])
    return dest
