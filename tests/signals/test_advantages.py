"""group_advantages and degenerate_groups on hand-computed numbers, plus their error messages."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from tempo_rl.signals import STD_EPS, degenerate_groups, group_advantages


class TestGroupAdvantages:
    def test_centred_batched(self) -> None:
        out = group_advantages([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
        assert_allclose(out, [[-1.0, 0.0, 1.0], [0.0, 0.0, 0.0]], rtol=0, atol=1e-15)

    def test_std_normalisation_uses_population_std(self) -> None:
        # mean 2.5, population std = sqrt((2.25 + 0.25) * 2 / 4) = sqrt(1.25)
        out = group_advantages([1.0, 2.0, 3.0, 4.0], normalize="std")
        assert_allclose(out, np.array([-1.5, -0.5, 0.5, 1.5]) / math.sqrt(1.25), rtol=1e-15)

    def test_zero_std_is_guarded(self) -> None:
        out = group_advantages([[2.0, 2.0, 2.0], [1.0, 1.0 + STD_EPS / 10, 1.0]], normalize="std")
        assert np.all(np.isfinite(out))
        assert_array_equal(out[0], [0.0, 0.0, 0.0])
        assert np.max(np.abs(out[1])) < STD_EPS

    def test_mask_padding_is_zero_and_excluded(self) -> None:
        out = group_advantages(
            [[1.0, 3.0, math.nan], [4.0, 1e9, -1e9]], mask=[[True, True, False], [True, False, False]]
        )
        assert_array_equal(out, [[-1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])

    def test_masked_std(self) -> None:
        out = group_advantages([1.0, 3.0, 100.0], mask=[True, True, False], normalize="std")
        assert_array_equal(out, [-1.0, 1.0, 0.0])  # centred [-1, 1], std 1

    def test_fully_masked_group(self) -> None:
        out = group_advantages([[7.0, 8.0]], mask=[[False, False]], normalize="std")
        assert_array_equal(out, [[0.0, 0.0]])

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match=r"normalize must be one of \(None, 'std'\); got 'bogus'"):
            group_advantages([1.0, 2.0], normalize="bogus")
        with pytest.raises(ValueError, match="scalar"):
            group_advantages(3.0)
        with pytest.raises(ValueError, match="non-finite"):
            group_advantages([1.0, math.nan])


class TestDegenerateGroups:
    def test_basic(self) -> None:
        out = degenerate_groups([[0.0, 0.0, 0.0], [0.1, -0.1, 0.0], [1e-13, -1e-13, 0.0]])
        assert out.dtype == np.bool_
        assert_array_equal(out, [True, False, True])

    def test_atol(self) -> None:
        assert_array_equal(degenerate_groups([[0.05, -0.05], [0.2, -0.2]], atol=0.1), [True, False])

    def test_mask_ignores_padding_and_empty_group_is_degenerate(self) -> None:
        out = degenerate_groups(
            [[0.0, 5.0], [math.nan, 2.0], [1.0, 1.0]], mask=[[True, False], [False, False], [True, True]]
        )
        assert_array_equal(out, [True, True, False])

    def test_single_group_returns_0d(self) -> None:
        out = degenerate_groups([0.0, 0.0])
        assert out.shape == () and bool(out)

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="atol"):
            degenerate_groups([0.0], atol=-1.0)
        with pytest.raises(ValueError, match="NaN"):
            degenerate_groups([0.0, math.nan])
