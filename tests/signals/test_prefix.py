"""prefix_importance_weights on hand-computed numbers, plus its error messages."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from tempo_rl.signals import prefix_importance_weights


def test_ratio() -> None:
    out = prefix_importance_weights([-1.0, -2.0, 0.0], [-2.0, -1.0, 0.0])
    assert_allclose(out, [math.e, 1 / math.e, 1.0], rtol=1e-15)


def test_clip_hits_exact_bounds() -> None:
    out = prefix_importance_weights([-1.0, -3.0, -1.1], [-2.0, -1.0, -1.0], clip=(0.5, 2.0))
    assert_allclose(out, [2.0, 0.5, math.exp(-0.1)], rtol=1e-15)
    assert out[0] == 2.0 and out[1] == 0.5


def test_clip_without_overflow_and_open_bounds() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = prefix_importance_weights([5000.0, -5000.0], [0.0, 0.0], clip=(0.0, 3.0))
    assert_array_equal(out, [3.0, 0.0])
    assert_allclose(prefix_importance_weights([50.0], [0.0], clip=(1.0, math.inf)), [math.exp(50.0)])


def test_shape_preserved() -> None:
    assert prefix_importance_weights(np.zeros((2, 3)), np.zeros((2, 3))).shape == (2, 3)


@pytest.mark.parametrize(
    ("new", "old", "clip", "message"),
    [
        ([0.0, 0.0], [0.0], None, "old_logprob_sums has shape"),
        ([math.nan], [0.0], None, "new_logprob_sums has 1 non-finite"),
        ([0.0], [-math.inf], None, "old_logprob_sums has 1 non-finite"),
        ([0.0], [0.0], (2.0, 1.0), "0 <= low <= high"),
        ([0.0], [0.0], (-1.0, 1.0), "0 <= low <= high"),
        ([0.0], [0.0], (1.0,), "pair"),
    ],
)
def test_errors(new: list[float], old: list[float], clip: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        prefix_importance_weights(new, old, clip=clip)  # type: ignore[arg-type]
