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
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CHECKPOINT_DIR",
    "LATEST",
    "Checkpoint",
    "atomic_write_text",
    "latest_checkpoint",
    "save_checkpoint",
]

CHECKPOINT_DIR = "checkpoints"
LATEST = "LATEST"
_FORMAT = 1


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
    """

    path: Path
    update: int
    trainer_state: dict[str, Any]
    backend_state: str | None
    store_path: Path | None
    offsets: dict[str, int]


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
    """Write ``text`` to ``path`` atomically: tmp file + fsync + rename (+ fsync of the directory)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def save_checkpoint(
    run_dir: Path,
    *,
    update: int,
    trainer_state: dict[str, Any],
    training_client: Any,
    store: Any | None,
    offsets: dict[str, int],
    keep: int = 2,
) -> Checkpoint:
    """Write the checkpoint after update ``update`` atomically and point ``LATEST`` at it.

    Args:
        run_dir: the run directory.
        update: updates completed.
        trainer_state: :meth:`TrainerState.to_json`.
        training_client: its ``save_state(name)`` writes weights + optimizer state; a returned local file is
            moved into the checkpoint, anything else (a remote URI) is recorded as is.
        store: the StateStore (``backup(dest)``), or None.
        offsets: byte lengths of the run's JSONL files now.
        keep: how many most recent checkpoints to keep (older ones are deleted after ``LATEST`` moves).
    """
    root = run_dir / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    name = f"update_{update:06d}"
    final = root / name
    tmp = root / f".{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    backend = str(training_client.save_state(name))
    backend_record: str | None = backend
    local = Path(backend)
    if local.is_file():
        dest = tmp / ("backend" + "".join(local.suffixes))
        shutil.move(str(local), dest)
        _fsync_file(dest)
        backend_record = dest.name
    if store is not None:
        store.backup(tmp / "store.sqlite")
    meta = {
        "format": _FORMAT,
        "update": update,
        "trainer_state": trainer_state,
        "backend_state": backend_record,
        "backend_is_local": local.is_file() or backend_record != backend,
        "store": "store.sqlite" if store is not None else None,
        "offsets": offsets,
    }
    atomic_write_text(tmp / "checkpoint.json", json.dumps(meta, indent=1, sort_keys=True))
    _fsync_dir(tmp)
    if final.exists():  # a checkpoint of the same update from a run that died before moving LATEST
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    atomic_write_text(root / LATEST, name + "\n")
    existing = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("update_"))
    for old in existing[:-keep] if keep > 0 else []:
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)
    return _read(final)


def _read(path: Path) -> Checkpoint:
    meta = json.loads((path / "checkpoint.json").read_text(encoding="utf-8"))
    if meta.get("format", 0) > _FORMAT:
        raise ValueError(
            f"checkpoint {path} has format {meta['format']}, newer than this tempo-rl understands"
        )
    backend = meta.get("backend_state")
    if backend is not None and meta.get("backend_is_local"):
        backend = str(path / backend)
    store = meta.get("store")
    return Checkpoint(
        path=path,
        update=int(meta["update"]),
        trainer_state=dict(meta["trainer_state"]),
        backend_state=backend,
        store_path=path / store if store else None,
        offsets={str(k): int(v) for k, v in meta.get("offsets", {}).items()},
    )


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    """The checkpoint ``LATEST`` points at, or None when the run has none yet."""
    root = run_dir / CHECKPOINT_DIR
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_text(encoding="utf-8").strip()
    path = root / name
    if not (path / "checkpoint.json").is_file():
        raise FileNotFoundError(
            f"{pointer} points at {name!r}, which has no checkpoint.json; the run directory is damaged"
        )
    return _read(path)
