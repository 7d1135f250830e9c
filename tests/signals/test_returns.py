"""branch_returns, td_targets and monte_carlo_returns on hand-computed numbers, plus their error messages."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from tempo_rl.signals import branch_returns, monte_carlo_returns, td_targets

NAN = math.nan


class TestBranchReturns:
    def test_terminated_endpoint_is_ignored_even_when_nan(self) -> None:
        out = branch_returns([1.0, 0.0], [NAN, NAN], [True, True])
        assert_array_equal(out, [1.0, 0.0])

    def test_discount_and_lengths(self) -> None:
        # R = r + gamma**len * V on truncated branches: 0.5 + 0.5**2 * 0.8 = 0.7; 0 + 0.5**3 * 0.8 = 0.1
        out = branch_returns(
            [0.5, 0.0, 1.0], [0.8, 0.8, 0.8], [False, False, True], gamma=0.5, segment_lengths=[2, 3, 1]
        )
        assert_allclose(out, [0.7, 0.1, 1.0], rtol=0, atol=1e-15)

    def test_discount_without_lengths_counts_one_step(self) -> None:
        assert_allclose(branch_returns([0.0], [0.8], [False], gamma=0.5), [0.4])

    def test_scalar_segment_length_broadcasts(self) -> None:
        assert_allclose(
            branch_returns([0.0, 0.0], [1.0, 0.5], [False, False], gamma=0.5, segment_lengths=2),
            [0.25, 0.125],
        )

    def test_missing_value_substitutes_nan_on_truncated_branch(self) -> None:
        out = branch_returns([0.0, 1.0, 0.0], [NAN, NAN, 0.3], [False, True, False], missing_value=0.25)
        assert_allclose(out, [0.25, 1.0, 0.3])

    def test_nan_on_truncated_branch_without_missing_value_raises(self) -> None:
        with pytest.raises(ValueError, match="missing_value"):
            branch_returns([0.0, 0.0], [0.5, NAN], [False, False])

    def test_batched_shape_and_dtype(self) -> None:
        r = np.zeros((2, 3), dtype=np.float32)
        out = branch_returns(r, np.full((2, 3), 0.5, dtype=np.float32), np.zeros((2, 3), dtype=bool))
        assert out.shape == (2, 3) and out.dtype == np.float32
        assert_array_equal(out, np.full((2, 3), 0.5, dtype=np.float32))

    def test_terminated_accepts_zero_one_numbers(self) -> None:
        assert_allclose(branch_returns([0.0, 0.0], [0.5, 0.5], [1, 0]), [0.0, 0.5])

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"endpoint_values": [0.5]}, "endpoint_values has shape"),
            ({"terminated": [False]}, "terminated has shape"),
            ({"terminated": [0, 2]}, "terminated must be boolean"),
            ({"gamma": 1.5}, "gamma must be"),
            ({"gamma": -0.1}, "gamma must be"),
            ({"segment_lengths": [1, -1]}, "non-negative"),
            ({"segment_lengths": [1, 2, 3]}, "segment_lengths has shape"),
            ({"segment_rewards": [NAN, 0.0]}, "segment_rewards has 1 non-finite"),
            ({"endpoint_values": [math.inf, 0.0]}, "endpoint_values has 1 non-finite"),
            ({"missing_value": math.inf, "endpoint_values": [NAN, 0.0]}, "missing_value must be"),
            ({"segment_rewards": ["a", "b"]}, "must hold real numbers"),
            ({"segment_rewards": [[0.0], [0.0, 1.0]]}, "rectangular"),
        ],
    )
    def test_errors(self, kwargs: dict[str, object], message: str) -> None:
        args: dict[str, object] = {
            "segment_rewards": [0.0, 0.0],
            "endpoint_values": [0.5, 0.5],
            "terminated": [False, False],
        }
        args.update(kwargs)
        with pytest.raises(ValueError, match=message):
            branch_returns(**args)  # type: ignore[arg-type]


class TestTdTargets:
    def test_batched_means(self) -> None:
        assert_allclose(td_targets([[1.0, 2.0, 3.0], [0.0, 0.0, 0.3]]), [2.0, 0.1], rtol=0, atol=1e-15)

    def test_mask_excludes_padding_including_nan(self) -> None:
        out = td_targets(
            [[1.0, 3.0, NAN], [4.0, 100.0, 100.0]], mask=[[True, True, False], [True, False, False]]
        )
        assert_array_equal(out, [2.0, 4.0])

    def test_fully_masked_group_is_zero(self) -> None:
        assert_array_equal(
            td_targets([[5.0, 7.0], [1.0, 2.0]], mask=[[False, False], [True, True]]), [0.0, 1.5]
        )

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="scalar"):
            td_targets(1.0)
        with pytest.raises(ValueError, match="mask has shape"):
            td_targets([1.0, 2.0], mask=[True])
        with pytest.raises(ValueError, match="non-finite"):
            td_targets([1.0, NAN])
        with pytest.raises(ValueError, match="mask must be boolean"):
            td_targets([1.0, 2.0], mask=[0.5, 1.0])


class TestMonteCarloReturns:
    def test_undiscounted_reward_to_go(self) -> None:
        assert_array_equal(
            monte_carlo_returns([[0.0, 0.0, 1.0], [1.0, 2.0, 3.0]]), [[1.0, 1.0, 1.0], [6.0, 5.0, 3.0]]
        )

    def test_discounted(self) -> None:
        # G_2 = 2; G_1 = 0 + 0.5 * 2 = 1; G_0 = 1 + 0.5 * 1 = 1.5
        assert_allclose(monte_carlo_returns([1.0, 0.0, 2.0], gamma=0.5), [1.5, 1.0, 2.0])

    def test_trailing_padding_returns_zero_and_does_not_leak(self) -> None:
        out = monte_carlo_returns([[1.0, 1.0, NAN, 9.0]], gamma=0.5, mask=[[True, True, False, False]])
        assert_array_equal(out, [[1.5, 1.0, 0.0, 0.0]])

    def test_inner_masked_step_is_skipped(self) -> None:
        # the masked step neither adds reward nor counts for the discount: G_0 = 1 + 0.5 * 2
        assert_allclose(
            monte_carlo_returns([1.0, 7.0, 2.0], gamma=0.5, mask=[True, False, True]), [2.0, 0.0, 2.0]
        )

    def test_empty_time_axis(self) -> None:
        assert monte_carlo_returns(np.zeros((3, 0))).shape == (3, 0)

    def test_errors(self) -> None:
        with pytest.raises(ValueError, match="gamma"):
            monte_carlo_returns([1.0], gamma=2.0)
        with pytest.raises(ValueError, match="scalar"):
            monte_carlo_returns(1.0)
        with pytest.raises(ValueError, match="non-finite"):
            monte_carlo_returns([1.0, math.inf])
