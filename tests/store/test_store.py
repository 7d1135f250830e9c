"""StateStore: FIFO, caps, staleness, quarantine, uniform sampling, SQLite persistence and prefix sharing."""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storetest_helpers import state

from tempo_rl.training.store import StateStore
from tempo_rl.training.types import StoredState

REPO = Path(__file__).resolve().parents[2]


def test_round_trip_and_reopen_keep_every_field_and_the_order(tmp_path: Path) -> None:
    path = tmp_path / "run" / "store.sqlite"
    states = [
        state(range(i, i + 300), game=f"g{i % 2}", version=i, actions=["look"] * (i + 1)) for i in range(4)
    ]
    states[1] = dataclasses.replace(states[1], privileged_state="Pieces a1 b3 conflict.")
    with StateStore(path) as store:
        assert store.add_many(states) == [True] * 4
        assert store.add(states[0]) is False  # duplicate id
        assert store.get(states[2].id) == states[2]
    with StateStore(path) as store:
        assert store.ids() == [s.id for s in states]
        assert [store.get(s.id) for s in states] == states
        assert len(store) == 4 and states[1].id in store


def test_fifo_capacity_evicts_the_oldest() -> None:
    store = StateStore(None, capacity=3)
    states = [state([i, i + 1], sid=f"s{i}") for i in range(5)]
    for s in states:
        assert store.add(s)
    assert store.ids() == ["s2", "s3", "s4"]
    assert store.counters["evicted_capacity"] == 2


def test_per_game_cap_evicts_that_games_oldest() -> None:
    store = StateStore(None, capacity=10, per_game_cap=2)
    for i, game in enumerate(["a", "b", "a", "a", "b", "a"]):
        store.add(state([i], game=game, sid=f"{game}{i}"))
    assert store.ids() == ["b1", "a3", "b4", "a5"]  # insertion order kept
    assert store.stats()["games"] == 2.0


