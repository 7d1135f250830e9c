"""Env workers that crash or hang mid-rollout, and stored states whose replay diverges (local backend runs).

* a crashed or hung step (over ``workers.step_timeout_s``) drops that branch only, is counted in the metrics,
  the update completes, and the pool replaces the hung worker;
* a stored state whose replay diverges is quarantined with its diff, never trained on, and the run goes on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from reliability_helpers import tiny_config, use_scripted_policy

from tempo_rl.testing.faults import FaultPlan, FaultRates, faulty_build_trainer
from tempo_rl.training.run import train_run
from tempo_rl.training.store import StateStore


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _total(records: list[dict[str, Any]], key: str) -> float:
    return float(sum(r.get(key) or 0.0 for r in records))


def test_crashed_and_hung_env_steps_drop_their_branch_only(tmp_path: Path) -> None:
    config = tiny_config(tempo={"warmup_updates": 1, "td_updates": 3}, workers={"step_timeout_s": 0.3})
    plan = FaultPlan(FaultRates(env_crash=0.08, env_hang=0.04), seed=1, hang_s=0.7)
    run_dir = tmp_path / "run"
    with faulty_build_trainer(plan, before=use_scripted_policy) as built:
        summary = train_run(run_dir, config, console=False)
    (trainer,) = built
    assert summary["updates_done"] == 4  # every update completed
    records = _jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    pool = trainer.c.pool.stats
    assert plan.injected["env_crash"] >= 1 and plan.injected["env_hang"] >= 1, dict(plan.injected)
    assert pool.errors == plan.injected["env_crash"]
    assert pool.timeouts >= plan.injected["env_hang"]  # the hang exceeded the per-step timeout
    assert pool.replaced == pool.timeouts  # each hung worker thread was abandoned and replaced
    # dropped and counted: one "error" branch per failed step, in the metrics and the trajectories
    assert _total(records, "rollout/env_errors") == pool.errors + pool.timeouts
    td = [r for r in records if r["train/phase"] == 1.0]
    errored = [t for t in _jsonl(run_dir / "trajectories.jsonl") if t["end_reason"] == "error"]
    assert len(errored) == _total(td, "actor/env_errors") == _total(td, "rollout/env_errors")
    assert all("InjectedEnvCrash" in t["error"] or "step_timeout_s" in t["error"] for t in errored)
    assert all(not t["kept"] for t in errored)
    assert _total(td, "actor/dropped_branches") >= len(errored)
    assert _total(records, "train/optim_steps") >= 1  # the surviving branches still trained


def test_diverging_replays_are_quarantined_with_their_diff_and_never_trained_on(tmp_path: Path) -> None:
    config = tiny_config(tempo={"warmup_updates": 1, "td_updates": 3})
    plan = FaultPlan(FaultRates(replay_divergence=1.0), seed=0)  # every stored-state restore diverges
    run_dir = tmp_path / "run"
    with faulty_build_trainer(plan, before=use_scripted_policy):
        summary = train_run(run_dir, config, console=False)
    assert summary["updates_done"] == 4  # the run continued (fresh games top the batch up)
    records = _jsonl(run_dir / "metrics.jsonl")
    store = StateStore(run_dir / "store.sqlite")
    try:
        quarantined = store.quarantined()
        live = set(store.ids())
    finally:
        store.close()
    assert plan.injected["replay_divergence"] >= 2
    assert all(detected for _, _, detected in plan.divergence_log), "a diverging replay was not detected"
    assert len(quarantined) == plan.injected["replay_divergence"] == _total(records, "td/replay_divergences")
    for q in quarantined:
        assert "replay diverged" in q.reason and q.diff and "recorded by another env" in q.diff
        assert q.state.id not in live  # never sampled again
    # no branch started from a state at or after the update in which its restore diverged
    when = {sid: update for sid, update, _ in plan.divergence_log}
    trajectories = _jsonl(run_dir / "trajectories.jsonl")
    for q in quarantined:
        used = [t["update"] for t in trajectories if t["start_id"] == q.state.id]
        assert all(u < when[q.state.snapshot.id] for u in used)
    # each TD update: 2 starts x 2 branches, less the starts whose restore diverged (dropped, counted)
    td_branches = sum(1 for t in trajectories if t["phase"] == "td")
    assert td_branches == (3 * 2 - len(quarantined)) * 2
