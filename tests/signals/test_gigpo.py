"""GiGPO's signal functions: a hand-computed example and the properties that tie them to GRPO."""

from __future__ import annotations

from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from tempo_rl.signals import (
    anchor_group_stats,
    anchor_groups,
    gigpo_batch,
    group_advantages,
    step_advantages,
    step_returns,
)

# One episode group of 4 trajectories (padded to 4 steps). They share two states: the start "s0" (all four)
# and "a" (trajectories 0 and 1, at their second step); every other state is visited once.
KEYS = np.array(
    [
        ["s0", "a", "b", ""],
        ["s0", "a", "c", ""],
        ["s0", "d", "", ""],
        ["s0", "e", "f", "g"],
    ],
    dtype=object,
)
REWARDS = np.array([[0, 0, 1, 0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]], dtype=float)
MASK = np.array(
    [[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]],
    dtype=bool,
)


def test_step_returns_by_hand() -> None:
    # gamma = 0.5: R_t = r_t + 0.5 R_{t+1}
    assert_allclose(
        step_returns(REWARDS, gamma=0.5, mask=MASK),
        [[0.25, 0.5, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
    )


def test_anchor_groups_by_hand() -> None:
    ids = anchor_groups(KEYS, mask=MASK)
    # row-major first appearance: s0=0, a=1, b=2, c=3, d=4, e=5, f=6, g=7; padding -1
    assert_array_equal(ids, [[0, 1, 2, -1], [0, 1, 3, -1], [0, 4, -1, -1], [0, 5, 6, 7]])
    stats = anchor_group_stats(ids, mask=MASK)
    assert (stats.groups, stats.mean_size, stats.shared_share) == (8, 1.5, 0.5)  # 12 steps, 6 shared


def test_anchor_groups_never_span_episode_groups() -> None:
    ids = anchor_groups(np.array([[["s", "t"]], [["s", "t"]]], dtype=object))
    assert_array_equal(ids, [[[0, 1]], [[2, 3]]])


def test_step_advantages_by_hand() -> None:
    returns = step_returns(REWARDS, gamma=0.5, mask=MASK)
    adv = step_advantages(returns, anchor_groups(KEYS, mask=MASK), mask=MASK)
    # s0: returns 0.25, 0, 0.5, 0 (mean 0.1875); a: 0.5, 0 (mean 0.25); singletons 0
    assert_allclose(
        adv,
        [
            [0.0625, 0.25, 0.0, 0.0],
            [-0.1875, -0.25, 0.0, 0.0],
            [0.3125, 0.0, 0.0, 0.0],
            [-0.1875, 0.0, 0.0, 0.0],
        ],
    )
    # with the std: s0's population std is sqrt(0.04296875); a's is 0.25
    std = step_advantages(returns, anchor_groups(KEYS, mask=MASK), mask=MASK, normalize="std")
    assert_allclose(std[:, 0], np.array([0.0625, -0.1875, 0.3125, -0.1875]) / np.sqrt(0.04296875))
    assert_allclose(std[:2, 1], [1.0, -1.0])


def test_gigpo_batch_by_hand() -> None:
    b = gigpo_batch(REWARDS, KEYS, mask=MASK, gamma=0.5, step_weight=1.0)
    assert_allclose(b.episode_returns, [1, 0, 1, 0])
    assert_allclose(b.episode_advantages, [0.5, -0.5, 0.5, -0.5])
    assert_allclose(
        b.advantages,
        [
            [0.5625, 0.75, 0.5, 0.0],
            [-0.6875, -0.75, -0.5, 0.0],
            [0.8125, 0.5, 0.0, 0.0],
            [-0.6875, -0.5, -0.5, -0.5],
        ],
    )
    # |A^S| sums to 1.25 over the steps, |A^E| to 6.0
    assert b.step_share == pytest.approx(1.25 / 7.25)
    half = gigpo_batch(REWARDS, KEYS, mask=MASK, gamma=0.5, step_weight=0.5)
    assert_allclose(half.advantages[0, :2], [0.53125, 0.625])


def test_bad_input_names_the_problem() -> None:
    with pytest.raises(ValueError, match="at least 2 axes"):
        anchor_groups(["s0", "a"])
    with pytest.raises(ValueError, match="not a usable state key"):
        anchor_groups(np.array([["s0", None]], dtype=object))
    with pytest.raises(ValueError, match="step_weight"):
        gigpo_batch(REWARDS, KEYS, mask=MASK, step_weight=-1.0)
    with pytest.raises(ValueError, match="anchors has shape"):
        step_advantages([0.0, 1.0], [0])
    with pytest.raises(ValueError, match="normalize"):
        step_advantages([0.0], [0], normalize="max")


@st.composite
def episode_groups(draw: Any) -> tuple[np.ndarray, np.ndarray]:
    """(rewards [G, N, T], mask [G, N, T]) with every trajectory at least one step long."""
    g, n, t = draw(st.integers(1, 3)), draw(st.integers(2, 5)), draw(st.integers(1, 6))
    rewards = draw(hnp.arrays(np.float64, (g, n, t), elements=st.floats(-2.0, 2.0, allow_nan=False)))
    lengths = draw(hnp.arrays(np.int64, (g, n), elements=st.integers(1, t)))
    mask = np.arange(t)[None, None, :] < lengths[..., None]
    return rewards, mask


@given(episode_groups(), st.sampled_from([None, "std"]), st.floats(0.0, 1.0))
def test_distinct_states_or_no_step_weight_give_grpo(
    batch: tuple[np.ndarray, np.ndarray], normalize: str | None, gamma: float
) -> None:
    rewards, mask = batch
    distinct = np.arange(rewards.size).reshape(rewards.shape).astype(str).astype(object)
    episode_returns = np.where(mask, rewards, 0.0).sum(axis=-1)
    grpo = np.asarray(group_advantages(episode_returns, normalize=normalize))
    expected = np.where(mask, grpo[..., None], 0.0)
    b = gigpo_batch(rewards, distinct, mask=mask, gamma=gamma, normalize=normalize)
    assert_allclose(b.advantages, expected, atol=1e-12)
    assert b.anchor_stats().shared_share == 0.0
    # w = 0 with every state the same: the step level is switched off, whatever the groups
    same = np.full(rewards.shape, "s", dtype=object)
    b0 = gigpo_batch(rewards, same, mask=mask, gamma=gamma, step_weight=0.0, normalize=normalize)
    assert_allclose(b0.advantages, expected, atol=1e-12)


@given(episode_groups(), st.floats(0.0, 1.0))
def test_step_advantages_centre_every_anchor_group(
    batch: tuple[np.ndarray, np.ndarray], gamma: float
) -> None:
    rewards, mask = batch
    rng = np.random.default_rng(int(abs(rewards).sum() * 1000) % 2**32)
    keys = rng.integers(0, 3, size=rewards.shape).astype(str).astype(object)  # states recur often
    b = gigpo_batch(rewards, keys, mask=mask, gamma=gamma)
    for anchor in np.unique(b.anchors[b.mask]):
        members = b.anchors == anchor
        assert abs(b.step_advantages[members].sum()) < 1e-9
    assert_array_equal(b.advantages[~mask], 0.0)
    assert_array_equal(b.anchors[~mask], -1)
