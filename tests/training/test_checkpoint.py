"""Checkpoints: atomic layout, LATEST pointer, pruning, a crash mid-write leaves the previous one valid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tempo_rl.training.checkpoint import CHECKPOINT_DIR, LATEST, latest_checkpoint, save_checkpoint
from tempo_rl.training.trainer import TrainerState


class FileClient:
    """Writes a small 'backend state' file like the local backend does."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def save_state(self, name: str) -> str:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        path = self.state_dir / f"{name}.pt"
        path.write_bytes(name.encode())
        return str(path)


class RemoteClient:
    def save_state(self, name: str) -> str:
        return f"trio://checkpoints/{name}"


def _state(update: int) -> dict:
    rng = np.random.Generator(np.random.PCG64(update))
    return TrainerState(
        update=update, policy_version=update, fresh_cursor=3 * update, rng_state=dict(rng.bit_generator.state)
    ).to_json()


def test_save_and_load_latest(tmp_path: Path) -> None:
    client = FileClient(tmp_path / "states")
    assert latest_checkpoint(tmp_path) is None
    for u in (1, 2, 3):
        save_checkpoint(
            tmp_path,
            update=u,
            trainer_state=_state(u),
            training_client=client,
            store=None,
            offsets={"metrics.jsonl": 10 * u},
        )
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.update == 3
    assert ckpt.offsets == {"metrics.jsonl": 30}
    assert Path(ckpt.backend_state or "").read_bytes() == b"update_000003"  # moved into the checkpoint
    assert Path(ckpt.backend_state or "").parent == ckpt.path
    state = TrainerState.from_json(ckpt.trainer_state)
    assert (state.update, state.policy_version, state.fresh_cursor) == (3, 3, 9)
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = state.rng_state
    assert rng.integers(1 << 30) == np.random.Generator(np.random.PCG64(3)).integers(1 << 30)
    kept = sorted(p.name for p in (tmp_path / CHECKPOINT_DIR).iterdir() if p.is_dir())
    assert kept == ["update_000002", "update_000003"]  # keep=2


def test_a_crash_while_writing_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    client = FileClient(tmp_path / "states")
    save_checkpoint(
        tmp_path, update=1, trainer_state=_state(1), training_client=client, store=None, offsets={}
    )
    # a process killed while writing update 2 leaves only a .tmp directory behind
    partial = tmp_path / CHECKPOINT_DIR / ".update_000002.tmp"
    partial.mkdir()
    (partial / "checkpoint.json").write_text("{ truncated")
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.update == 1
    # the next save of update 2 replaces the leftover cleanly
    save_checkpoint(
        tmp_path, update=2, trainer_state=_state(2), training_client=client, store=None, offsets={}
    )
    assert latest_checkpoint(tmp_path).update == 2  # type: ignore[union-attr]
    assert not partial.exists()
    assert (tmp_path / CHECKPOINT_DIR / LATEST).read_text().strip() == "update_000002"


def test_remote_backend_state_is_recorded_as_uri(tmp_path: Path) -> None:
    save_checkpoint(
        tmp_path, update=1, trainer_state=_state(1), training_client=RemoteClient(), store=None, offsets={}
    )
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.backend_state == "trio://checkpoints/update_000001"
    meta = json.loads((ckpt.path / "checkpoint.json").read_text())
    assert meta["backend_is_local"] is False


def test_store_is_copied_into_the_checkpoint(tmp_path: Path) -> None:
    from tempo_rl.training.store import StateStore

    store = StateStore(tmp_path / "store.sqlite")
    save_checkpoint(
        tmp_path, update=1, trainer_state=_state(1), training_client=RemoteClient(), store=store, offsets={}
    )
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.store_path is not None and ckpt.store_path.is_file()
    store.close()


def _save(run_dir: Path, update: int, client: object, **kwargs: object) -> None:
    save_checkpoint(
        run_dir,
        update=update,
        trainer_state=kwargs.pop("trainer_state", _state(update)),  # type: ignore[arg-type]
        training_client=client,
        store=None,
        offsets={},
    )


