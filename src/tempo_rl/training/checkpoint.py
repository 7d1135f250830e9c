"""Checkpoints: everything needed to continue a run with no update lost or repeated.

A checkpoint after update ``u`` is the directory ``RUN_DIR/checkpoints/update_<u:06d>/`` holding

* ``backend.pt`` (or, for remote backends, the URI in ``checkpoint.json``): weights + optimizer state, from
  ``training_client.save_state``; the sampling client is rebuilt from the same weights on resume (the sampler
  always serves the latest weights: one optimiser step per update, sampler refreshed after it);
* ``store.sqlite``: a consistent copy of the StateStore (the live store keeps changing after the checkpoint,
  so a resume rolls it back to this copy);
* ``checkpoint.json``: the :class:`~tempo_rl.training.trainer.TrainerState` (update counter, policy version,
  fresh-game cursor, RNG state) and the byte lengths of ``metrics.jsonl`` and ``trajectories.jsonl`` at that
  moment (a resume truncates them back, so records of a half-done update are not duplicated).

Atomicity: everything is written into ``.update_<u>.tmp/``, each file fsync'ed, then the directory is renamed
into place and ``checkpoints/LATEST`` is replaced (tmp file + fsync + rename). A crash at any point leaves the
previous checkpoint as ``LATEST``.

Verification: ``checkpoint.json`` records the size in bytes and the SHA-256 digest of every file the checkpoint
needs (``backend.pt``, ``store.sqlite``, and run-directory files the trainer state names, such as the KL
anchor's reference state). :func:`verify_checkpoint` checks them all; :func:`latest_checkpoint` returns the newest
checkpoint that verifies, found by scanning ``checkpoints/update_*`` (``LATEST`` is only a hint: a missing or
garbled pointer, or a damaged newest checkpoint, falls back to the next older one and says so in
:attr:`Checkpoint.notes`).

Relocatable: every path inside ``checkpoint.json`` is relative: files of the checkpoint to its directory, files
elsewhere in the run directory (``relative_paths``: trainer-state keys) to the run directory. A run directory can
be moved or copied, and its copy never reads the original's files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKPOINT_DIR",
    "LATEST",
    "Checkpoint",
    "CheckpointError",
    "atomic_write_text",
    "find_checkpoints",
    "latest_checkpoint",
    "save_checkpoint",
    "verify_checkpoint",
]

CHECKPOINT_DIR = "checkpoints"
LATEST = "LATEST"
_FORMAT = 2
_PREFIX = "update_"


class CheckpointError(ValueError):
    """A checkpoint (or every checkpoint of a run) is missing, damaged or unreadable; the message says which
    file and what to do."""


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint on disk.

    Attributes:
        path: its directory.
        update: updates completed when it was written.
        trainer_state: the trainer state dict.
        backend_state: path (absolute, local) or URI of the backend's saved state.
        store_path: the store copy, or None when the run has no store file.
        offsets: byte lengths of the run's JSONL files at checkpoint time, by file name.
        notes: what :func:`latest_checkpoint` skipped to reach this one (damaged newer checkpoints, a stale or
            garbled ``LATEST``); empty when it is the checkpoint ``LATEST`` names and it verified.
        critic_backend_state: with ``tempo.critic_weights = "own"``, the critic's saved state (path or URI, as
            ``backend_state``); None when actor and critic share the weights.
    """

    path: Path
    update: int
    trainer_state: dict[str, Any]
    backend_state: str | None
    store_path: Path | None
    offsets: dict[str, int]
    notes: tuple[str, ...] = field(default=())
    critic_backend_state: str | None = None


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: tmp file + fsync + rename (+ fsync of the directory).

    The tmp file's name carries the process and thread ids, so two writers of one path never share it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # an interrupted write leaves nothing behind
        raise
    _fsync_dir(path.parent)


def _digest(path: Path) -> dict[str, Any]:
    """``{"size": bytes, "sha256": hex digest}`` of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return {"size": path.stat().st_size, "sha256": h.hexdigest()}


def _inside(path: Path, root: Path) -> str | None:
    """``path`` relative to ``root`` (POSIX form) when it lies inside it, else None."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        return None


