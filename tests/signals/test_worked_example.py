"""The issue's worked example, end to end, pinned on hand-computed numbers (numpy path)."""

from __future__ import annotations

import math

import numpy as np
from numpy.testing import assert_allclose

from tempo_rl.signals import (
    branch_returns,
    critic_rewards,
    degenerate_groups,
    group_advantages,
    td_targets,
)

REWARDS = [0.0, 0.0, 1.0, 0.0]
ENDPOINTS = [0.6, 0.2, 0.9, 0.3]
TERMINATED = [False, False, True, True]
ESTIMATES = [0.5, math.nan, 0.45, 0.9]


def test_worked_example_actor_signals() -> None:
    returns = branch_returns(REWARDS, ENDPOINTS, TERMINATED)
    assert isinstance(returns, np.ndarray)
    # R = r + (1 - terminated) * V: [0 + 0.6, 0 + 0.2, 1 + 0 (terminal), 0 + 0 (terminal)]
    assert_allclose(returns, [0.6, 0.2, 1.0, 0.0], rtol=0, atol=1e-15)
    target = td_targets(returns)
    assert target.shape == ()
    assert_allclose(target, 0.45, rtol=0, atol=1e-15)  # (0.6 + 0.2 + 1.0 + 0.0) / 4
    advantages = group_advantages(returns)
    assert_allclose(advantages, [0.15, -0.25, 0.55, -0.45], rtol=0, atol=1e-15)
    assert not bool(degenerate_groups(advantages))


def test_worked_example_critic_signals() -> None:
    rewards = critic_rewards(ESTIMATES, 0.45)
    # -|0.5 - 0.45|, NaN -> failure -1, -|0.45 - 0.45|, -|0.9 - 0.45|
    assert_allclose(rewards, [-0.05, -1.0, 0.0, -0.45], rtol=0, atol=1e-15)
    # mean = -1.5 / 4 = -0.375
    assert_allclose(group_advantages(rewards), [0.325, -0.625, 0.375, -0.075], rtol=0, atol=1e-15)


def test_worked_example_chained_through_computed_target() -> None:
    target = td_targets(branch_returns(REWARDS, ENDPOINTS, TERMINATED))
    advantages = group_advantages(critic_rewards(ESTIMATES, target))
    assert_allclose(advantages, [0.325, -0.625, 0.375, -0.075], rtol=0, atol=1e-15)
