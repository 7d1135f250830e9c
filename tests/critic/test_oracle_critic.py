"""OracleCritic: exact V* of the restored state, the noise pinned on hand-computed numbers, clear errors."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.critic import CriticQuery, OracleCritic, OracleUnavailableError
from tempo_rl.critic.oracle import apply_value_noise
from tempo_rl.envs import make
from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult
from tempo_rl.envs.snapshot import Snapshot

KEYDOOR = {"horizon": 16, "keys": 1, "colours": 2, "clue_gap": 0}  # seed 0: the right key is red; 13 steps


def _snapshot(actions: list[str]) -> Snapshot:
    env = make("keydoor", **KEYDOOR)
    env.reset(seed=0)
    for action in actions:
        env.step(action)
    return env.snapshot()


def _query(snapshot: Snapshot | None, remaining: int | None, r_max: float = 1.0) -> CriticQuery:
    return CriticQuery(
        task="t",
        history=(),
        initial_observation="o",
        remaining_steps=remaining,
        r_max=r_max,
        snapshot=snapshot,
    )


def _estimate(critic: OracleCritic, query: CriticQuery, k: int = 3, seed: int | None = 1) -> np.ndarray:
    return asyncio.run(critic.estimate(query, k, sampler=None, seed=seed)).values  # type: ignore[arg-type]


def test_exact_values_after_the_right_key_the_wrong_key_and_too_few_steps() -> None:
    critic = OracleCritic()
    right = _snapshot(["go on", "take red"])  # 11 more steps reach the exit
    assert _estimate(critic, _query(right, 14)).tolist() == [1.0, 1.0, 1.0]
    assert _estimate(critic, _query(right, 10)).tolist() == [0.0, 0.0, 0.0]
    wrong = _snapshot(["go on", "take blue"])
    assert _estimate(critic, _query(wrong, 14)).tolist() == [0.0, 0.0, 0.0]
    assert critic.queries == 3 and critic.replayed_steps == 6
    est = asyncio.run(critic.estimate(_query(right, 14), 2, sampler=None))  # type: ignore[arg-type]
    assert est.samples == () and est.parse_failures == 0  # nothing to train, nothing unparsed


def test_without_remaining_steps_it_counts_from_max_rounds() -> None:
    right = _snapshot(["go on", "take red"])  # round 2
    assert _estimate(OracleCritic(max_rounds=13), _query(right, None)).tolist() == [1.0] * 3  # 11 left
    assert _estimate(OracleCritic(max_rounds=12), _query(right, None)).tolist() == [0.0] * 3  # 10 left
    with pytest.raises(OracleUnavailableError, match="max_rounds"):
        _estimate(OracleCritic(), _query(right, None))


def test_flip_and_gaussian_noise_pinned_on_seed_7() -> None:
    """default_rng(7): u = 0.6251, 0.8972, 0.7757, 0.2252; z = -0.4547, -0.9916, 0.0601, 1.3402. With p = 0.5 only
    sample 4 flips (1 -> 0); sigma = 0.2 then gives 1 - 0.0909, 1 - 0.1983, min(1, 1.012), 0 + 0.2680."""
    critic = OracleCritic(flip_prob=0.5, sigma=0.2)
    values = _estimate(critic, _query(_snapshot(["go on", "take red"]), 14), k=4, seed=7)
    expected = [1 + 0.2 * -0.45467078517172255, 1 + 0.2 * -0.9916465549964624, 1.0, 0.2 * 1.3402152455545335]
    assert values == pytest.approx(expected, abs=1e-12)
    assert values == pytest.approx([0.909066, 0.801671, 1.0, 0.268043], abs=1e-6)
    # the same seed reproduces the same noise (a resumed run); another seed differs
    again = _estimate(critic, _query(_snapshot(["go on", "take red"]), 14), k=4, seed=7)
    assert again.tolist() == values.tolist()
    assert (
        _estimate(critic, _query(_snapshot(["go on", "take red"]), 14), k=4, seed=8).tolist()
        != values.tolist()
    )


def test_flip_probability_one_always_answers_the_opposite() -> None:
    critic = OracleCritic(flip_prob=1.0)
    assert _estimate(critic, _query(_snapshot(["go on", "take red"]), 14)).tolist() == [0.0] * 3
    assert _estimate(critic, _query(_snapshot(["go on", "take blue"]), 14)).tolist() == [1.0] * 3


class _NoOracle(ReplayableEnv):
    def reset(self, seed: int | None = None) -> Observation:
        return Observation("start")

    def step(self, action: str) -> StepResult:
        return StepResult(Observation("same"))


class _TooBig(_NoOracle):
    def oracle_value(self, steps_left: int) -> float | None:
        return 2.0


def test_clear_errors() -> None:
    with pytest.raises(OracleUnavailableError, match="snapshot"):
        _estimate(OracleCritic(), _query(None, 5))
    snap = _snapshot([])
    with pytest.raises(OracleUnavailableError, match=r"no oracle.*oracle_value"):
        _estimate(OracleCritic(restore=lambda s: _NoOracle()), _query(snap, 5))
    with pytest.raises(ValueError, match=r"outside \[0, r_max"):
        _estimate(OracleCritic(restore=lambda s: _TooBig()), _query(snap, 5))
    for bad in (
        {"flip_prob": 1.5},
        {"flip_prob": -0.1},
        {"sigma": -1.0},
        {"sigma": math.inf},
        {"max_rounds": 0},
    ):
        with pytest.raises(ValueError):
            OracleCritic(**bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Snapshot"):
        _query("not a snapshot", 5)  # type: ignore[arg-type]


@settings(max_examples=200)
@given(
    value=st.floats(0.0, 1.0),
    r_max=st.floats(0.5, 5.0),
    flip=st.floats(0.0, 1.0),
    sigma=st.floats(0.0, 3.0),
    seed=st.integers(0, 2**31 - 1),
    k=st.integers(1, 16),
)
def test_noise_keeps_values_in_range_and_zero_noise_is_exact(
    value: float, r_max: float, flip: float, sigma: float, seed: int, k: int
) -> None:
    v = value * r_max
    noisy = apply_value_noise(v, k, r_max=r_max, flip_prob=flip, sigma=sigma, rng=np.random.default_rng(seed))
    assert noisy.shape == (k,)
    assert np.all((noisy >= 0.0) & (noisy <= r_max))
    exact = apply_value_noise(v, k, r_max=r_max, flip_prob=0.0, sigma=0.0, rng=np.random.default_rng(seed))
    assert exact.tolist() == [v] * k
    flipped = apply_value_noise(v, k, r_max=r_max, flip_prob=1.0, sigma=0.0, rng=np.random.default_rng(seed))
    assert flipped.tolist() == [r_max - v] * k
