"""kl_penalized_advantages on hand-computed numbers, properties and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from numpy.testing import assert_allclose, assert_array_equal

from tempo_rl.signals import kl_penalized_advantages


def test_hand_computed() -> None:
    # A = 0.5 on both tokens; k = lp - lp_ref = 0 and +2 nats; beta = 0.1 -> 0.5 and 0.5 - 0.2
    assert_allclose(kl_penalized_advantages([0.5, 0.5], [-1.0, -0.5], [-1.0, -2.5], coef=0.1), [0.5, 0.3])
    # a token the policy now likes less than the reference (k = -1.5) is pushed up: 0 + 0.2 * 1.5
    assert_allclose(kl_penalized_advantages([0.0], [-3.0], [-1.5], coef=0.2), [0.3])


def test_mask_zeroes_context_and_ignores_its_values() -> None:
    out = kl_penalized_advantages(
        [[9.0, 0.25, 0.25]], [[math.nan, -0.5, -2.0]], [[math.inf, -1.0, -1.0]], coef=0.5, mask=[[0, 1, 1]]
    )
    assert_allclose(out, [[0.0, 0.0, 0.75]])  # 0.25 - 0.5 * 0.5, 0.25 - 0.5 * (-1)


def test_coef_zero_is_the_identity_on_sampled_tokens() -> None:
    out = kl_penalized_advantages([0.3, -0.2], [-1.0, -7.0], [-2.0, -0.1], coef=0.0)
    assert_array_equal(out, [0.3, -0.2])


def test_torch_in_torch_out() -> None:
    torch = pytest.importorskip("torch")
    a = torch.tensor([0.5, 0.5], dtype=torch.float64)
    out = kl_penalized_advantages(a, torch.tensor([-1.0, -0.5]), [-1.0, -2.5], coef=0.1)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    assert_allclose(out.numpy(), [0.5, 0.3])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"coef": -0.1}, "coef must be a finite weight >= 0"),
        ({"coef": math.nan}, "coef must be a finite weight >= 0"),
        ({"coef": 0.1, "logprobs": [-1.0]}, "logprobs has shape"),
        (
            {"coef": 0.1, "ref_logprobs": [-1.0, math.nan]},
            "ref_logprobs has 1 non-finite.*Mask the positions",
        ),
        ({"coef": 0.1, "mask": [True]}, "mask has shape"),
    ],
)
def test_errors(kwargs: dict, message: str) -> None:
    args = {"advantages": [0.0, 0.0], "logprobs": [-1.0, -1.0], "ref_logprobs": [-1.0, -1.0], **kwargs}
    with pytest.raises(ValueError, match=message):
        kl_penalized_advantages(**args)


floats = st.floats(-20.0, 20.0, allow_nan=False)


@given(
    arrays(np.float64, 6, elements=floats),
    arrays(np.float64, 6, elements=floats),
    arrays(np.float64, 6, elements=floats),
    arrays(np.bool_, 6),
    st.floats(0.0, 5.0),
)
def test_the_change_is_minus_beta_times_the_log_ratio_on_sampled_tokens_only(
    adv: np.ndarray, lp: np.ndarray, ref: np.ndarray, mask: np.ndarray, beta: float
) -> None:
    out = kl_penalized_advantages(adv, lp, ref, coef=beta, mask=mask)
    assert_allclose(out[mask], adv[mask] - beta * (lp[mask] - ref[mask]), rtol=1e-12, atol=1e-12)
    assert_array_equal(out[~mask], 0.0)
    # the anchor vanishes where the policy equals its reference
    assert_allclose(kl_penalized_advantages(adv, lp, lp, coef=beta, mask=mask)[mask], adv[mask])
