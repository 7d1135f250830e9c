"""The trainer RNG across evaluations and checkpoints.

Evaluation samples with a seed of its own (``MacroStepTrainer.eval_seed``: a function of ``run.seed`` and the
number of updates done), so how often a run evaluates leaves its training samples unchanged. A checkpoint taken
outside an update (after the warm start) must still hold the live RNG, or a run resumed from it would reuse the
warm start's draws and diverge from an uninterrupted run (review H12).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from test_train_local import _actions, _config_text, _learning_metrics, _metrics

from tempo_rl.training.checkpoint import latest_checkpoint
from tempo_rl.training.config import load_config
from tempo_rl.training.run import train_run


def _run(tmp_path: Path, name: str, text: str) -> Path:
    cfg_file = tmp_path / f"{name}.toml"
    cfg_file.write_text(text)
    run_dir = tmp_path / name
    train_run(run_dir, load_config(cfg_file), console=False)
    return run_dir


@pytest.mark.slow
def test_evaluating_every_update_leaves_the_training_samples_unchanged(tmp_path: Path) -> None:
    text = _config_text(warmup=1, td=2, warmstart=False)
    quiet = _run(tmp_path, "quiet", text)
    evaluated = _run(
        tmp_path,
        "evaluated",
        text.replace("checkpoint_every = 1", "checkpoint_every = 1\neval_every = 1\neval_episodes = 2"),
    )
    with_eval = _metrics(evaluated)
    assert [r["step"] for r in with_eval if "eval/success_rate" in r] == [0, 1, 2, 3]
    assert _actions(evaluated) == _actions(quiet)
    strip = [{k: v for k, v in r.items() if not k.startswith("eval/")} for r in _learning_metrics(evaluated)]
    # the evaluated run logs an extra step-0 record (the initial evaluation) that the quiet run does not
    assert [r for r in strip if set(r) != {"step"}] == [
        r for r in _learning_metrics(quiet) if set(r) != {"step"}
    ]


@pytest.mark.slow
def test_checkpoint_after_the_warm_start_holds_the_advanced_rng_and_evaluation_draws_nothing(
    tmp_path: Path,
) -> None:
    text = _config_text(warmup=0, td=0, warmstart=False).replace(
        "checkpoint_every = 1", "checkpoint_every = 1\neval_every = 1\neval_episodes = 1"
    )
    run_dir = _run(tmp_path, "eval_only", text)
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None
    untouched = dict(
        np.random.Generator(
            np.random.PCG64(load_config(tmp_path / "eval_only.toml").run.seed)
        ).bit_generator.state
    )
    assert ckpt.trainer_state["rng_state"] == untouched  # the initial evaluation drew nothing

    run_dir = _run(tmp_path, "warm", _config_text(warmup=0, td=0, warmstart=True))
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.trainer_state["warmstart_done"] is True
    assert ckpt.trainer_state["rng_state"] != untouched, (
        "checkpoint saved the RNG before the warm start's draws"
    )
