"""``workers.ray = true``: a whole TEMPO run (local backend) whose envs are built, restored and stepped in Ray
actors; and the env plumbing chosen from ``config.workers``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from trainer_doubles import tiny_config

from tempo_rl.envs.workers import EnvWorkerPool
from tempo_rl.training.run import env_workers


def test_thread_workers_are_the_default_plumbing() -> None:
    pool, make_env, restore, cache = env_workers(tiny_config())
    try:
        assert isinstance(pool, EnvWorkerPool) and cache is not None
        env = make_env(*tiny_config().env.train_game(0))
        branches = restore(env.snapshot(), 2)
        assert [b.last_observation.text for b in branches] == [env.last_observation.text] * 2
    finally:
        pool.close()


RAY_RUN = [
    "workers.ray=true",
    "workers.step_timeout_s=60",
    "backend={kind='local', hidden_size=32, num_layers=1, num_heads=2, vocab_size=512, max_positions=2048}",
    "tempo.max_rounds=12",
    "tempo.macro_rounds=4",
    "tempo.branches=2",
    "tempo.critic_samples=2",
    "tempo.endpoint_samples=1",
    "tempo.states_per_batch=1",
    "tempo.warmup_updates=1",
    "tempo.warmup_games_per_batch=1",
    "tempo.td_updates=1",
    "sampling.max_tokens=24",
    "sampling.critic_max_tokens=8",
    "sampling.critic_max_prompt_tokens=400",
    "sampling.max_trajectory_tokens=1200",
    "warmstart.episodes=0",
    "run.loggers=[]",
]


@pytest.mark.slow
def test_tempo_run_with_ray_env_actors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray", reason="needs the ray extra")
    pytest.importorskip("torch", reason="the run uses the local backend")
    from tempo_rl.envs import workers
    from tempo_rl.training.run import train_run

    calls: dict[str, list[Any]] = {"make_at_reset": [], "restore_branches": [], "stepped": []}
    make_at_reset = workers.RayEnvWorkerPool.make_at_reset
    restore_branches = workers.RayEnvWorkerPool.restore_branches
    call = workers.RayEnvWorkerPool.call

    def spy_make(self: Any, spec: Any, seed: int | None) -> Any:
        env = make_at_reset(self, spec, seed)
        calls["make_at_reset"].append(1)
        return env

    def spy_restore(self: Any, snapshot: Any, n: int, **kw: Any) -> Any:
        envs = restore_branches(self, snapshot, n, **kw)
        calls["restore_branches"].append(n)
        return envs

    async def spy_call(self: Any, env: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "step":
            calls["stepped"].append(env)
        return await call(self, env, method, *args, **kwargs)

    monkeypatch.setattr(workers.RayEnvWorkerPool, "make_at_reset", spy_make)
    monkeypatch.setattr(workers.RayEnvWorkerPool, "restore_branches", spy_restore)
    monkeypatch.setattr(workers.RayEnvWorkerPool, "call", spy_call)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        summary = train_run(tmp_path / "run", tiny_config(*RAY_RUN), console=False)
    finally:
        ray.shutdown()
    assert summary["updates_done"] == 2
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    warm, td = records[-2], records[-1]
    assert warm["train/phase"] == 0.0 and td["train/phase"] == 1.0
    assert warm["warmup/stored_states"] >= 1
    assert td["td/reused_states"] + td["td/fresh_states"] == 1.0
    assert td["actor/env_errors"] == 0.0 and td["td/replay_divergences"] == 0.0
    assert td["workers/calls"] >= warm["rollout/turns"] + td["rollout/turns"]
    # fresh games were built in actors and every other branch restored in actors
    assert len(calls["make_at_reset"]) == 1 + int(td["td/fresh_states"])
    assert sum(calls["restore_branches"]) == 1 + (2 if td["td/reused_states"] else 1)
    # every step went to an env living in an actor
    assert calls["stepped"] and all(isinstance(env, workers.RemoteEnv) for env in calls["stepped"])
