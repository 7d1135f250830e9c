"""critic_rewards on hand-computed numbers, plus its error messages."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from tempo_rl.signals import critic_rewards


def test_l1_batched_with_per_group_targets() -> None:
    out = critic_rewards([[0.0, 1.0], [0.5, 0.25]], [0.25, 0.5])
    assert_allclose(out, [[-0.25, -0.75], [0.0, -0.25]], rtol=0, atol=1e-15)


def test_keepdims_targets_are_accepted() -> None:
    out = critic_rewards([[0.0, 1.0], [0.5, 0.25]], [[0.25], [0.5]])
    assert_allclose(out, [[-0.25, -0.75], [0.0, -0.25]], rtol=0, atol=1e-15)


def test_brier() -> None:
    # -((V - G) / R_max)**2 with R_max = 2: -(0.5 / 2)**2, -(1 / 2)**2, failure
    out = critic_rewards([1.5, 2.0, math.nan], 1.0, r_max=2.0, error="brier", failure_reward=-2.0)
    assert_allclose(out, [-0.0625, -0.25, -2.0], rtol=0, atol=1e-15)


def test_r_max_scales_l1() -> None:
    assert_allclose(critic_rewards([0.0, 3.0], 1.0, r_max=4.0), [-0.25, -0.5])


def test_exact_estimate_is_positive_zero() -> None:
    out = critic_rewards([0.45], 0.45)
    assert out[0] == 0.0 and not np.signbit(out[0])


def test_all_unparsed() -> None:
    assert_allclose(critic_rewards([math.nan, math.nan], 0.3, failure_reward=-0.5), [-0.5, -0.5])


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (([0.5], 0.5), {"error": "bogus"}, r"error must be one of \('l1', 'brier'\); got 'bogus'"),
        (([0.5], 0.5), {"r_max": 0.0}, "r_max must be a positive"),
        (([0.5], 0.5), {"r_max": -1.0}, "r_max must be a positive"),
        (([0.5], 0.5), {"failure_reward": math.nan}, "failure_reward"),
        (([[0.5, 0.5], [0.5, 0.5]], [0.5]), {}, r"one value per group, shape \(2,\)"),
        (([[0.5, 0.5]], 0.5), {}, r"one value per group, shape \(1,\)"),
        (([[0.5, 0.5]], [[0.5, 0.5]]), {}, r"targets has shape \(1, 2\)"),
        (([0.5], math.nan), {}, "targets has 1 non-finite"),
        (([math.inf], 0.5), {}, "estimates has 1 non-finite"),
        ((0.5, 0.5), {}, "scalar"),
    ],
)
def test_errors(args: tuple[object, object], kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        critic_rewards(*args, **kwargs)  # type: ignore[arg-type]
