"""The StateStore: saved intermediate states that TD updates restart from, persisted in SQLite.

Policy (what the trainer can rely on):

* **FIFO with a capacity** (default 256): adding to a full store evicts the oldest state.
* **Uniform sampling** without removal: ``sample(n, rng)`` returns ``min(n, len(store))`` distinct states,
  each subset equally likely (``rng.choice(len, n, replace=False)`` over insertion order, so a fixed RNG state
  and store content give the same draw after a resume). Mixing in fresh episode starts is the trainer's job:
  it asks for the stored share only.
* **Staleness**: ``evict_stale(v)`` removes states whose ``policy_version < v - max_age_versions``.
* **Per-game cap**: adding a state of a game that already has ``per_game_cap`` states evicts that game's
  oldest state.
* **Quarantine**: a state whose replay diverged is moved out of the sampling pool with the reason and the
  diff; it is kept for inspection (up to ``quarantine_capacity``, oldest dropped first) and never sampled.
* **Persistence**: every ``add`` / ``add_many`` / eviction is one SQLite transaction (WAL journal), so a
  process killed at any point leaves the store at a transaction boundary and a resumed run keeps its states.
  :meth:`StateStore.backup` writes a consistent copy for checkpoints.

Token prefixes are stored **content-addressed in chunks** (``chunk_tokens`` tokens, int32): chunk ``i`` is
keyed by ``h_i = BLAKE2b-128(h_{i-1} || bytes_i)``, so two prefixes share every complete chunk up to the
first token where they differ, whatever their relation. A child state (parent prefix + appended segment)
therefore costs its new tokens plus at most one partial chunk, siblings share their parent's chunks, and
sharing survives the parent's eviction (chunks are reference-counted and deleted when unused).
``share_prefixes=False`` stores one private copy per state (the naive layout, kept for the benchmark).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tempo_rl.envs.snapshot import Snapshot
from tempo_rl.training.types import PrefixSpan, PromptWindow, StoredState

__all__ = ["STORE_SCHEMA_VERSION", "QuarantineRecord", "StateStore", "connect_read_only"]

#: Bumped when the SQLite layout changes; a newer store is refused rather than misread.
STORE_SCHEMA_VERSION = 1

_DIGEST_BYTES = 16


def connect_read_only(path: Path | str) -> sqlite3.Connection:
    """Open the store file ``path`` for reading only, writing nothing in its directory.

    A store is kept in WAL mode, and SQLite's plain read-only mode (``mode=ro``) still creates the ``-wal`` and
    ``-shm`` files beside the database, and leaves them behind, because only a writer may remove them. So:

    * without a ``-wal`` file beside it (no process is writing the store, and the last writer closed it),
      the database file holds every committed transaction and is opened with ``immutable=1``: no lock, no
      ``-wal`` / ``-shm``, nothing written, and it works in a read-only directory too;
    * with a ``-wal`` file (a run is writing the store now, or was killed before it closed it), the file alone
      misses the transactions in the WAL, so it is opened with ``mode=ro``, which reads them through the
      writer's ``-shm`` (falling back to ``immutable=1`` when that cannot be opened, e.g. in a read-only
      directory).

    Raises:
        sqlite3.Error: the file cannot be opened or is not a database (raised by the first query for the
            latter).
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise sqlite3.OperationalError(f"no store file at {path}")
    uri = path.as_uri()
    if Path(f"{path}-wal").exists():
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            conn.close()
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False)


