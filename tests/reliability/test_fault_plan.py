"""The fault-injection layer itself: deterministic from a seed, calibrated rates, and faithful faults."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.envs import make, restore
from tempo_rl.envs.restore import ReplayDivergenceError
from tempo_rl.envs.snapshot import EnvSpec
from tempo_rl.envs.workers import EnvWorkerError, EnvWorkerPool
from tempo_rl.testing.faults import (
    FAULT_KINDS,
    FaultPlan,
    FaultRates,
    FaultyEnv,
    InjectedEnvCrash,
    corrupt_snapshot,
    faulty_restore_branches,
)

SPEC = EnvSpec(name="keydoor", kwargs={"horizon": 12, "keys": 1, "colours": 2})


def _draws(plan: FaultPlan, n: int) -> list[bool]:
    return [plan.fires("env_crash", f"env|{i % 7}") for i in range(n)]


@settings(max_examples=25)
@given(seed=st.integers(0, 2**31), rate=st.floats(0.01, 0.99))
def test_same_seed_same_faults_and_calls_are_independent_of_order(seed: int, rate: float) -> None:
    a, b = FaultPlan(FaultRates(env_crash=rate), seed), FaultPlan(FaultRates(env_crash=rate), seed)
    assert _draws(a, 200) == _draws(b, 200)
    # the decision for (key, n-th call with that key) does not depend on other keys' calls
    c = FaultPlan(FaultRates(env_crash=rate), seed)
    only_key_3 = [c.fires("env_crash", "env|3") for _ in range(200 // 7 + 1)]
    d = FaultPlan(FaultRates(env_crash=rate), seed)
    full = _draws(d, 7 * (200 // 7 + 1))
    assert only_key_3 == full[3::7]


def test_rates_are_calibrated_and_seeds_differ() -> None:
    n, rate = 20_000, 0.05
    hits = sum(_draws(FaultPlan(FaultRates(env_crash=rate), seed=1), n))
    sigma = math.sqrt(n * rate * (1 - rate))
    assert abs(hits - n * rate) < 5 * sigma
    assert _draws(FaultPlan(FaultRates(env_crash=0.5), 1), 64) != _draws(
        FaultPlan(FaultRates(env_crash=0.5), 2), 64
    )
    assert not any(_draws(FaultPlan(FaultRates(), 0), 500))  # rate 0: never


def test_caps_and_bad_arguments() -> None:
    plan = FaultPlan(FaultRates(optim_fail=1.0), max_faults={"optim_fail": 2})
    assert [plan.fires("optim_fail", str(i)) for i in range(4)] == [True, True, False, False]
    assert plan.injected["optim_fail"] == 2
    with pytest.raises(ValueError, match=r"FaultRates\.garbage must be a probability"):
        FaultRates(garbage=1.5)
    with pytest.raises(ValueError, match="unknown fault kinds"):
        FaultPlan(FaultRates(), max_faults={"env_explodes": 1})
    assert set(FaultRates.uniform(0.1).__dict__) == set(FAULT_KINDS)


def test_a_corrupted_snapshot_fails_verified_replay_and_a_clean_one_restores() -> None:
    env = make(SPEC)
    env.reset(3)
    for action in ("go on", "go on", "go on"):
        env.step(action)
    snap = env.snapshot()
    assert restore(snap).last_observation.text == env.last_observation.text
    for step in (1, 3):
        with pytest.raises(ReplayDivergenceError) as info:
            restore(corrupt_snapshot(snap, step))
        assert info.value.step == step
    with pytest.raises(ValueError, match="step must be in"):
        corrupt_snapshot(snap, 0)


def test_faulty_restore_only_corrupts_stored_states_and_logs_detection() -> None:
    env = make(SPEC)
    env.reset(0)
    fresh = env.snapshot()  # no action: never corrupted
    env.step("go on")
    stored = env.snapshot()
    plan = FaultPlan(FaultRates(replay_divergence=1.0))
    wrapped = faulty_restore_branches(lambda s, n: [restore(s) for _ in range(n)], plan, clock=lambda: 7)
    assert len(wrapped(fresh, 2)) == 2
    with pytest.raises(ReplayDivergenceError):
        wrapped(stored, 2)
    assert plan.divergence_log == [(stored.id, 7, True)] and plan.diverged_states == [stored.id]


def test_faulty_env_crashes_and_hangs_through_the_pool() -> None:
    env = make(SPEC)
    env.reset(0)
    crash = FaultyEnv(env, FaultPlan(FaultRates(env_crash=1.0)), "a")
    with pytest.raises(InjectedEnvCrash):
        crash.step("go on")
    assert crash.round_index == 0  # nothing reached the env; other attributes are forwarded
    hang = FaultyEnv(env, FaultPlan(FaultRates(env_hang=1.0), hang_s=0.5), "b")

    async def go() -> None:
        with EnvWorkerPool(max_workers=1, step_timeout_s=0.1) as pool:
            with pytest.raises(EnvWorkerError) as info:
                await pool.call(hang, "step", "go on")
            assert info.value.kind == "timeout" and pool.stats.replaced == 1

    asyncio.run(go())
