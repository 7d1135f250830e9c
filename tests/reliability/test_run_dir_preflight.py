"""An unwritable run directory or a full disk fails with a clear error BEFORE training starts.

These tests need no model: the check runs before any client is built (``build_trainer`` is replaced by a
function that fails the test if it is ever reached).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest

from tempo_rl.training import run as run_module
from tempo_rl.training import rundir as rundir_module
from tempo_rl.training.config import ConfigError, TrainConfig
from tempo_rl.training.run import RunDirError, check_run_dir, train_run


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("training started although the run directory is unusable")

    monkeypatch.setattr(run_module, "build_trainer", fail)


def _config() -> TrainConfig:
    return TrainConfig.model_validate({"run": {"loggers": []}})


def test_a_run_dir_below_a_file_is_refused(tmp_path: Path, no_training: None) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(RunDirError, match=r"cannot create the run directory .*file/run.*run\.run_dir"):
        train_run(blocker / "run", _config())


def test_a_run_dir_that_is_a_file_is_refused(tmp_path: Path, no_training: None) -> None:
    target = tmp_path / "run"
    target.write_text("")
    with pytest.raises(RunDirError, match="exists and is not a directory"):
        train_run(target, _config())


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
def test_a_read_only_run_dir_is_refused(tmp_path: Path, no_training: None) -> None:
    target = tmp_path / "run"
    target.mkdir()
    target.chmod(0o500)
    try:
        with pytest.raises(RunDirError, match="not writable"):
            train_run(target, _config())
    finally:
        target.chmod(0o700)


@pytest.mark.parametrize(
    ("code", "text"), [(errno.EROFS, "Read-only file system"), (errno.ENOSPC, "No space left on device")]
)
def test_a_failing_write_probe_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_training: None, code: int, text: str
) -> None:
    real_open = open

    def probe_fails(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if ".write-probe-" in str(path):
            raise OSError(code, text)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(rundir_module, "open", probe_fails, raising=False)
    target = tmp_path / "run"
    with pytest.raises(RunDirError, match=f"not writable \\({text}\\)"):
        train_run(target, _config())
    assert not target.exists()  # nothing was written, not even the folder


Usage = namedtuple("Usage", "total used free")


def test_a_full_disk_is_refused_for_new_runs_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_training: None
) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10 * 2**30, 10 * 2**30 - 2**20, 2**20))
    target = tmp_path / "run"
    with pytest.raises(RunDirError, match=r"only 1\.0 MiB free .* the 100 MiB a run needs"):
        train_run(target, _config())
    assert not target.exists()  # the refused run leaves no empty folder behind
    target.mkdir()
    (target / "config.toml").write_text(_config().to_toml())
    with pytest.raises(RunDirError, match="MiB free"):
        train_run(target, resume=True)


def test_the_check_passes_on_a_normal_directory_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    check_run_dir(target, min_free_mb=0)
    assert target.is_dir() and list(target.iterdir()) == []


def test_the_cli_reports_the_error_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tempo_rl.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["train", "--run-dir", str(blocker / "run"), "--quiet"])
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot create the run directory" in err and "Traceback" not in err
    assert issubclass(RunDirError, ConfigError)