@dataclass(frozen=True)
class QuarantineRecord:
    """A state whose replay diverged: never sampled, kept with the reason and the diff."""

    state: StoredState
    reason: str
    diff: str | None
    quarantined_at: float


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE,
    tokens BLOB NOT NULL,
    refs INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS states (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    game_id TEXT NOT NULL,
    policy_version INTEGER NOT NULL,
    macro_index INTEGER NOT NULL,
    parent_id TEXT,
    prefix_len INTEGER NOT NULL,
    chunk_hashes BLOB NOT NULL,
    payload BLOB NOT NULL,
    quarantined INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    diff TEXT,
    created_at REAL NOT NULL,
    quarantined_at REAL
);
CREATE INDEX IF NOT EXISTS states_quarantined ON states (quarantined, seq);
"""


@dataclass
class _Meta:
    seq: int
    game_id: str
    policy_version: int
    macro_index: int
    prefix_len: int


class StateStore:
    """A FIFO store of :class:`StoredState` in SQLite (see the module docstring for the policy).

    Args:
        path: the SQLite file (created if missing; an existing one is reopened with its states). ``None``
            keeps the store in memory (tests, throwaway runs).
        capacity: the most states kept for sampling (>= 1).
        per_game_cap: the most states of one game (None = no cap).
        max_age_versions: :meth:`evict_stale` removes states more than this many policy versions old.
        chunk_tokens: tokens per content-addressed prefix chunk.
        share_prefixes: False stores a private copy of every prefix (the naive layout).
        quarantine_capacity: the most quarantined states kept.
    """

    def __init__(
        self,
        path: Path | str | None,
        capacity: int = 256,
        per_game_cap: int | None = None,
        max_age_versions: int | None = None,
        *,
        chunk_tokens: int = 256,
        share_prefixes: bool = True,
        quarantine_capacity: int = 1024,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if per_game_cap is not None and per_game_cap < 1:
            raise ValueError(f"per_game_cap must be >= 1 or None, got {per_game_cap}")
        if max_age_versions is not None and max_age_versions < 0:
            raise ValueError(f"max_age_versions must be >= 0 or None, got {max_age_versions}")
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
        if quarantine_capacity < 0:
            raise ValueError(f"quarantine_capacity must be >= 0, got {quarantine_capacity}")
        self.path = Path(path) if path is not None else None
        self.capacity = capacity
        self.per_game_cap = per_game_cap
        self.max_age_versions = max_age_versions
        self.chunk_tokens = chunk_tokens
        self.share_prefixes = share_prefixes
        self.quarantine_capacity = quarantine_capacity
        self.counters: Counter[str] = Counter()
        self._lock = threading.RLock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            ":memory:" if self.path is None else str(self.path), check_same_thread=False, isolation_level=None
        )
        conn = self._conn
        conn.execute("PRAGMA page_size=16384")  # new files only: ~1 KiB chunk rows pack densely into pages
        if self.path is not None:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # durable at every commit against process death
        conn.executescript(_SCHEMA)
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(STORE_SCHEMA_VERSION),))
        elif int(row[0]) > STORE_SCHEMA_VERSION:
            conn.close()
            raise RuntimeError(
                f"state store {self.path} has schema version {row[0]}, newer than this tempo-rl understands "
                f"({STORE_SCHEMA_VERSION}); upgrade tempo-rl or start a new run directory"
            )
        self._active: dict[str, _Meta] = {}
        self._games: Counter[str] = Counter()
        self._reload_index()
        with self._transaction() as cur:  # a reopened store obeys the current limits
            self._enforce_limits(cur, incoming_game=None)

    # ------------------------------------------------------------------ basics

    def __len__(self) -> int:
        with self._lock:
            return len(self._active)

    def __contains__(self, state_id: object) -> bool:
        with self._lock:
            return state_id in self._active

    def ids(self) -> list[str]:
        """Ids of the sampleable states, oldest first."""
        with self._lock:
            return list(self._active)

    def close(self) -> None:
        """Close the database (idempotent). Everything added is already committed."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def add(self, state: StoredState) -> bool:
        """Store ``state`` in one transaction (evicting per FIFO / per-game rules); False if id is known."""
        return self.add_many([state])[0]

    def add_many(self, states: Iterable[StoredState]) -> list[bool]:
        """Store several states in one atomic transaction; returns, per state, whether it was added."""
        states = list(states)
        for state in states:
            if not isinstance(state, StoredState):
                raise TypeError(f"StateStore stores StoredState objects, got {type(state).__name__}")
        with self._lock, self._transaction() as cur:
            added: list[bool] = []
            for state in states:
                known = cur.execute("SELECT 1 FROM states WHERE id = ?", (state.id,)).fetchone()
                if known is not None:
                    self.counters["rejected_duplicate"] += 1
                    added.append(False)
                    continue
                self._enforce_limits(cur, incoming_game=state.game_id)
                seq = self._insert(cur, state)
                self._active[state.id] = _Meta(
                    seq, state.game_id, state.policy_version, state.macro_index, len(state.token_prefix)
                )
                self._games[state.game_id] += 1
                self.counters["added"] += 1
                added.append(True)
            return added

    def evict_stale(self, current_version: int) -> int:
        """Remove states with ``current_version - policy_version > max_age_versions``; returns how many."""
        if self.max_age_versions is None:
            return 0
        limit = current_version - self.max_age_versions
        with self._lock, self._transaction() as cur:
            victims = [sid for sid, m in self._active.items() if m.policy_version < limit]
            for sid in victims:
                self._delete(cur, sid)
            self.counters["evicted_stale"] += len(victims)
            return len(victims)

    def quarantine(self, state: str | StoredState, reason: str, diff: str | None = None) -> None:
        """Move a state out of the sampling pool for good, keeping it with ``reason`` and ``diff``.

        Args:
            state: a stored state's id, or a :class:`StoredState` (stored as quarantined if it is not known).
            reason: why (e.g. ``"replay diverged at step 12"``).
            diff: the expected-vs-actual observation diff, when there is one.

        Raises:
            KeyError: ``state`` is an id the store does not hold.
        """
        with self._lock, self._transaction() as cur:
            sid = state.id if isinstance(state, StoredState) else state
            row = cur.execute("SELECT quarantined FROM states WHERE id = ?", (sid,)).fetchone()
            if row is None:
                if not isinstance(state, StoredState):
                    raise KeyError(f"no state with id {sid!r} in the store; pass the StoredState itself")
                self._insert(cur, state)
            cur.execute(
                "UPDATE states SET quarantined = 1, reason = ?, diff = ?, quarantined_at = ? WHERE id = ?",
                (reason, diff, time.time(), sid),
            )
            meta = self._active.pop(sid, None)
            if meta is not None:
                self._drop_game(meta.game_id)
            self.counters["quarantined"] += 1
            excess = cur.execute("SELECT COUNT(*) FROM states WHERE quarantined = 1").fetchone()[0]
            excess -= self.quarantine_capacity
            if excess > 0:
                old = cur.execute(
                    "SELECT id FROM states WHERE quarantined = 1 ORDER BY quarantined_at, seq LIMIT ?",
                    (excess,),
                ).fetchall()
                for (old_id,) in old:
                    self._delete(cur, old_id)

    # ------------------------------------------------------------------ reading

    def sample(self, n: int, rng: np.random.Generator) -> list[StoredState]:
        """``min(n, len(self))`` distinct states drawn uniformly without replacement (nothing is removed)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        with self._lock:
            ids = list(self._active)
            k = min(n, len(ids))
            if k == 0:
                return []
            picks = rng.choice(len(ids), size=k, replace=False)
            return [self.get(ids[int(i)]) for i in picks]

    def get(self, state_id: str) -> StoredState:
        """The stored state with this id (sampleable or quarantined)."""
        with self._lock:
            row = self._db.execute(
                "SELECT prefix_len, chunk_hashes, payload FROM states WHERE id = ?", (state_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"no state with id {state_id!r} in the store")
            return self._decode(state_id, row[0], row[1], row[2])

    def quarantined(self) -> list[QuarantineRecord]:
        """The quarantined states, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, prefix_len, chunk_hashes, payload, reason, diff, quarantined_at FROM states "
                "WHERE quarantined = 1 ORDER BY quarantined_at, seq"
            ).fetchall()
            return [
                QuarantineRecord(self._decode(sid, plen, hashes, payload), reason or "", diff, float(at))
                for sid, plen, hashes, payload, reason, diff, at in rows
            ]

    def stats(self, current_version: int | None = None) -> dict[str, float]:
        """Store figures for metrics (slash-free keys; the trainer namespaces them).

        Keys: ``size``, ``capacity``, ``quarantined``, ``games``, ``mean_policy_version``, ``mean_age`` (in
        policy versions, ``current_version - policy_version``; NaN without ``current_version`` or when empty),
        ``mean_macro_index``, ``prefix_tokens`` (logical, summed over states), ``stored_tokens`` (physically
        stored), ``bytes`` (the database's used bytes) and ``bytes_per_state``.
        """
        with self._lock:
            metas = list(self._active.values())
            db = self._db
            n_q = db.execute("SELECT COUNT(*) FROM states WHERE quarantined = 1").fetchone()[0]
            stored_bytes = db.execute("SELECT COALESCE(SUM(LENGTH(tokens)), 0) FROM chunks").fetchone()[0]
            used = self._used_bytes()
            size = len(metas)
            versions = np.array([m.policy_version for m in metas], dtype=np.float64)
            return {
                "size": float(size),
                "capacity": float(self.capacity),
                "quarantined": float(n_q),
                "games": float(len(self._games)),
                "mean_policy_version": float(versions.mean()) if size else math.nan,
                "mean_age": float(current_version - versions.mean())
                if size and current_version is not None
                else math.nan,
                "mean_macro_index": float(np.mean([m.macro_index for m in metas])) if size else math.nan,
                "prefix_tokens": float(sum(m.prefix_len for m in metas)),
                "stored_tokens": float(stored_bytes // 4),
                "bytes": float(used),
                "bytes_per_state": float(used / size) if size else math.nan,
            }

    def backup(self, dest: Path | str) -> Path:
        """Write a consistent copy of the store to ``dest`` atomically (tmp file + fsync + rename)."""
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.unlink(missing_ok=True)
        with self._lock:
            target = sqlite3.connect(str(tmp))
            try:
                self._db.backup(target)
            finally:
                target.close()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
        return dest

    @staticmethod
    def restore_file(backup: Path | str, path: Path | str) -> None:
        """Replace the store file at ``path`` by ``backup`` (close any open store on ``path`` first)."""
        path = Path(path)
        for suffix in ("-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(Path(backup).read_bytes())
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    # ------------------------------------------------------------------ internals

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the StateStore is closed")
        return self._conn

    def _transaction(self) -> _Transaction:
        return _Transaction(self)

    def _reload_index(self) -> None:
        """Rebuild the in-memory index (insertion order, per-game counts) from the database."""
        self._active = {}
        for sid, seq, game, version, macro, plen in self._db.execute(
            "SELECT id, seq, game_id, policy_version, macro_index, prefix_len FROM states "
            "WHERE quarantined = 0 ORDER BY seq"
        ):
            self._active[sid] = _Meta(seq, game, version, macro, plen)
        self._games = Counter(m.game_id for m in self._active.values())

    def _used_bytes(self) -> int:
        db = self._db
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        return int((pages - free) * page_size)

    def _enforce_limits(self, cur: sqlite3.Cursor, incoming_game: str | None) -> None:
        """Evict so that one more state (of ``incoming_game``) fits; with None, trim to the limits."""
        room = 1 if incoming_game is not None else 0
        if incoming_game is not None and self.per_game_cap is not None:
            while self._games[incoming_game] + 1 > self.per_game_cap:
                oldest = next(sid for sid, m in self._active.items() if m.game_id == incoming_game)
                self._delete(cur, oldest)
                self.counters["evicted_game_cap"] += 1
        if incoming_game is None and self.per_game_cap is not None:
            for game in [g for g, c in self._games.items() if c > self.per_game_cap]:
                while self._games[game] > self.per_game_cap:
                    oldest = next(sid for sid, m in self._active.items() if m.game_id == game)
                    self._delete(cur, oldest)
                    self.counters["evicted_game_cap"] += 1
        while len(self._active) + room > self.capacity:
            self._delete(cur, next(iter(self._active)))
            self.counters["evicted_capacity"] += 1

    def _delete(self, cur: sqlite3.Cursor, state_id: str) -> None:
        row = cur.execute("SELECT chunk_hashes FROM states WHERE id = ?", (state_id,)).fetchone()
        if row is not None:
            self._release(cur, row[0])
            cur.execute("DELETE FROM states WHERE id = ?", (state_id,))
        meta = self._active.pop(state_id, None)
        if meta is not None:
            self._drop_game(meta.game_id)

    def _drop_game(self, game_id: str) -> None:
        self._games[game_id] -= 1
        if self._games[game_id] <= 0:
            del self._games[game_id]

    def _insert(self, cur: sqlite3.Cursor, state: StoredState) -> int:
        """Insert ``state`` (its prefix chunks, then its row); returns the row's insertion sequence number."""
        cur.execute(
            "INSERT INTO states (id, game_id, policy_version, macro_index, parent_id, prefix_len, "
            "chunk_hashes, payload, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                state.id,
                state.game_id,
                state.policy_version,
                state.macro_index,
                state.parent_id,
                len(state.token_prefix),
                self._put_prefix(cur, state),
                _encode_payload(state),
                time.time(),
            ),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def _put_prefix(self, cur: sqlite3.Cursor, state: StoredState) -> bytes:
        data = np.asarray(state.token_prefix, dtype="<i4").tobytes()
        if not self.share_prefixes:
            key = hashlib.blake2b(state.id.encode() + data, digest_size=_DIGEST_BYTES).digest()
            pieces = [(key, data)] if data else []
        else:
            pieces = []
            h = b""
            step = 4 * self.chunk_tokens
            for off in range(0, len(data), step):
                piece = data[off : off + step]
                h = hashlib.blake2b(h + piece, digest_size=_DIGEST_BYTES).digest()
                pieces.append((h, piece))
        cur.executemany(
            "INSERT INTO chunks (hash, tokens, refs) VALUES (?, ?, 1) "
            "ON CONFLICT(hash) DO UPDATE SET refs = refs + 1",
            pieces,
        )
        return b"".join(h for h, _ in pieces)

    def _release(self, cur: sqlite3.Cursor, hashes: bytes) -> None:
        keys = [(hashes[i : i + _DIGEST_BYTES],) for i in range(0, len(hashes), _DIGEST_BYTES)]
        cur.executemany("UPDATE chunks SET refs = refs - 1 WHERE hash = ?", keys)
        cur.executemany("DELETE FROM chunks WHERE hash = ? AND refs <= 0", keys)

    def _decode(self, state_id: str, prefix_len: int, hashes: bytes, payload: bytes) -> StoredState:
        db = self._db
        keys = [hashes[i : i + _DIGEST_BYTES] for i in range(0, len(hashes), _DIGEST_BYTES)]
        found: dict[bytes, bytes] = {}
        for lo in range(0, len(keys), 500):  # one query per 500 chunks (SQLite's parameter limit)
            batch = list(dict.fromkeys(keys[lo : lo + 500]))
            marks = ",".join("?" * len(batch))
            found.update(
                db.execute(f"SELECT hash, tokens FROM chunks WHERE hash IN ({marks})", batch).fetchall()
            )
        missing = [k for k in keys if k not in found]
        if missing:
            raise RuntimeError(
                f"state store is corrupt: {len(missing)} prefix chunk(s) of {state_id!r} are missing"
            )
        parts = [found[k] for k in keys]
        tokens = np.frombuffer(b"".join(parts), dtype="<i4")
        if tokens.shape[0] != prefix_len:
            raise RuntimeError(
                f"state store is corrupt: state {state_id!r} prefix has {tokens.shape[0]} tokens, "
                f"expected {prefix_len}"
            )
        return _decode_payload(state_id, tuple(tokens.tolist()), json.loads(zlib.decompress(payload)))


def _encode_payload(state: StoredState) -> bytes:
    record = {
        "snapshot": state.snapshot.model_dump(mode="json"),
        "game_id": state.game_id,
        "task": state.task,
        "policy_version": state.policy_version,
        "macro_index": state.macro_index,
        "parent_id": state.parent_id,
        "privileged_info": state.privileged_info,
        "privileged_state": state.privileged_state,
        "prompt": state.prompt.to_json() if state.prompt is not None else None,
        "spans": [s.to_json() for s in state.spans] if state.spans is not None else None,
    }
    try:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"StoredState {state.id!r} is not JSON-serialisable: {exc}") from exc
    return zlib.compress(text.encode("utf-8"), 6)


def _decode_payload(state_id: str, tokens: tuple[int, ...], record: Mapping[str, Any]) -> StoredState:
    """A state from its JSON record; records of stores written before 0.x kept the prompt window and the
    spans in ``extra`` (``extra["prompt"]``, ``extra["prefix_spans"]``) and are read too."""
    extra = record.get("extra") or {}
    prompt = record.get("prompt", extra.get("prompt"))
    spans = record.get("spans", extra.get("prefix_spans", () if not tokens else None))
    return StoredState(
        id=state_id,
        snapshot=Snapshot.model_validate(record["snapshot"]),
        game_id=record["game_id"],
        task=record["task"],
        token_prefix=tokens,
        policy_version=int(record["policy_version"]),
        macro_index=int(record["macro_index"]),
        prompt=PromptWindow.from_json(prompt) if prompt else None,
        spans=tuple(PrefixSpan.from_json(r) for r in spans) if spans is not None else None,
        parent_id=record["parent_id"],
        privileged_info=record["privileged_info"],
        privileged_state=record.get("privileged_state"),  # absent in stores written before it existed
    )


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` and in-memory index reload on error)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def __enter__(self) -> sqlite3.Cursor:
        self.store._lock.acquire()
        try:
            self.cur = self.store._db.cursor()
            self.cur.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.store._lock.release()
            raise
        return self.cur

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        store = self.store
        try:
            if exc_type is None:
                self.cur.execute("COMMIT")
            else:
                self.cur.execute("ROLLBACK")
                store._reload_index()
        finally:
            self.cur.close()
            store._lock.release()
