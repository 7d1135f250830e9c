"""A run directory you can trust: one writer, resume never deletes, fallback checkpoints, relocatable.

One tiny local-backend run (warm start, 1 warm-up + 2 TD updates, KL anchor on, a checkpoint every update) is
trained once per module; each test works on a copy of it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from reliability_helpers import REPO, tiny_config

from tempo_rl.training.checkpoint import CHECKPOINT_DIR, LATEST, latest_checkpoint
from tempo_rl.training.run import RunDirError, train_run
from tempo_rl.training.rundir import read_replay

UPDATES = 3  # 1 warm-up + 2 TD


def _config() -> object:
    return tiny_config(
        tempo={"warmup_updates": 1, "td_updates": 2},
        kl={"coef": 0.1},
        warmstart={"episodes": 2},
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    train_run(run_dir, _config(), console=False)  # type: ignore[arg-type]
    return run_dir


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if line.strip()]


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / CHECKPOINT_DIR).iterdir() if p.is_dir())


def _tree(run_dir: Path) -> dict[str, bytes]:
    """Every file of the run directory and its bytes (the lock file, which names its holder, aside)."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


# ------------------------------------------------------------------------------------------------ one writer

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tempo_rl.training.rundir import RunLock
    lock = RunLock(Path(sys.argv[1])).acquire()
    print("locked", flush=True)
    time.sleep(120)
    """
)


def _hold_lock(run_dir: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


@pytest.mark.slow
def test_a_second_writer_is_refused_naming_the_holder_and_changes_nothing(run: Path) -> None:
    from tempo_rl.training.rundir import RunDirLockedError

    before = _tree(run)
    holder = _hold_lock(run)
    try:
        with pytest.raises(
            RunDirLockedError, match=rf"in use by another tempo-rl process \(pid {holder.pid}\)"
        ):
            train_run(run, resume=True, overrides=["tempo.td_updates=3"], console=False)
        assert _tree(run) == before
    finally:
        holder.send_signal(signal.SIGKILL)  # the kernel releases a killed holder's lock
        holder.wait()
    summary = train_run(run, resume=True, overrides=["tempo.td_updates=3"], console=False)
    assert summary["updates_done"] == UPDATES + 1
    assert _steps(run) == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_two_resumes_of_one_run_the_second_is_refused_and_no_step_is_doubled(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: ``tempo-rl train --resume X &`` then ``tempo-rl train --resume X``."""
    import time

    from tempo_rl.cli import main

    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), OMP_NUM_THREADS="1")
    more = ["--set", "tempo.td_updates=5", "--quiet"]
    first = subprocess.Popen(
        [sys.executable, "-m", "tempo_rl.cli", "train", "--resume", str(run), *more], env=env
    )
    try:
        deadline = time.monotonic() + 120
        lock = run / ".lock"
        while not (lock.is_file() and lock.read_text().strip() == str(first.pid)):  # the first holds the lock
            assert first.poll() is None and time.monotonic() < deadline, (
                "the first resume never took the lock"
            )
            time.sleep(0.05)
        assert main(["train", "--resume", str(run), *more]) == 2
        assert f"pid {first.pid}" in capsys.readouterr().err
    finally:
        assert first.wait(timeout=300) == 0
    assert _steps(run) == list(range(UPDATES + 4))  # 0 .. 6, each once


def test_the_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    from tempo_rl.training.rundir import RunDirLockedError, RunLock

    with RunLock(tmp_path):
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
        with pytest.raises(RunDirLockedError, match=f"pid {os.getpid()}"):
            RunLock(tmp_path).acquire()
    RunLock(tmp_path).acquire().release()  # free again


def test_a_new_run_into_a_directory_another_process_is_writing_is_refused(tmp_path: Path) -> None:
    from tempo_rl.training.rundir import RunDirLockedError

    target = tmp_path / "run"
    target.mkdir()
    holder = _hold_lock(target)
    try:
        with pytest.raises(RunDirLockedError, match=f"pid {holder.pid}"):
            train_run(target, _config(), console=False)  # type: ignore[arg-type]
        assert sorted(p.name for p in target.iterdir()) == [".lock"]  # no config.toml, nothing else
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------------------------------------ resume


@pytest.mark.slow
def test_resume_without_latest_finds_the_newest_checkpoint_and_deletes_nothing(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run / CHECKPOINT_DIR / LATEST).unlink()
    kept = _checkpoints(run)
    metrics = (run / "metrics.jsonl").read_bytes()
    summary = train_run(run, resume=True, console=False)
    assert summary["updates_done"] == UPDATES
    assert _checkpoints(run) == kept  # nothing deleted
    assert (run / "metrics.jsonl").read_bytes() == metrics  # no warm start redone, nothing rewritten
    assert "LATEST is missing" in capsys.readouterr().err


def _truncate_backend(run: Path) -> None:
    path = run / CHECKPOINT_DIR / "update_000003" / "backend.pt"
    with open(path, "r+b") as fh:
        fh.truncate(1000)


def _remove_latest_dir(run: Path) -> None:
    shutil.rmtree(run / CHECKPOINT_DIR / "update_000003")


