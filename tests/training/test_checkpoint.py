"""Checkpoints: atomic layout, LATEST pointer, pruning, a crash mid-write leaves the previous one valid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

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