def save_checkpoint(
    run_dir: Path,
    *,
    update: int,
    trainer_state: dict[str, Any],
    training_client: Any,
    store: Any | None,
    offsets: dict[str, int],
    keep: int = 2,
    critic_training_client: Any = None,
) -> Checkpoint:
    """Write the checkpoint after update ``update`` atomically and point ``LATEST`` at it.

    Args:
        run_dir: the run directory.
        update: updates completed.
        trainer_state: :meth:`TrainerState.to_json`. A string value naming an existing file inside
            ``run_dir`` (e.g. the KL reference's backend state) is stored relative to ``run_dir`` and its file
            digested, so the checkpoint verifies it and a moved run directory finds it.
        training_client: its ``save_state(name)`` writes weights + optimizer state; a returned local file is
            moved into the checkpoint, anything else (a remote URI) is recorded as is.
        store: the StateStore (``backup(dest)``), or None.
        offsets: byte lengths of the run's JSONL files now.
        keep: how many most recent checkpoints to keep (older ones are deleted after ``LATEST`` moves).
        critic_training_client: the critic's own weights (``tempo.critic_weights = "own"``), saved beside the
            actor's as ``critic_backend.*`` (or its URI recorded); None when they are shared.
    """
    root = run_dir / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    name = f"{_PREFIX}{update:06d}"
    final = root / name
    tmp = root / f".{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        files: dict[str, Any] = {}
        backend_record, backend_is_local = _save_backend(training_client, name, tmp, "backend", files)
        critic_record: str | None = None
        critic_is_local = False
        if critic_training_client is not None:
            critic_record, critic_is_local = _save_backend(
                critic_training_client, name, tmp, "critic_backend", files
            )
        if store is not None:
            store.backup(tmp / "store.sqlite")
            files["store.sqlite"] = _digest(tmp / "store.sqlite")
        state = dict(trainer_state)
        relative: list[str] = []
        run_files: dict[str, Any] = {}
        for key, value in trainer_state.items():
            if isinstance(value, str) and value and "://" not in value and Path(value).is_file():
                rel = _inside(Path(value), run_dir)
                if rel is not None:
                    state[key] = rel
                    relative.append(key)
                    run_files[rel] = _digest(Path(value))
        meta = {
            "format": _FORMAT,
            "update": update,
            "trainer_state": state,
            "relative_paths": relative,
            "backend_state": backend_record,
            "backend_is_local": backend_is_local,
            "critic_backend_state": critic_record,
            "critic_backend_is_local": critic_is_local,
            "store": "store.sqlite" if store is not None else None,
            "offsets": offsets,
            "files": files,
            "run_files": run_files,
        }
        atomic_write_text(tmp / "checkpoint.json", json.dumps(meta, indent=1, sort_keys=True))
        _fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # an interrupted write leaves nothing behind
        raise
    if final.exists():  # a checkpoint of the same update from a run that died before moving LATEST
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    atomic_write_text(root / LATEST, name + "\n")
    existing = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(_PREFIX))
    for old in existing[:-keep] if keep > 0 else []:
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return verify_checkpoint(final)


def _save_backend(client: Any, name: str, tmp: Path, stem: str, files: dict[str, Any]) -> tuple[str, bool]:
    """``client.save_state(name)``; a local file is moved into ``tmp`` as ``stem`` + its suffixes and digested
    into ``files``. Returns (what checkpoint.json records, whether it is a local file of the checkpoint)."""
    backend = str(client.save_state(name))
    local = Path(backend)
    if not local.is_file():
        return backend, False  # a remote URI, recorded as is
    dest = tmp / (stem + "".join(local.suffixes))
    shutil.move(str(local), dest)
    _fsync_file(dest)
    files[dest.name] = _digest(dest)
    return dest.name, True


def _check_file(path: Path, record: Any, what: str) -> None:
    if not path.is_file():
        raise CheckpointError(f"{what} {path.name} is missing")
    if isinstance(record, Mapping):
        size = path.stat().st_size
        if "size" in record and size != int(record["size"]):
            raise CheckpointError(f"{what} {path.name} has {size} bytes, {int(record['size'])} were written")
        if "sha256" in record and _digest(path)["sha256"] != record["sha256"]:
            raise CheckpointError(
                f"{what} {path.name} does not match the SHA-256 digest recorded at write time"
            )