def test_reopening_with_tighter_limits_trims(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with StateStore(path) as store:
        store.add_many(state([i], sid=f"s{i}") for i in range(6))
    with StateStore(path, capacity=4) as store:
        assert store.ids() == ["s2", "s3", "s4", "s5"]


def test_evict_stale_uses_policy_version_age() -> None:
    store = StateStore(None, max_age_versions=2)
    for v in range(6):
        store.add(state([v], version=v, sid=f"v{v}"))
    assert store.evict_stale(5) == 3  # ages 5, 4, 3 > 2
    assert store.ids() == ["v3", "v4", "v5"]
    assert store.stats(current_version=5)["mean_age"] == pytest.approx(1.0)
    assert StateStore(None).evict_stale(100) == 0  # no limit configured


def test_quarantine_keeps_the_state_with_its_diff_and_never_samples_it(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    states = [state([i] * 10, sid=f"s{i}") for i in range(3)]
    rng = np.random.default_rng(0)
    with StateStore(path) as store:
        store.add_many(states)
        store.quarantine("s1", "replay diverged at step 3", diff="- expected\n+ actual")
        outsider = state([9, 9], sid="never-stored")
        store.quarantine(outsider, "diverged on first restore")
        with pytest.raises(KeyError, match="no state with id 'nope'"):
            store.quarantine("nope", "x")
        for _ in range(50):
            assert all(s.id != "s1" for s in store.sample(5, rng))
    with StateStore(path) as store:
        assert store.ids() == ["s0", "s2"]
        records = store.quarantined()
        assert [(r.state.id, r.reason, r.diff) for r in records] == [
            ("s1", "replay diverged at step 3", "- expected\n+ actual"),
            ("never-stored", "diverged on first restore", None),
        ]
        assert records[0].state == states[1]
        assert store.add(states[1]) is False  # a quarantined state cannot come back
        assert store.stats()["quarantined"] == 2.0


def test_quarantine_capacity_drops_the_oldest_records() -> None:
    store = StateStore(None, quarantine_capacity=2)
    store.add_many(state([i], sid=f"s{i}") for i in range(4))
    for i in range(4):
        store.quarantine(f"s{i}", f"r{i}")
    assert [r.state.id for r in store.quarantined()] == ["s2", "s3"]


def test_sample_is_distinct_uniform_and_reproducible() -> None:
    store = StateStore(None)
    store.add_many(state([i], sid=f"s{i}") for i in range(5))
    assert store.sample(0, np.random.default_rng(0)) == []
    assert len(store.sample(99, np.random.default_rng(0))) == 5  # all, never more
    counts = dict.fromkeys(store.ids(), 0)
    rng = np.random.default_rng(1)
    trials = 3000
    for _ in range(trials):
        picked = [s.id for s in store.sample(2, rng)]
        assert len(set(picked)) == 2
        for sid in picked:
            counts[sid] += 1
    for c in counts.values():  # each state in 2/5 of the draws; 5 sigma = 0.045
        assert abs(c / trials - 0.4) < 0.045
    a = [s.id for s in store.sample(3, np.random.default_rng(42))]
    b = [s.id for s in store.sample(3, np.random.default_rng(42))]
    assert a == b and len(store) == 5
    with pytest.raises(ValueError, match="n must be >= 0"):
        store.sample(-1, rng)


def test_child_prefix_shares_the_parents_chunks_and_survives_its_eviction() -> None:
    store = StateStore(None, capacity=2, chunk_tokens=256)
    parent = state(range(1000), sid="parent")
    child = state([*range(1000), *range(5000, 5300)], sid="child", parent="parent")
    store.add(parent)
    store.add(child)
    # parent: 1000 tokens; the child adds chunk 768..1024 (not the parent's partial 768..1000),
    # 1024..1280 and the partial 1280..1300: 256 + 256 + 20 new tokens.
    assert store.stats()["stored_tokens"] == 1000 + 532
    assert store.stats()["prefix_tokens"] == 2300
    store.add(state([1], sid="other"))
    store.add(state([2], sid="other2"))  # evicts parent, then child
    assert store.ids() == ["other", "other2"]
    assert store.stats()["stored_tokens"] == 2  # unreferenced chunks were deleted


def test_sibling_prefixes_survive_parent_eviction() -> None:
    store = StateStore(None, capacity=3, chunk_tokens=64)
    base = list(range(640))
    kids = [state(base + [10_000 + k] * 100, sid=f"kid{k}") for k in range(3)]
    store.add(state(base, sid="parent"))
    store.add_many(kids)  # evicts the parent
    assert store.ids() == ["kid0", "kid1", "kid2"]
    assert [store.get(k.id).token_prefix for k in kids] == [k.token_prefix for k in kids]
    assert store.stats()["stored_tokens"] == 640 + 3 * 100


def test_naive_layout_stores_full_copies() -> None:
    store = StateStore(None, share_prefixes=False)
    store.add_many(state(range(500), sid=f"s{i}") for i in range(3))
    assert store.stats()["stored_tokens"] == 1500
    assert store.get("s1").token_prefix == tuple(range(500))


@settings(max_examples=40)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "add", "add", "quarantine", "stale"]), st.integers(0, 10**6)),
        max_size=40,
    ),
    chunk=st.sampled_from([1, 3, 16]),
)
def test_model_based_operations_keep_prefixes_exact(ops: list[tuple[str, int]], chunk: int) -> None:
    """Against a plain-list model: same ids in order, exact prefixes, chunk refcounts = references."""
    store = StateStore(None, capacity=5, per_game_cap=3, max_age_versions=3, chunk_tokens=chunk)
    model: list[StoredState] = []
    version = 0
    for i, (op, x) in enumerate(ops):
        rng = np.random.default_rng(x)
        if op == "add":
            parent = model[x % len(model)] if model and x % 3 else None
            base = list(parent.token_prefix) if parent else []
            prefix = base + rng.integers(0, 50, size=int(rng.integers(0, 20))).tolist()
            s = state(prefix, game=f"g{x % 3}", version=version, sid=f"s{i}")
            assert store.add(s)
            same_game = [m for m in model if m.game_id == s.game_id]
            if len(same_game) >= 3:
                model.remove(same_game[0])
            if len(model) >= 5:
                model.pop(0)
            model.append(s)
            version += x % 2
        elif op == "quarantine" and model:
            victim = model.pop(x % len(model))
            store.quarantine(victim.id, "diverged")
        elif op == "stale":
            model = [m for m in model if m.policy_version >= version - 3]
            store.evict_stale(version)
        assert store.ids() == [m.id for m in model]
    for m in model:
        assert store.get(m.id).token_prefix == m.token_prefix
    db = store._db
    refs = dict(db.execute("SELECT hash, refs FROM chunks").fetchall())
    counted: dict[bytes, int] = {}
    for (hashes,) in db.execute("SELECT chunk_hashes FROM states"):
        for j in range(0, len(hashes), 16):
            counted[hashes[j : j + 16]] = counted.get(hashes[j : j + 16], 0) + 1
    assert refs == counted