def _garble_json(run: Path) -> None:
    (run / CHECKPOINT_DIR / "update_000003" / "checkpoint.json").write_text('{"update": 3, "trai')


def _garble_latest(run: Path) -> None:
    (run / CHECKPOINT_DIR / LATEST).write_bytes(b"\xff\xfe garbage")


def _flip_store_byte(run: Path) -> None:
    path = run / CHECKPOINT_DIR / "update_000003" / "store.sqlite"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "expected", "said"),
    [
        (_truncate_backend, 2, "backend.pt has 1000 bytes"),
        (_remove_latest_dir, 2, "names update_000003, which does not exist"),
        (_garble_json, 2, "checkpoint.json is unreadable"),
        (_garble_latest, 3, "is garbled"),
        (_flip_store_byte, 2, "does not match the SHA-256 digest"),
    ],
    ids=["truncated-backend", "removed-dir", "garbled-json", "garbled-latest", "flipped-store-byte"],
)
def test_a_damaged_checkpoint_falls_back_to_the_newest_that_verifies(
    run: Path, capsys: pytest.CaptureFixture[str], damage: object, expected: int, said: str
) -> None:
    damage(run)  # type: ignore[operator]
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.update == expected
    assert any(said in note for note in ckpt.notes), ckpt.notes
    summary = train_run(run, resume=True, console=False)
    assert summary["updates_done"] == UPDATES
    assert _steps(run) == [0, 1, 2, 3]  # the updates after the fallback point were redone, none twice
    err = capsys.readouterr().err
    assert said in err
    final = latest_checkpoint(run)
    assert final is not None and final.update == UPDATES and final.notes == ()


@pytest.mark.slow
def test_no_verified_checkpoint_refuses_and_changes_nothing(run: Path) -> None:
    for name in _checkpoints(run):
        with open(run / CHECKPOINT_DIR / name / "backend.pt", "r+b") as fh:
            fh.truncate(10)
    before = _tree(run)
    with pytest.raises(RunDirError, match=r"no checkpoint of .* verifies: .*update_000003.*update_000002"):
        train_run(run, resume=True, console=False)
    assert _tree(run) == before


@pytest.mark.slow
def test_metrics_cut_below_the_checkpoint_offset_is_refused(run: Path) -> None:
    metrics = run / "metrics.jsonl"
    data = metrics.read_bytes()
    metrics.write_bytes(data[: len(data) - 20])
    before = _tree(run)
    with pytest.raises(RunDirError, match=r"metrics\.jsonl holds \d+ bytes, fewer than the \d+ it held"):
        train_run(run, resume=True, console=False)
    assert _tree(run) == before


# ------------------------------------------------------------------------------------------------ relocatable


@pytest.mark.slow
def test_a_replay_file_that_disagrees_with_its_checkpoint_is_named(tmp_path: Path) -> None:
    (tmp_path / "critic_replay.jsonl").write_text('{"prompt": [1], "completion": [2], "weight": 1.0}\n')
    assert read_replay(tmp_path, 1, 4) == [{"prompt": [1], "completion": [2], "weight": 1.0}]
    with pytest.raises(
        RunDirError, match=r"holds 1 critic examples, but the checkpoint after update 4 recorded 2"
    ):
        read_replay(tmp_path, 2, 4)
    (tmp_path / "critic_replay.jsonl").write_text("[1, 2]\n")
    with pytest.raises(RunDirError, match=r"record 1 is not a JSON object: it was edited"):
        read_replay(tmp_path, 1, 4)
    assert read_replay(tmp_path / "nowhere", 0, 0) == []  # a run that keeps no replay has no file


def test_a_moved_run_directory_resumes_and_stores_no_absolute_path(run: Path, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    run.rename(moved)
    metas = list((moved / CHECKPOINT_DIR).glob("update_*/checkpoint.json"))
    assert metas
    for meta_file in metas:
        meta = json.loads(meta_file.read_text())
        paths = [meta["backend_state"], meta["store"], *meta["trainer_state"].values()]
        assert not [p for p in paths if isinstance(p, str) and Path(p).is_absolute()], meta_file
    summary = train_run(moved, resume=True, overrides=["tempo.td_updates=3"], console=False)
    assert summary["updates_done"] == UPDATES + 1


@pytest.mark.slow
def test_a_copy_uses_its_own_files_not_the_originals(run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    shutil.rmtree(run / "backend_states")  # the original's KL reference is gone
    ckpt = latest_checkpoint(copy)
    assert ckpt is not None and str(ckpt.trainer_state["kl_reference"]).startswith(str(copy))
    summary = train_run(copy, resume=True, overrides=["tempo.td_updates=3"], console=False)
    assert summary["updates_done"] == UPDATES + 1


# ------------------------------------------------------------------------------------------------ summary


@pytest.mark.slow
def test_summary_json_is_strict_json(trained: Path) -> None:
    def refuse(name: str) -> None:
        raise AssertionError(f"summary.json holds {name}")

    summary = json.loads((trained / "summary.json").read_text(), parse_constant=refuse)
    assert summary["eval_games"] is None  # undefined (no evaluation): null, not NaN
