"""The chaos run: a 20-update toy training with 5% injected faults of every kind completes, the metrics account
for every dropped item, and no state restored wrongly is trained on.

Real pieces: the local backend's LocalTrainingClient (a tiny torch model; every update takes a real
``forward_backward`` + ``optim_step``), the StateStore, the env worker pool, verified restores, the checkpoints.
The policy's *answers* are scripted (see ``reliability_helpers``) so that every update has a training signal.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from reliability_helpers import local_client, tiny_config, use_scripted_policy

from tempo_rl.backends.config import RetryConfig
from tempo_rl.testing.faults import FAULT_KINDS, FaultPlan, FaultRates, faulty_build_trainer
from tempo_rl.training.checkpoint import latest_checkpoint
from tempo_rl.training.run import train_run
from tempo_rl.training.store import StateStore

FAST_RETRY = RetryConfig(backoff_initial_s=0.001, backoff_max_s=0.01, max_attempts=6)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _total(records: list[dict[str, Any]], key: str) -> float:
    return float(sum(r.get(key) or 0.0 for r in records))


@pytest.mark.slow
def test_chaos_run_with_5_percent_faults_of_every_kind(tmp_path: Path) -> None:
    config = tiny_config(
        tempo={"warmup_updates": 2, "td_updates": 18, "prefix_correction": "clipped"},  # compute_logprobs too
        workers={"step_timeout_s": 0.3},
    )
    # 5% of every kind, except replay divergences at 15%: the run restores only about 50 stored states, so at 5%
    # about one seed in 16 would meet none (0.95 ** 54) and the coverage check below would depend on luck
    plan = FaultPlan(
        dataclasses.replace(FaultRates.uniform(0.05), replay_divergence=0.15), seed=0, hang_s=0.6
    )
    run_dir = tmp_path / "run"
    with faulty_build_trainer(plan, retry=FAST_RETRY, before=use_scripted_policy) as built:
        summary = train_run(run_dir, config, console=False)
    (trainer,) = built

    # the run completed every update, and every kind of fault was met at least once
    assert summary["updates_done"] == 20
    assert set(plan.injected) == set(FAULT_KINDS), dict(plan.injected)
    records = _jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, 21))
    ckpt = latest_checkpoint(run_dir)
    assert ckpt is not None and ckpt.update == 20

    # backend: each update applied exactly once, despite refused and lost-acknowledgement optimizer steps
    stats = trainer.c.training_client.stats
    optim_steps = _total(records, "train/optim_steps")
    assert optim_steps >= 15  # an update whose every branch failed has no Datum, hence no step
    assert local_client(trainer).step == trainer.state.policy_version == optim_steps
    assert stats.optim_acknowledged == plan.injected["optim_lost_ack"] >= 1
    assert stats.retries.get("optim_step", 0) == plan.injected["optim_fail"] >= 1
    assert stats.retries.get("sample", 0) >= 1 and not stats.failures

    # envs: every crashed or hung step dropped its branch, and the metrics count each one
    pool = trainer.c.pool.stats
    assert pool.errors == plan.injected["env_crash"] >= 1
    assert pool.timeouts >= plan.injected["env_hang"] >= 1  # a loaded machine may add genuine timeouts
    assert pool.replaced == pool.timeouts  # every hung worker was replaced
    last = records[-1]  # the same counters are in metrics.jsonl
    assert last["workers/timeouts"] == pool.timeouts and last["workers/replaced"] == pool.replaced
    assert last["workers/errors"] == pool.errors
    assert last["backend/optim_acknowledged"] == stats.optim_acknowledged
    assert last["backend/retries"] == sum(stats.retries.values()) and last["backend/failures"] == 0
    assert _total(records, "rollout/env_errors") == pool.errors + pool.timeouts
    td = [r for r in records if r["train/phase"] == 1.0]
    assert _total(td, "actor/dropped_branches") >= _total(td, "actor/env_errors")
    trajectories = _jsonl(run_dir / "trajectories.jsonl")
    errored = [t for t in trajectories if t["end_reason"] == "error"]
    assert len(errored) == _total(td, "rollout/env_errors")  # TD writes every branch, dropped ones too
    assert all(t.get("kept") is not True for t in errored)  # a dropped branch never carries a Datum

    # garbage: every garbled actor turn is counted as an invalid tool call (the scripted policy is always valid)
    invalid_calls = sum(r["rollout/turns"] * (1.0 - r["rollout/valid_tool_call_rate"]) for r in records)
    assert round(invalid_calls) == plan.garbage_actor >= 1
    assert plan.garbage_other >= 1  # critic answers garbled too: read as parse failures, never a crash

    # replay divergence: quarantined with its diff, counted, and never trained on
    store = StateStore(run_dir / "store.sqlite")
    try:
        quarantined = store.quarantined()
        live_ids = set(store.ids())
    finally:
        store.close()
    assert _total(td, "td/replay_divergences") == len(quarantined) == plan.injected["replay_divergence"] >= 1
    assert sorted(q.state.snapshot.id for q in quarantined) == sorted(plan.diverged_states)
    bad_ids = {q.state.id for q in quarantined}
    assert all(q.diff and "ReplayDivergenceError" in q.reason for q in quarantined)
    assert not bad_ids & live_ids
    assert all(detected for _, _, detected in plan.divergence_log), "a corrupted restore returned envs"
    quarantined_in = {sid: update for sid, update, _ in plan.divergence_log}
    for q in quarantined:  # trained on only in updates BEFORE its restore diverged, never at or after it
        used = [t["update"] for t in trajectories if t["start_id"] == q.state.id]
        assert all(u < quarantined_in[q.state.snapshot.id] for u in used), (q.state.id, used)
