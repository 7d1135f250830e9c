"""The run directory's I/O: its layout, the one-writer lock, the disk preflight, JSONL writers and resume.

Run directory layout::

    RUN_DIR/
      .lock                the writer's lock file (holds the pid of the process training in it)
      config.toml          the validated config (resume reads it back)
      metrics.jsonl        one JSON record per update (tempo_rl.training.metrics)
      trajectories.jsonl   one record per played branch / episode
      critic_replay.jsonl  the critic's Monte Carlo examples kept for replay (``tempo.warmup_replay``), each
                           appended once; a checkpoint records how many it holds
      store.sqlite         the StateStore (live)
      tokenizer/           the offline tokenizer (local backend)
      backend_states/      backend states outside checkpoints (the KL anchor's reference policy)
      checkpoints/         update_<u>/ {backend.pt, store.sqlite, checkpoint.json} + LATEST
      summary.json         the end-of-run summary

Guarantees (see ``docs/reliability.md``):

* **one writer**: :class:`RunLock` holds an OS file lock (``fcntl.flock``) on ``RUN_DIR/.lock`` for the run's
  life; the kernel releases it on any exit, even SIGKILL. A second writer is refused, naming the holder's pid;
* **resume never deletes**: :func:`prepare_resume` resumes from the newest checkpoint that verifies
  (:func:`tempo_rl.training.checkpoint.latest_checkpoint`), and refuses, changing nothing, when the run has
  checkpoints but none verifies or when an appended file (:data:`APPENDED_FILES`) was cut below the
  checkpoint's offsets;
* **relocatable**: nothing in the directory names an absolute path (see :mod:`tempo_rl.training.checkpoint`);
* ``--overwrite`` moves an existing run aside (:func:`move_aside`), it never deletes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from tempo_rl.training.checkpoint import (
    LATEST,
    Checkpoint,
    CheckpointError,
    atomic_write_text,
    latest_checkpoint,
)
from tempo_rl.training.config import ConfigError, TrainConfig

__all__ = [
    "APPENDED_FILES",
    "CONFIG_FILE",
    "LOCK_FILE",
    "METRICS_FILE",
    "MIN_FREE_DISK_MB",
    "PROJECT_MARKERS",
    "REPLAY_FILE",
    "RESUME_SETTINGS",
    "STORE_FILE",
    "SUMMARY_FILE",
    "TOKENIZER_DIR",
    "TRAJECTORIES_FILE",
    "JsonlWriter",
    "ResumePoint",
    "RunDirError",
    "RunDirLockedError",
    "RunLock",
    "SettingChange",
    "check_run_dir",
    "check_run_dir_path",
    "file_size",
    "move_aside",
    "prepare_resume",
    "read_replay",
    "refuse_foreign_folder",
    "resume_changes",
]

CONFIG_FILE = "config.toml"
METRICS_FILE = "metrics.jsonl"
TRAJECTORIES_FILE = "trajectories.jsonl"
REPLAY_FILE = "critic_replay.jsonl"
#: the run's append-only JSONL files: a checkpoint records their byte lengths, a resume cuts them back to those
APPENDED_FILES = (METRICS_FILE, TRAJECTORIES_FILE, REPLAY_FILE)
STORE_FILE = "store.sqlite"
SUMMARY_FILE = "summary.json"
TOKENIZER_DIR = "tokenizer"
LOCK_FILE = ".lock"


class RunDirError(ConfigError):
    """The run directory cannot hold a run (not creatable, not writable, too little free disk, damaged, or in
    use). Raised before anything is trained, with the path and the fix in the message."""


class RunDirLockedError(RunDirError):
    """Another process is training in the run directory (it holds the lock)."""


# ------------------------------------------------------------------------------------------------ lock


class RunLock:
    """An exclusive OS file lock on ``RUN_DIR/.lock`` (``fcntl.flock``), held while a process writes the run.

    :meth:`acquire` never waits: when another process holds the lock it raises :class:`RunDirLockedError`
    naming that process's pid (which the holder writes into the file). The kernel drops the lock when the
    holder's file descriptor closes, so a killed run never leaves a stale lock behind.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fh: IO[str] | None = None

    def acquire(self) -> RunLock:
        """Take the lock (the run directory must exist).

        Raises:
            RunDirLockedError: another process holds it.
        """
        import fcntl

        fh = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise RunDirLockedError(
                f"the run directory {str(self.path.parent)!r} is in use by another tempo-rl process (pid "
                f"{holder}); wait for it to finish or stop it (kill {holder}), or choose another run.run_dir"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        """Release the lock (idempotent); the file stays, holding no pid."""
        if self._fh is None:
            return
        import fcntl

        with contextlib.suppress(OSError):
            self._fh.seek(0)
            self._fh.truncate()
            self._fh.flush()
        fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
        self._fh.close()
        self._fh = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ------------------------------------------------------------------------------------------------ preflight


#: entries that mark a folder as the root of a project (a repository, a package), never a run directory
PROJECT_MARKERS = (
    ".git",
    ".hg",
    ".svn",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "package.json",
    "Cargo.toml",
)


def refuse_foreign_folder(path: Path) -> None:
    """Refuse a new run's directory that resolves to an existing folder of the user's that is not a run: the
    current directory or a folder above it, the home directory or a folder above it, or a project's root
    (:data:`PROJECT_MARKERS`). A new or empty folder, and any folder that holds a run, pass.

    Raises:
        RunDirError: naming the folder, what it is and the fix.
    """
    if not path.is_dir() or (path / CONFIG_FILE).exists():
        return
    resolved = path.resolve()
    cwd = Path.cwd().resolve()
    try:
        home: Path | None = Path.home().resolve()
    except (KeyError, RuntimeError):  # no home directory known (no $HOME, no passwd entry)
        home = None
    if resolved == cwd:
        what = "the current directory"
    elif resolved in cwd.parents:
        what = "a folder above the current directory"
    elif resolved == home:
        what = "the home directory"
    elif home is not None and resolved in home.parents:
        what = "a folder above the home directory"
    else:
        marker = next((m for m in PROJECT_MARKERS if (resolved / m).exists()), None)
        if marker is None:
            return
        what = f"the root of a project (it holds {marker})"
    raise RunDirError(
        f"the run directory {str(path)!r} is {what} ({resolved}), not a run directory: the run would write its "
        "files (config.toml, checkpoints/, ...) among yours; choose a folder of its own, e.g. "
        "--run-dir runs/NAME (run.run_dir)"
    )


def check_run_dir_path(path: Path) -> None:
    """The checks of :func:`check_run_dir` that write nothing: ``path`` is not a file, does not lie below a
    file, is not a foreign folder (:func:`refuse_foreign_folder`), and it or its nearest existing parent is
    writable. ``tempo-rl train`` runs them before any other work.

    Raises:
        RunDirError: naming the path, the problem and the fix.
    """
    if path.exists() and not path.is_dir():
        raise RunDirError(
            f"run directory {str(path)!r} exists and is not a directory; choose another run.run_dir"
        )
    base = next((p for p in (path, *path.parents) if p.exists()), Path(path.anchor or "."))
    if not base.is_dir():
        raise RunDirError(
            f"cannot create the run directory {str(path)!r}: {str(base)!r} is a file, not a folder; choose "
            "another run.run_dir (--run-dir)"
        )
    refuse_foreign_folder(path)
    if not os.access(base, os.W_OK | os.X_OK):
        what = "is not writable" if base == path else f"cannot be created ({str(base)!r} is read-only)"
        raise RunDirError(
            f"the run directory {str(path)!r} {what}; choose a writable run.run_dir (--run-dir) or fix the "
            "permissions"
        )


#: the free disk space (MiB) a run directory needs for a run to start or resume
MIN_FREE_DISK_MB = 100.0


def check_run_dir(path: Path, *, min_free_mb: float = MIN_FREE_DISK_MB) -> None:
    """Fail fast, before training starts, when ``path`` cannot hold a run.

    Runs :func:`check_run_dir_path` (a file, a path below a file, a foreign folder, a read-only parent), creates ``path`` (with parents), writes and
    fsyncs a 4 KiB probe file in it, removes it, and checks that at least ``min_free_mb`` MiB (2**20 bytes) are
    free on its file system. A refusal removes the folders this call created, so nothing is left behind.

    Raises:
        RunDirError: ``path`` is a file or a foreign folder, cannot be created or written, or its disk has too
            little free space.
    """
    check_run_dir_path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_empty(missing)
        raise RunDirError(
            f"cannot create the run directory {str(path)!r}: {exc.strerror or exc}; choose a writable "
            "run.run_dir (--run-dir) or fix the permissions of its parent"
        ) from None
    try:
        _probe(path, min_free_mb)
    except RunDirError:
        _remove_empty(missing)
        raise


def _remove_empty(folders: Sequence[Path]) -> None:
    """Remove ``folders`` (deepest first) where they exist and are empty."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _probe(path: Path, min_free_mb: float) -> None:
    """Write and fsync a probe file in the folder ``path``, remove it, and check the free disk space."""
    probe = path / f".write-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"\0" * 4096)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise RunDirError(
            f"the run directory {str(path)!r} is not writable ({exc.strerror or exc}); choose a writable "
            "run.run_dir (--run-dir), fix its permissions or free disk space"
        ) from None
    finally:
        with contextlib.suppress(OSError):  # the write error above is the one to report
            probe.unlink(missing_ok=True)
    free = shutil.disk_usage(path).free
    if free < min_free_mb * 2**20:
        raise RunDirError(
            f"only {free / 2**20:.1f} MiB free on the disk of the run directory {str(path)!r}, below "
            f"the {min_free_mb:g} MiB a run needs to start; free disk space or choose another run.run_dir"
        )


def move_aside(run_dir: Path) -> Path | None:
    """``--overwrite``: rename the run in ``run_dir`` to a free sibling ``<name>.replaced-<UTC time>[-k]`` and
    return that path (None when ``run_dir`` holds no run). Nothing is deleted.

    Raises:
        RunDirLockedError: a process is training in it.
    """
    if not (run_dir / CONFIG_FILE).is_file():
        return None
    with RunLock(run_dir):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        aside = run_dir.with_name(f"{run_dir.name}.replaced-{stamp}")
        k = 1
        while aside.exists():
            aside = run_dir.with_name(f"{run_dir.name}.replaced-{stamp}-{k}")
            k += 1
        os.rename(run_dir, aside)
    return aside


# ------------------------------------------------------------------------------------------------ JSONL


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class JsonlWriter:
    """Appends JSON lines, flushed and fsync'ed per batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def write(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Append ``records``, one JSON object per line."""
        for rec in records:
            self._fh.write(json.dumps(rec, default=_json_default, allow_nan=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the file."""
        self._fh.close()


def file_size(path: Path) -> int:
    """The size of ``path`` in bytes (0 when it does not exist)."""
    return path.stat().st_size if path.exists() else 0


def _truncate(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size > size:
        with open(path, "r+b") as fh:
            fh.truncate(size)
            fh.flush()
            os.fsync(fh.fileno())


def _check_offset(path: Path, offset: int, update: int) -> None:
    """``path`` must hold at least ``offset`` bytes that end on a record boundary (a newline)."""
    size = file_size(path)
    if size < offset:
        raise RunDirError(
            f"{path} holds {size} bytes, fewer than the {offset} it held at the checkpoint after update "
            f"{update}: it was cut or replaced, and resuming would merge records. Restore it from a copy of the "
            "run, or start a new run; nothing was changed"
        )
    if offset > 0:
        with open(path, "rb") as fh:
            fh.seek(offset - 1)
            if fh.read(1) != b"\n":
                raise RunDirError(
                    f"{path} does not end a record at byte {offset}, where it ended at the checkpoint after update "
                    f"{update}: it was edited. Restore it from a copy of the run, or start a new run; nothing was "
                    "changed"
                )


# ------------------------------------------------------------------------------------------------ resume


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run continues.

    Attributes:
        checkpoint: the newest checkpoint that verified, or None when the run died before its first one.
        notes: what was skipped to reach it (damaged checkpoints, a missing ``LATEST``...), to tell the user.
    """

    checkpoint: Checkpoint | None
    notes: tuple[str, ...] = ()


def prepare_resume(run_dir: Path) -> ResumePoint:
    """Bring ``run_dir`` back to its newest verified checkpoint (the caller holds the :class:`RunLock`).

    With a checkpoint: the appended files (:data:`APPENDED_FILES`) are checked to hold the checkpoint's
    offsets (on a record boundary) and truncated to them, ``LATEST`` is pointed at the checkpoint when it named
    another one, and the live store is replaced by the checkpoint's copy. (A damaged newer checkpoint stays
    until the resumed run writes the same update again, which replaces it.) Without any checkpoint directory (the run died before its first checkpoint) the partial files are
    reset and the run starts over in place. Checkpoints are never deleted here.

    Raises:
        RunDirError: the run has checkpoints but none verifies, or a JSONL file is shorter than the
            checkpoint's offset; nothing is changed then.
    """
    try:
        checkpoint = latest_checkpoint(run_dir)
    except CheckpointError as exc:
        raise RunDirError(str(exc)) from None
    if checkpoint is None:
        for name in APPENDED_FILES:
            _truncate(run_dir / name, 0)
        for suffix in ("", "-wal", "-shm"):
            Path(str(run_dir / STORE_FILE) + suffix).unlink(missing_ok=True)
        return ResumePoint(None)
    for name in APPENDED_FILES:
        _check_offset(run_dir / name, checkpoint.offsets.get(name, 0), checkpoint.update)
    if checkpoint.notes:  # LATEST named something else: point it at the checkpoint the run continues from
        atomic_write_text(checkpoint.path.parent / LATEST, checkpoint.path.name + "\n")
    for name in APPENDED_FILES:
        _truncate(run_dir / name, checkpoint.offsets.get(name, 0))
    if checkpoint.store_path is not None:
        from tempo_rl.training.store import StateStore

        StateStore.restore_file(checkpoint.store_path, run_dir / STORE_FILE)
    return ResumePoint(checkpoint, checkpoint.notes)


def read_replay(run_dir: Path, examples: int, update: int) -> list[dict[str, Any]]:
    """The critic's replay of a resumed run: the ``examples`` records of ``critic_replay.jsonl`` (one JSON object
    per line), which :func:`prepare_resume` has cut back to the checkpoint after ``update``.

    Raises:
        RunDirError: the file holds another number of records, or one that is not a JSON object.
    """
    path = run_dir / REPLAY_FILE
    records: list[dict[str, Any]] = []
    if path.exists():
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict):
                    raise RunDirError(
                        f"{path} record {len(records) + 1} is not a JSON object: it was edited. Restore it from a "
                        "copy of the run, or start a new run"
                    )
                records.append(record)
    if len(records) != examples:
        raise RunDirError(
            f"{path} holds {len(records)} critic examples, but the checkpoint after update {update} recorded "
            f"{examples}: it was replaced or edited. Restore it from a copy of the run, or start a new run"
        )
    return records


# ------------------------------------------------------------------------------------------------ resume changes

#: the settings a resume may change (each recorded in ``config.toml`` and the next metrics record): the number
#: of updates, which may only grow (the run continues further), and how the run is carried out, which does not
#: change what it computes. Every other setting (N, K, H, T, the model, the algorithm, the env, seeds...) is
#: part of the run's shape: its checkpoints and records were made with it, so a resume refuses to change it.
RESUME_SETTINGS: dict[str, str] = {
    "tempo.td_updates": "extend",
    "grpo.updates": "extend",
    "run.loggers": "how",
    "run.checkpoint_every": "how",
    "workers.step_timeout_s": "how",
}


@dataclass(frozen=True)
class SettingChange:
    """A setting a resume changes: its dotted ``key`` and its ``old`` and ``new`` values."""

    key: str
    old: Any
    new: Any

    def describe(self) -> str:
        """``key old -> new``."""
        return f"{self.key} {self.old!r} -> {self.new!r}"


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def resume_changes(run_dir: Path, stored: TrainConfig, resumed: TrainConfig) -> tuple[SettingChange, ...]:
    """The settings ``resumed`` (the run's ``config.toml`` with the resume's overrides) changes from
    ``stored``; each must be one of :data:`RESUME_SETTINGS`, and a number of updates may only grow.

    Raises:
        RunDirError: a change of the run's shape (or a shrinking number of updates), naming the setting and
            the fix; nothing is changed then.
    """
    old, new = _flatten(stored.model_dump(mode="json")), _flatten(resumed.model_dump(mode="json"))
    changes = [
        SettingChange(key, old.get(key), new.get(key))
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    ]
    allowed = ", ".join(f"{k} (may only grow)" if v == "extend" else k for k, v in RESUME_SETTINGS.items())
    for change in changes:
        kind = RESUME_SETTINGS.get(change.key)
        if kind is None:
            raise RunDirError(
                f"--set {change.key}={change.new} would change {change.key} from {change.old!r} on resume, but it is "
                f"part of the run's shape (its checkpoints and records in {run_dir} were made with "
                f"{change.old!r}); drop it to resume, or start a new run with it (tempo-rl train --config "
                f"{run_dir / CONFIG_FILE} --set {change.key}={change.new} --run-dir NEW_DIR). A resume may "
                f"change: {allowed}"
            )
        if kind == "extend" and change.new < change.old:
            raise RunDirError(
                f"--set {change.key}={change.new} would shrink {change.key} from {change.old} on resume; a resume "
                f"may only extend the run. To stop early, pass --max-updates N instead"
            )
    return tuple(changes)
