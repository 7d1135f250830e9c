"""Hypothesis property tests of the signal maths (numpy path).

Properties from the issue: advantages sum to zero per group; masked entries never leak into any mean; L1
rewards lie in [-1, 0] when estimates and targets lie in [0, R_max]; shapes are preserved; batched calls equal
per-group calls (including ragged groups given by a mask).
"""

from __future__ import annotations

from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal

from tempo_rl.signals import (
    STD_EPS,
    branch_returns,
    critic_rewards,
    degenerate_groups,
    group_advantages,
    monte_carlo_returns,
    td_targets,
)

SETTINGS = settings(max_examples=60)
FINITE = st.floats(-100.0, 100.0, allow_nan=False, allow_infinity=False)
JUNK = st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300, 0.0, 42.0])
SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6)


@st.composite
def masked_batch(draw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, mask, junk): values [..., N] with a random mask and junk to plant in the padding."""
    shape = draw(SHAPES)
    values = draw(hnp.arrays(np.float64, shape, elements=FINITE))
    mask = draw(hnp.arrays(np.bool_, shape))
    junk = draw(hnp.arrays(np.float64, shape, elements=JUNK))
    return values, mask, junk


def _sum_tolerance(values: np.ndarray, mask: np.ndarray, normalize: str | None) -> np.ndarray:
    """Per-group rounding bound on sum(A): N * 1e-12 * max|x|, divided by the std when it normalises."""
    n = values.shape[-1]
    bound = n * 1e-12 * (1.0 + np.max(np.where(mask, np.abs(values), 0.0), axis=-1))
    if normalize == "std":
        count = np.maximum(mask.sum(axis=-1), 1)
        mean = np.where(mask, values, 0.0).sum(axis=-1) / count
        std = np.sqrt((np.where(mask, values - mean[..., None], 0.0) ** 2).sum(axis=-1) / count)
        bound = bound / np.clip(std, STD_EPS, 1.0)
    return bound


@SETTINGS
@given(masked_batch(), st.sampled_from([None, "std"]))
def test_advantages_sum_to_zero_per_group(batch: tuple[np.ndarray, ...], normalize: str | None) -> None:
    values, mask, _ = batch
    for m in (mask, np.ones_like(mask)):
        adv = group_advantages(values, mask=m, normalize=normalize)
        sums = np.sum(np.where(m, adv, 0.0), axis=-1)
        assert np.all(np.abs(sums) <= _sum_tolerance(values, m, normalize)), sums


@SETTINGS
@given(masked_batch(), st.floats(0.0, 1.0))
def test_masked_entries_never_leak(batch: tuple[np.ndarray, ...], gamma: float) -> None:
    values, mask, junk = batch
    dirty = np.where(mask, values, junk)
    for fn in (
        lambda x: td_targets(x, mask=mask),
        lambda x: group_advantages(x, mask=mask),
        lambda x: group_advantages(x, mask=mask, normalize="std"),
        lambda x: monte_carlo_returns(x, gamma=gamma, mask=mask),
        lambda x: degenerate_groups(x, mask=mask),
    ):
        clean_out, dirty_out = fn(values), fn(dirty)
        assert_array_equal(clean_out, dirty_out)
    for fn in (
        lambda x: group_advantages(x, mask=mask),
        lambda x: monte_carlo_returns(x, gamma=gamma, mask=mask),
    ):
        assert_array_equal(np.where(mask, 0.0, fn(dirty)), 0.0)  # padding is returned as 0


@SETTINGS
@given(
    hnp.arrays(np.float64, SHAPES, elements=st.floats(0.0, 1.0)),
    st.floats(0.01, 100.0),
    st.sampled_from(["l1", "brier"]),
    st.data(),
)
def test_critic_rewards_in_unit_range(unit: np.ndarray, r_max: float, error: str, data: Any) -> None:
    estimates = unit * r_max
    targets = data.draw(hnp.arrays(np.float64, unit.shape[:-1], elements=st.floats(0.0, 1.0))) * r_max
    nan_at = data.draw(hnp.arrays(np.bool_, unit.shape))
    estimates = np.where(nan_at, np.nan, estimates)
    rewards = critic_rewards(estimates, targets, r_max=r_max, error=error)
    assert rewards.shape == estimates.shape
    assert np.all(rewards >= -1.0 - 1e-12) and np.all(rewards <= 0.0)
    assert_array_equal(rewards[nan_at], -1.0)


@SETTINGS
@given(masked_batch(), st.data())
def test_shapes_preserved(batch: tuple[np.ndarray, ...], data: Any) -> None:
    values, mask, _ = batch
    terminated = data.draw(hnp.arrays(np.bool_, values.shape))
    assert branch_returns(values, values, terminated).shape == values.shape
    assert td_targets(values, mask=mask).shape == values.shape[:-1]
    assert group_advantages(values, mask=mask).shape == values.shape
    assert monte_carlo_returns(values, mask=mask).shape == values.shape
    assert degenerate_groups(values, mask=mask).shape == values.shape[:-1]
    assert critic_rewards(values, values[..., 0]).shape == values.shape


@SETTINGS
@given(masked_batch(), st.floats(0.0, 1.0), st.data())
def test_batched_equals_per_group(batch: tuple[np.ndarray, ...], gamma: float, data: Any) -> None:
    """Every batched call equals the same call on each group alone, keeping only its unmasked entries."""
    values, mask, junk = batch
    dirty = np.where(mask, values, junk)
    terminated = data.draw(hnp.arrays(np.bool_, values.shape))
    targets = data.draw(hnp.arrays(np.float64, values.shape[:-1], elements=FINITE))
    normalize = data.draw(st.sampled_from([None, "std"]))

    g = td_targets(dirty, mask=mask)
    adv = group_advantages(dirty, mask=mask, normalize=normalize)
    mc = monte_carlo_returns(dirty, gamma=gamma, mask=mask)
    deg = degenerate_groups(dirty, mask=mask)
    ret = branch_returns(values, values, terminated, gamma=gamma)
    crit = critic_rewards(values, targets)
    for idx in np.ndindex(values.shape[:-1]):
        row, m = values[idx], mask[idx]
        kept = row[m]
        if kept.size:
            assert_allclose(g[idx], td_targets(kept), rtol=1e-13, atol=1e-13)
            assert_allclose(adv[idx][m], group_advantages(kept, normalize=normalize), rtol=1e-12, atol=1e-12)
            assert_allclose(mc[idx][m], monte_carlo_returns(kept, gamma=gamma), rtol=1e-12, atol=1e-12)
            assert deg[idx] == degenerate_groups(kept)
        else:
            assert g[idx] == 0.0 and bool(deg[idx])
        assert_array_equal(ret[idx], branch_returns(row, row, terminated[idx], gamma=gamma))
        assert_array_equal(crit[idx], critic_rewards(row, targets[idx]))
