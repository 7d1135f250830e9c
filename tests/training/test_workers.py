"""Env worker pools: concurrency bounds, per-call timeouts, crash isolation and worker replacement."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from typing import Any

import pytest

from tempo_rl.envs.workers import EnvWorkerError, EnvWorkerPool


class ToyEnv:
    """Counts steps; can wait on a barrier, block on an event, or raise."""

    instances = 0

    def __init__(self, barrier: threading.Barrier | None = None, gate: threading.Event | None = None) -> None:
        ToyEnv.instances += 1
        self.serial = ToyEnv.instances
        self.steps = 0
        self.barrier = barrier
        self.gate = gate
        self.active = 0
        self.overlap = False
        self.lock = threading.Lock()

    def step(self, action: str) -> str:
        with self.lock:
            self.active += 1
            self.overlap |= self.active > 1
        try:
            if self.barrier is not None:
                self.barrier.wait(timeout=10)
            if action == "hang":
                assert self.gate is not None
                self.gate.wait(timeout=30)
            if action == "boom":
                raise ValueError("the env exploded")
            time.sleep(0.005)
            self.steps += 1
            return f"{action} -> {self.steps}"
        finally:
            with self.lock:
                self.active -= 1


def test_calls_on_different_envs_run_concurrently() -> None:
    barrier = threading.Barrier(4)  # only passes when 4 steps are inside env code at once
    envs = [ToyEnv(barrier=barrier) for _ in range(4)]

    async def main() -> list[Any]:
        with EnvWorkerPool(max_workers=4, step_timeout_s=20) as pool:
            return await asyncio.gather(*(pool.call(env, "step", "look") for env in envs))

    assert asyncio.run(main()) == ["look -> 1"] * 4


def test_max_workers_bounds_calls_in_flight_and_one_env_is_serialised() -> None:
    inside = 0
    peak = 0
    lock = threading.Lock()

    class Counting(ToyEnv):
        def step(self, action: str) -> str:
            nonlocal inside, peak
            with lock:
                inside += 1
                peak = max(peak, inside)
            time.sleep(0.01)
            with lock:
                inside -= 1
            return super().step(action)

    envs = [Counting() for _ in range(6)]
    shared = ToyEnv()

    async def main() -> None:
        pool = EnvWorkerPool(max_workers=2, step_timeout_s=20)
        await asyncio.gather(*(pool.call(e, "step", "x") for e in envs))
        await asyncio.gather(*(pool.call(shared, "step", str(i)) for i in range(8)))
        assert pool.stats.calls == 14 and pool.stats.failures == 0 and pool.stats.env_seconds > 0
        pool.close()

    asyncio.run(main())
    assert peak == 2
    assert shared.steps == 8 and not shared.overlap


def test_an_env_error_fails_that_call_only() -> None:
    envs = [ToyEnv() for _ in range(3)]

    async def main() -> list[Any]:
        pool = EnvWorkerPool(max_workers=3, step_timeout_s=20)
        results = await asyncio.gather(
            pool.call(envs[0], "step", "a"),
            pool.call(envs[1], "step", "boom"),
            pool.call(envs[2], "step", "c"),
            return_exceptions=True,
        )
        assert pool.stats.errors == 1 and pool.stats.calls == 3
        assert await pool.call(envs[1], "step", "again") == "again -> 1"  # the pool goes on
        with pytest.raises(AttributeError, match="has no method or attribute 'fly'"):
            await pool.call(envs[0], "fly")
        assert await pool.call(envs[0], "steps") == 1  # a plain attribute's value
        return results

    ok_a, err, ok_c = asyncio.run(main())
    assert ok_a == "a -> 1" and ok_c == "c -> 1"
    assert isinstance(err, EnvWorkerError) and err.kind == "error" and err.method == "step"
    assert isinstance(err.__cause__, ValueError) and "the env exploded" in str(err)


def test_a_hung_call_times_out_and_the_worker_and_env_are_replaced() -> None:
    gate = threading.Event()

    async def main() -> None:
        pool = EnvWorkerPool(max_workers=1, step_timeout_s=0.3)
        handle = await pool.make_env(ToyEnv, gate=gate)
        first = handle.env.serial  # type: ignore[attr-defined]
        with pytest.raises(EnvWorkerError, match=r"exceeded step_timeout_s=0\.3") as info:
            await pool.call(handle, "step", "hang")
        assert info.value.kind == "timeout"
        assert pool.stats.timeouts == 1 and pool.stats.replaced == 1 and handle.generation == 1
        # with max_workers=1 this only works because the hung thread was replaced by a fresh one
        assert await pool.call(handle, "step", "look") == "look -> 1"  # a fresh env from the factory
        assert handle.env.serial != first  # type: ignore[attr-defined]

        bare = ToyEnv(gate=gate)
        with pytest.raises(EnvWorkerError):
            await pool.call(bare, "step", "hang")
        with pytest.raises(EnvWorkerError, match="broken") as info:
            await pool.call(bare, "step", "look")  # no factory: never touched again
        assert info.value.kind == "broken"
        pool.close()

    try:
        asyncio.run(main())
    finally:
        gate.set()  # let the abandoned threads finish


def test_pool_survives_separate_event_loops_and_validates_arguments() -> None:
    pool = EnvWorkerPool(max_workers=2, step_timeout_s=5)
    env = ToyEnv()
    assert asyncio.run(pool.call(env, "step", "a")) == "a -> 1"
    assert asyncio.run(pool.call(env, "step", "b")) == "b -> 2"
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(pool.call(env, "step", "c"))
    with pytest.raises(ValueError, match="max_workers must be >= 1"):
        EnvWorkerPool(max_workers=0)
    with pytest.raises(ValueError, match="step_timeout_s must be > 0"):
        EnvWorkerPool(step_timeout_s=0)


class RayToyEnv:
    def __init__(self) -> None:
        self.steps = 0

    def step(self, action: str) -> str:
        if action == "hang":
            time.sleep(60)
        if action == "crash":
            os._exit(1)
        if action == "boom":
            raise ValueError("bad action")
        self.steps += 1
        return f"{action} -> {self.steps}"


@pytest.mark.slow
def test_ray_actors_time_out_crash_and_are_replaced() -> None:
    ray = pytest.importorskip("ray", reason="needs the ray extra")
    from tempo_rl.envs.workers import RayEnvWorkerPool

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test module is not importable there
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:

        async def main() -> None:
            with RayEnvWorkerPool(max_workers=2, step_timeout_s=2.0) as pool:
                a, b = await asyncio.gather(pool.make_env(RayToyEnv), pool.make_env(RayToyEnv))
                assert await asyncio.gather(pool.call(a, "step", "x"), pool.call(b, "step", "y")) == [
                    "x -> 1",
                    "y -> 1",
                ]
                with pytest.raises(EnvWorkerError) as info:
                    await pool.call(a, "step", "boom")
                assert info.value.kind == "error" and "bad action" in str(info.value)
                with pytest.raises(EnvWorkerError) as info:
                    await pool.call(a, "step", "crash")
                assert info.value.kind == "crash" and a.generation == 1
                assert await pool.call(a, "step", "z") == "z -> 1"  # fresh env in a new actor
                assert await pool.call(a, "steps") == 1
                with pytest.raises(EnvWorkerError) as info:
                    await pool.call(b, "step", "hang")
                assert info.value.kind == "timeout" and b.generation == 1
                assert await pool.call(b, "step", "w") == "w -> 1"
                assert (pool.stats.errors, pool.stats.crashes, pool.stats.timeouts) == (1, 1, 1)
                assert pool.stats.replaced == 2

        asyncio.run(main())
        _remote_envs_run_the_trainers_episode_runner()
    finally:
        ray.shutdown()


def _remote_envs_run_the_trainers_episode_runner() -> None:
    """Branches restored into Ray actors play a macro-step through run_branches exactly like local envs."""
    pytest.importorskip("transformers", reason="needs the local extra for the offline tokenizer")
    import re

    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.backends.types import SampledSequence, SampleResult, SamplingParams
    from tempo_rl.envs import make
    from tempo_rl.envs.workers import RayEnvWorkerPool
    from tempo_rl.rollout.branches import RolloutSettings, run_branches
    from tempo_rl.rollout.renderer import ChatRenderer
    from tempo_rl.rollout.tool_call import ToolCallParser, format_tool_call
    from tempo_rl.training.types import StoredState

    chat = ChatRenderer(build_tokenizer(["go on", "take green"], vocab_size=500))

    class First:
        async def sample_async(self, prompt: list[int], n: int, params: SamplingParams) -> SampleResult:
            text = chat.tokenizer.decode(list(prompt), skip_special_tokens=False)
            reply = format_tool_call(re.findall(r"Actions: ([^|\n<]+)", text)[-1].strip(), "env_step")
            tokens = (*chat.tokenizer.encode(reply, add_special_tokens=False), chat.tokenizer.eos_token_id)
            return SampleResult((SampledSequence(tokens, (0.0,) * len(tokens), reply),) * n)

    local = make("keydoor")
    local.reset(5)
    for _ in range(3):
        local.step(local.last_observation.admissible_actions[0])
    snapshot = local.snapshot()
    start = StoredState.at_reset(snapshot, game_id="keydoor:5", task="", policy_version=0)
    settings = RolloutSettings(sampling=SamplingParams(max_tokens=64), max_rounds=40, segment_rounds=4)
    with RayEnvWorkerPool(max_workers=2, step_timeout_s=30.0) as pool:
        remote = pool.restore_branches(snapshot, 2)
        assert remote[0].snapshot() == snapshot and remote[0].last_observation == local.last_observation
        (row,), stats = asyncio.run(
            run_branches(
                [start],
                [remote],
                sampler=First(),
                chat=chat,
                settings=settings,
                pool=pool,
                parser=ToolCallParser(),
            )
        )
        for _ in range(4):
            local.step(local.last_observation.admissible_actions[0])
        for branch in row:
            assert branch.end_reason == "macro_boundary" and branch.snapshot == local.snapshot()
        assert stats.env_errors == 0 and pool.stats.calls >= 8
        for env in remote:
            env.close()
