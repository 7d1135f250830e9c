"""Smaller run-directory gaps: --overwrite, Ctrl-C, concurrent config writes, eval of an untrained run, restore
crashes that are not divergences."""

from __future__ import annotations

import argparse
import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from reliability_helpers import tiny_config

from tempo_rl.cli import main
from tempo_rl.training.checkpoint import CHECKPOINT_DIR, atomic_write_text, latest_checkpoint, save_checkpoint

# ------------------------------------------------------------------------------------------------ --overwrite


def test_overwrite_moves_the_old_run_aside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tempo_rl.training import run as run_module

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text("# the old run\n")
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    started: list[Path] = []

    def fake_build(config: Any, path: Path, **kwargs: Any) -> Any:
        started.append(path)
        raise KeyboardInterrupt  # stop right after the setup; the point is what happened to the old run

    monkeypatch.setattr(run_module, "build_trainer", fake_build)
    code = main(["train", "--run-dir", str(run_dir), "--overwrite", "--quiet"])
    assert code == 130 and started == [run_dir]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.replaced-")]
    assert len(aside) == 1
    assert (aside[0] / "config.toml").read_text() == "# the old run\n"  # moved, not deleted
    assert (aside[0] / "metrics.jsonl").read_text() == '{"step": 0}\n'
    assert "# the old run" not in (run_dir / "config.toml").read_text()  # the new run's config


def test_overwrite_refuses_together_with_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.toml").write_text("")
    assert main(["train", "--resume", str(tmp_path), "--overwrite"]) == 2
    assert "--overwrite starts a new run" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ Ctrl-C


class InterruptedClient:
    def save_state(self, name: str) -> str:
        raise KeyboardInterrupt


def test_ctrl_c_during_a_checkpoint_leaves_no_tmp_directory(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(
            tmp_path, update=1, trainer_state={}, training_client=InterruptedClient(), store=None, offsets={}
        )
    assert list((tmp_path / CHECKPOINT_DIR).iterdir()) == []
    assert latest_checkpoint(tmp_path) is None


def test_ctrl_c_exits_130_with_a_resume_hint_and_no_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tempo_rl.training import run as run_module

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "train_run", interrupted)
    assert main(["train", "--run-dir", str(tmp_path / "run"), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and f"tempo-rl train --resume {tmp_path / 'run'}" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


# ------------------------------------------------------------------------------------------------ writers


def test_concurrent_atomic_writes_of_one_file_never_collide(tmp_path: Path) -> None:
    """Two runs started into one directory at once both write config.toml: neither may lose its tmp file."""
    target = tmp_path / "config.toml"
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def writer(text: str) -> None:
        barrier.wait()
        try:
            for _ in range(200):
                atomic_write_text(target, text)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("a\n" * 2000, "b\n" * 2000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.read_text() in ("a\n" * 2000, "b\n" * 2000)
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]


# ------------------------------------------------------------------------------------------------ eval


def _eval_parser() -> argparse.ArgumentParser:
    from tempo_rl.cli import evaluate as eval_cli

    parser = argparse.ArgumentParser()
    eval_cli.add_parser(parser.add_subparsers())
    return parser


def test_eval_takes_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "my_eval_env_module.py").write_text(
        "from tempo_rl.envs import register\n"
        "from tempo_rl.envs.keydoor import KeyDoorEnv\n"
        "register('my-eval-keydoor', KeyDoorEnv, overwrite=True)\n"
    )
    monkeypatch.chdir(tmp_path)
    from tempo_rl.envs import available, unregister

    try:
        args = _eval_parser().parse_args(
            ["eval", str(tmp_path / "nowhere"), "--import", "my_eval_env_module"]
        )
        assert args.func(args) == 2  # no run there; but the import ran first
        assert "my-eval-keydoor" in available()
        bad = _eval_parser().parse_args(["eval", str(tmp_path), "--import", "no_such_module_for_eval"])
        assert bad.func(bad) == 2 and "no_such_module_for_eval" in capsys.readouterr().err
    finally:
        unregister("my-eval-keydoor")


def test_eval_of_a_run_without_a_checkpoint_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tempo_rl.training import run as run_module

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an untrained model was built for evaluation")

    monkeypatch.setattr(run_module, "build_trainer", fail)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(tiny_config().to_toml())  # killed before its first checkpoint
    args = _eval_parser().parse_args(["eval", str(run_dir)])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "no checkpoint yet" in err and f"tempo-rl train --resume {run_dir}" in err
    assert not (run_dir / "eval").exists()


# ------------------------------------------------------------------------------------------------ restores


class RecordingStore:
    def __init__(self) -> None:
        self.quarantined: list[tuple[str, str, str | None]] = []

    def quarantine(self, state_id: str, reason: str, diff: str | None = None) -> None:
        self.quarantined.append((state_id, reason, diff))


def _restore(exc: Exception) -> tuple[Any, SimpleNamespace]:
    from tempo_rl.training.trainer import MacroStepTrainer

    def restore_branches(snapshot: Any, n: int) -> list[Any]:
        raise exc

    async def env_call(steps: int, fn: Any, *args: Any) -> Any:
        return fn(*args)

    fake = SimpleNamespace(
        c=SimpleNamespace(restore_branches=restore_branches, store=RecordingStore()),
        restore_failures=0,
        env_call=env_call,
    )
    state = SimpleNamespace(id="s1", snapshot=SimpleNamespace(round_index=3))
    return asyncio.run(MacroStepTrainer.restore_start(fake, state, 2)), fake  # type: ignore[arg-type]


def test_a_crash_during_a_restore_drops_the_state_without_quarantining_it() -> None:
    result, fake = _restore(RuntimeError("the env process died"))
    assert result is None
    assert fake.c.store.quarantined == []  # the state is sound: it may restore next time
    assert fake.restore_failures == 1


def test_a_replay_divergence_still_quarantines_with_its_diff() -> None:
    from tempo_rl.envs.restore import ReplayDivergenceError

    exc = ReplayDivergenceError(step=2, action="go north", expected="you see a key", actual="you see a door")
    result, fake = _restore(exc)
    assert result is None and fake.restore_failures == 0
    [(sid, reason, diff)] = fake.c.store.quarantined
    assert sid == "s1" and "ReplayDivergenceError" in reason and diff