def test_stats_and_bad_input() -> None:
    store = StateStore(None)
    assert math.isnan(store.stats()["mean_age"]) and store.stats()["size"] == 0.0
    store.add(state(range(10), version=3))
    stats = store.stats(current_version=7)
    assert stats["size"] == 1.0 and stats["mean_age"] == 4.0 and stats["bytes"] > 0
    with pytest.raises(TypeError, match="StateStore stores StoredState objects"):
        store.add("not a state")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        StateStore(None, capacity=0)
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        bad = state([1], sid="bad")
        object.__setattr__(bad, "privileged_info", object())
        store.add(bad)
    assert "bad" not in store and len(store) == 1  # the failed transaction left nothing behind
    with pytest.raises(ValueError, match="token_prefix holds ids outside"):
        state([-1])
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.get("x")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    StateStore(path).close()
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(RuntimeError, match="schema version 99, newer than this tempo-rl"):
        StateStore(path)


def test_backup_and_restore_file(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    with StateStore(path) as store:
        store.add_many(state([i] * 5, sid=f"s{i}") for i in range(3))
        store.backup(tmp_path / "ckpt" / "store.sqlite")
        store.add(state([7], sid="after-checkpoint"))
    StateStore.restore_file(tmp_path / "ckpt" / "store.sqlite", path)
    with StateStore(path) as store:
        assert store.ids() == ["s0", "s1", "s2"]


@pytest.mark.slow
def test_states_survive_sigkill_mid_run(tmp_path: Path) -> None:
    """A writer SIGKILLed mid-stream leaves every state it reported committed, all readable."""
    path = tmp_path / "store.sqlite"
    script = textwrap.dedent(
        f"""
        import sys
        from tempo_rl.training.store import StateStore
        from storetest_helpers import state
        store = StateStore({str(path)!r}, capacity=10_000)
        i = 0
        while True:
            store.add(state(list(range(i, i + 2000)), sid=f"s{{i}}"))
            print(i, flush=True)
            i += 1
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(Path(__file__).parent)])}
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO
    )
    assert proc.stdout is not None
    committed = -1
    deadline = time.monotonic() + 60
    while committed < 20 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed = int(line)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert committed >= 20, "the writer did not start"
    with StateStore(path, capacity=10_000) as store:
        n = len(store)
        assert n >= committed + 1  # everything reported committed is there (maybe one more)
        for sid in store.ids():
            i = int(sid[1:])
            assert store.get(sid).token_prefix == tuple(range(i, i + 2000))


def test_records_of_earlier_stores_keep_their_prompt_window_and_spans() -> None:
    """Stores written before StoredState had typed fields kept the window and spans in ``extra``."""
    from tempo_rl.training.store import _decode_payload

    snap = state([1, 2, 3]).snapshot
    record = {
        "snapshot": snap.model_dump(mode="json"),
        "game_id": "g0",
        "task": "t",
        "initial_observation": "You are in a room.",
        "history": [["look", "you did look"]],
        "prefix_logprob_sum": -1.0,
        "policy_version": 2,
        "macro_index": 1,
        "parent_id": None,
        "privileged_info": None,
        "extra": {
            "prompt": {"messages": [{"role": "user", "content": "hi"}], "head": 1},
            "prefix_spans": [[1, 3, 2, -1.0]],
        },
    }
    old = _decode_payload("old", (1, 2, 3), record)
    assert old.privileged_state is None  # written before states carried one
    assert old.prompt is not None and old.prompt.head == 1 and old.prompt.messages[0]["content"] == "hi"
    assert old.spans is not None and [s.to_json() for s in old.spans] == [[1, 3, 2, -1.0]]
    assert old.history == (("look", "you did look"),)
    del record["extra"]["prefix_spans"]
    assert _decode_payload("old", (1, 2, 3), record).spans is None  # a prefix with unknown spans