def verify_checkpoint(path: Path) -> Checkpoint:
    """Read and verify the checkpoint directory ``path``: its ``checkpoint.json`` parses, and every file it
    records is there with the size and SHA-256 digest recorded at write time (format-1 checkpoints, written
    before digests were recorded, are checked for presence only).

    Raises:
        CheckpointError: naming the first problem found.
    """
    meta_file = path / "checkpoint.json"
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path.name} does not exist")
    if not meta_file.is_file():
        raise CheckpointError(f"checkpoint {path.name} has no checkpoint.json")
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise TypeError("not a JSON object")
        fmt = int(meta.get("format", 0))
        update = int(meta["update"])
        trainer_state = dict(meta["trainer_state"])
        offsets = {str(k): int(v) for k, v in meta.get("offsets", {}).items()}
        files = dict(meta.get("files", {}))
        run_files = dict(meta.get("run_files", {}))
        relative = [str(k) for k in meta.get("relative_paths", [])]
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        raise CheckpointError(
            f"checkpoint {path.name}: checkpoint.json is unreadable ({type(exc).__name__}: {exc})"
        ) from None
    if fmt > _FORMAT:
        raise CheckpointError(
            f"checkpoint {path.name} has format {fmt}, newer than this tempo-rl understands; upgrade tempo-rl"
        )
    run_dir = path.parent.parent
    backend = meta.get("backend_state")
    critic = meta.get("critic_backend_state")
    store = meta.get("store")
    try:
        if backend is not None and meta.get("backend_is_local"):
            _check_file(path / str(backend), files.get(str(backend)), "backend state")
            backend = str(path / str(backend))
        if critic is not None and meta.get("critic_backend_is_local"):
            _check_file(path / str(critic), files.get(str(critic)), "critic backend state")
            critic = str(path / str(critic))
        if store:
            _check_file(path / str(store), files.get(str(store)), "store copy")
        for key in relative:
            rel = trainer_state.get(key)
            if isinstance(rel, str):
                _check_file(run_dir / rel, run_files.get(rel), f"{key} file")
                trainer_state[key] = str(run_dir / rel)
    except CheckpointError as exc:
        raise CheckpointError(f"checkpoint {path.name}: {exc}") from None
    return Checkpoint(
        path=path,
        update=update,
        trainer_state=trainer_state,
        backend_state=None if backend is None else str(backend),
        store_path=path / str(store) if store else None,
        offsets=offsets,
        critic_backend_state=None if critic is None else str(critic),
    )


def find_checkpoints(run_dir: Path) -> list[Path]:
    """Every complete-looking checkpoint directory of the run, newest (highest update) first; the
    ``.update_<u>.tmp`` directories of interrupted writes are not checkpoints."""
    root = run_dir / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        suffix = p.name.removeprefix(_PREFIX)
        if p.is_dir() and p.name.startswith(_PREFIX) and suffix.isdigit():
            found.append((int(suffix), p))
    return [p for _, p in sorted(found, reverse=True)]


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    """The newest checkpoint of the run that verifies, or None when the run has no checkpoint yet.

    The directory is scanned, so a missing or garbled ``LATEST`` loses nothing; each candidate is verified
    (:func:`verify_checkpoint`), newest first. What was skipped on the way is listed in the result's
    :attr:`Checkpoint.notes`.

    Raises:
        CheckpointError: the run has checkpoints but none verifies (every problem is named).
    """
    root = run_dir / CHECKPOINT_DIR
    pointer = root / LATEST
    notes: list[str] = []
    named: str | None = None
    if pointer.is_file():
        try:
            named = pointer.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            named = None
        if named is None or not (named.startswith(_PREFIX) and named.removeprefix(_PREFIX).isdigit()):
            notes.append(f"{pointer} is garbled; scanned the checkpoints instead")
            named = None
    candidates = find_checkpoints(run_dir)
    if named is not None and not (root / named).is_dir():
        notes.append(f"{pointer} names {named}, which does not exist")
    if not candidates:
        if pointer.is_file():
            raise CheckpointError(
                f"{pointer} exists but {root} holds no checkpoint directory; the run directory is damaged. "
                f"Start a new run (or move {run_dir} aside with `tempo-rl train --overwrite`)"
            )
        return None
    if named is None and not notes and not pointer.is_file():
        notes.append(f"{pointer} is missing; scanned the checkpoints instead")
    problems: list[str] = []
    for path in candidates:
        try:
            ckpt = verify_checkpoint(path)
        except CheckpointError as exc:
            problems.append(str(exc))
            notes.append(f"skipped damaged {exc}")
            continue
        if named is not None and int(path.name.removeprefix(_PREFIX)) > int(named.removeprefix(_PREFIX)):
            notes.append(f"{pointer} names {named}; {path.name} is newer and verifies")
        return replace(ckpt, notes=tuple(notes))
    raise CheckpointError(
        f"no checkpoint of {run_dir} verifies: " + "; ".join(problems) + ". Nothing was changed; restore the "
        f"files from a copy, or start a new run (`tempo-rl train --overwrite` moves {run_dir} aside)"
    )