def test_checkpoint_json_records_size_and_digest_and_verification_checks_them(tmp_path: Path) -> None:
    import hashlib

    from tempo_rl.training.checkpoint import CheckpointError, verify_checkpoint

    client = FileClient(tmp_path / "states")
    _save(tmp_path, 1, client)
    path = tmp_path / CHECKPOINT_DIR / "update_000001"
    meta = json.loads((path / "checkpoint.json").read_text())
    content = b"update_000001"
    assert meta["files"]["backend.pt"] == {
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    assert verify_checkpoint(path).update == 1
    (path / "backend.pt").write_bytes(b"update_000009")  # same size, other bytes
    with pytest.raises(
        CheckpointError, match=r"update_000001: backend state backend\.pt does not match the SHA-256"
    ):
        verify_checkpoint(path)
    (path / "backend.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="has 1 bytes, 13 were written"):
        verify_checkpoint(path)


def test_latest_is_found_by_scanning_and_falls_back_past_a_damaged_one(tmp_path: Path) -> None:
    client = FileClient(tmp_path / "states")
    for u in (1, 2):
        _save(tmp_path, u, client)
    root = tmp_path / CHECKPOINT_DIR
    (root / LATEST).unlink()
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.update == 2 and any("missing" in n for n in ckpt.notes)
    (root / "update_000002" / "backend.pt").unlink()
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.update == 1
    assert any("update_000002: backend state backend.pt is missing" in n for n in ckpt.notes)


def test_no_verified_checkpoint_raises_naming_each(tmp_path: Path) -> None:
    from tempo_rl.training.checkpoint import CheckpointError

    client = FileClient(tmp_path / "states")
    for u in (1, 2):
        _save(tmp_path, u, client)
    for u in (1, 2):
        (tmp_path / CHECKPOINT_DIR / f"update_{u:06d}" / "checkpoint.json").write_text("{")
    with pytest.raises(
        CheckpointError, match=r"update_000002: checkpoint\.json is unreadable.*update_000001"
    ):
        latest_checkpoint(tmp_path)


def test_run_files_named_by_the_trainer_state_are_stored_relative_and_verified(tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    reference = run / "backend_states" / "kl-reference.pt"
    reference.parent.mkdir(parents=True)
    reference.write_bytes(b"reference weights")
    state = {**_state(1), "kl_reference": str(reference)}
    _save(run, 1, FileClient(run / "backend_states"), trainer_state=state)
    meta = json.loads((run / CHECKPOINT_DIR / "update_000001" / "checkpoint.json").read_text())
    assert meta["trainer_state"]["kl_reference"] == "backend_states/kl-reference.pt"
    assert str(tmp_path) not in json.dumps(meta)
    moved = tmp_path / "moved"
    shutil.move(str(run), moved)
    ckpt = latest_checkpoint(moved)
    assert ckpt is not None and ckpt.trainer_state["kl_reference"] == str(
        moved / "backend_states/kl-reference.pt"
    )
    (moved / "backend_states" / "kl-reference.pt").write_bytes(b"other")
    from tempo_rl.training.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=r"kl_reference file kl-reference\.pt has 5 bytes"):
        latest_checkpoint(moved)


def test_format_1_checkpoints_without_digests_still_load(tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_DIR / "update_000004"
    path.mkdir(parents=True)
    (path / "backend.pt").write_bytes(b"old")
    meta = {
        "format": 1,
        "update": 4,
        "trainer_state": _state(4),
        "backend_state": "backend.pt",
        "backend_is_local": True,
        "store": None,
        "offsets": {"metrics.jsonl": 7},
    }
    (path / "checkpoint.json").write_text(json.dumps(meta))
    (tmp_path / CHECKPOINT_DIR / LATEST).write_text("update_000004\n")
    ckpt = latest_checkpoint(tmp_path)
    assert ckpt is not None and ckpt.update == 4 and ckpt.offsets == {"metrics.jsonl": 7} and ckpt.notes == ()
