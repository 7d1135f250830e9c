"""Env calls outside the rollouts (the tokenizer corpus, the warm start's demos) are guarded like those inside:
the step deadline holds, a failure is counted and the item dropped, the run goes on."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_helpers import tiny_config

from tempo_rl.envs import register, unregister
from tempo_rl.envs.core import StepResult
from tempo_rl.envs.keydoor import KeyDoorEnv

FAIL_EVERY = 25  # deterministic stand-in for "raises 5% of the time"
_steps = {"n": 0}
_release = threading.Event()


class FlakyKeyDoor(KeyDoorEnv):
    """KeyDoor whose every ``FAIL_EVERY``-th step (counted over all instances) raises."""

    def step(self, action: str) -> StepResult:
        _steps["n"] += 1
        if _steps["n"] % FAIL_EVERY == 0:
            raise RuntimeError("flaky env: step failed")
        return super().step(action)


class HangsOnceKeyDoor(KeyDoorEnv):
    """KeyDoor whose 5th step (over all instances) hangs until released (or 30 s)."""

    def step(self, action: str) -> StepResult:
        _steps["n"] += 1
        if _steps["n"] == 5:
            _release.wait(30)
        return super().step(action)


@pytest.fixture
def envs() -> Iterator[None]:
    _steps["n"] = 0
    _release.clear()
    register("flaky-keydoor", FlakyKeyDoor, overwrite=True)
    register("hangs-once-keydoor", HangsOnceKeyDoor, overwrite=True)
    yield
    _release.set()
    unregister("flaky-keydoor")
    unregister("hangs-once-keydoor")


def test_the_tokenizer_corpus_drops_games_whose_env_raises(
    envs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from tempo_rl.training.run import env_corpus

    config = tiny_config(env={"name": "flaky-keydoor"})
    texts = env_corpus(config, games=6)
    assert texts and texts[-1] == "<value>1.0</value>"
    err = capsys.readouterr().err
    assert "tokenizer-corpus games were dropped after env failures" in err and "flaky env" in err


def test_the_tokenizer_corpus_keeps_the_step_deadline(envs: None) -> None:
    from tempo_rl.training.run import env_corpus

    config = tiny_config(env={"name": "hangs-once-keydoor"}, workers={"step_timeout_s": 1.0})
    start = time.perf_counter()
    texts = env_corpus(config, games=3)
    elapsed = time.perf_counter() - start
    assert texts
    assert elapsed < 15, f"the corpus waited {elapsed:.1f} s on a hung env despite workers.step_timeout_s=1"


@pytest.mark.slow
def test_a_flaky_env_outside_rollouts_does_not_stop_the_run(envs: None, tmp_path: Path) -> None:
    """The issue's run: a flaky env no longer kills the run in the corpus or the warm start, before update 1."""
    pytest.importorskip("torch")
    from tempo_rl.training.metrics import read_metrics
    from tempo_rl.training.run import train_run

    config = tiny_config(
        env={"name": "flaky-keydoor"},
        warmstart={"episodes": 6},
        tempo={"warmup_updates": 1, "td_updates": 0},
    )
    summary = train_run(tmp_path / "run", config, console=False)
    assert summary["updates_done"] == 1
    first = read_metrics(tmp_path / "run")[0]
    assert first["step"] == 0 and first["warmstart/env_failures"] >= 1  # demos dropped and counted


@pytest.mark.slow
def test_warm_start_demos_go_through_the_guarded_path(envs: None, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from tempo_rl.training.run import build_trainer
    from tempo_rl.training.warmstart import warm_start

    config = tiny_config(warmstart={"episodes": 4}, workers={"step_timeout_s": 1.0})
    trainer = build_trainer(config, tmp_path)
    try:
        hanging = tiny_config(env={"name": "hangs-once-keydoor"}).env
        trainer.config = trainer.config.model_copy(update={"env": hanging})
        _steps["n"] = 0
        start = time.perf_counter()
        metrics = warm_start(trainer)
        elapsed = time.perf_counter() - start
    finally:
        trainer.c.pool.close()
        trainer.c.store.close()
    assert metrics["warmstart/env_failures"] == 1.0  # the hung demo, dropped
    assert metrics["warmstart/datums"] >= 3
    assert elapsed < 20, f"the warm start waited {elapsed:.1f} s on a hung env"
