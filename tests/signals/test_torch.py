"""torch in -> torch out: same device and dtype, identical numbers to numpy, gradients flow."""

from __future__ import annotations

import math
from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

from tempo_rl.signals import (
    branch_returns,
    critic_rewards,
    degenerate_groups,
    group_advantages,
    monte_carlo_returns,
    prefix_importance_weights,
    td_targets,
)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FINITE = st.floats(-100.0, 100.0, allow_nan=False, allow_infinity=False)


def _all_calls(
    values: np.ndarray, mask: np.ndarray, other: np.ndarray, terminated: np.ndarray
) -> dict[str, Any]:
    """Run every signal function on (values, mask, ...) in whichever backend the inputs select."""
    return {
        "R": branch_returns(values, other, terminated, gamma=0.9, segment_lengths=3.0),
        "G": td_targets(values, mask=mask),
        "A": group_advantages(values, mask=mask),
        "A_std": group_advantages(values, mask=mask, normalize="std"),
        "crit": critic_rewards(values, other[..., 0]),
        "brier": critic_rewards(values, other[..., 0], error="brier", r_max=2.0),
        "mc": monte_carlo_returns(values, gamma=0.7, mask=mask),
        "deg": degenerate_groups(values, mask=mask, atol=1.0),
        "w": prefix_importance_weights(values, other, clip=(0.2, 5.0)),
    }


@settings(max_examples=30)
@given(st.data())
def test_numpy_and_torch_give_identical_numbers(data: Any) -> None:
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6))
    values = data.draw(hnp.arrays(np.float64, shape, elements=FINITE))
    other = data.draw(hnp.arrays(np.float64, shape, elements=FINITE))
    mask = data.draw(hnp.arrays(np.bool_, shape))
    terminated = data.draw(hnp.arrays(np.bool_, shape))
    expected = _all_calls(values, mask, other, terminated)
    got = _all_calls(*(torch.from_numpy(a) for a in (values, mask, other, terminated)))
    for name, exp in expected.items():
        out = got[name]
        assert isinstance(out, torch.Tensor), name
        assert tuple(out.shape) == exp.shape, name
        assert_allclose(out.numpy(), exp, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_worked_example_keeps_device_and_dtype(device: str, dtype: str) -> None:
    dt = getattr(torch, dtype)
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=dt, device=device)
    endpoints = torch.tensor([0.6, 0.2, 0.9, 0.3], dtype=dt, device=device)
    terminated = torch.tensor([False, False, True, True], device=device)
    returns = branch_returns(rewards, endpoints, terminated)
    target = td_targets(returns)
    adv = group_advantages(returns)
    crit = critic_rewards(torch.tensor([0.5, math.nan, 0.45, 0.9], dtype=dt, device=device), target)
    crit_adv = group_advantages(crit)
    tol = 1e-2 if dtype == "bfloat16" else 1e-6
    expectations: list[tuple[Any, float | list[float]]] = [
        (returns, [0.6, 0.2, 1.0, 0.0]),
        (target, 0.45),
        (adv, [0.15, -0.25, 0.55, -0.45]),
        (crit, [-0.05, -1.0, 0.0, -0.45]),
        (crit_adv, [0.325, -0.625, 0.375, -0.075]),
    ]
    for out, exp in expectations:
        assert out.dtype == dt and out.device.type == device
        assert_allclose(out.float().cpu().numpy(), exp, atol=tol)
    deg = degenerate_groups(adv)
    assert deg.dtype == torch.bool and deg.device.type == device and not bool(deg)


def test_mixed_numpy_and_tensor_inputs_return_tensor_of_tensor_dtype() -> None:
    out = critic_rewards(torch.tensor([[0.5, 0.0]], dtype=torch.float32), np.array([0.25]))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert_allclose(out.numpy(), [[-0.25, -0.25]])
    mask = td_targets([1.0, 3.0, 99.0], mask=torch.tensor([True, True, False]))
    assert isinstance(mask, torch.Tensor) and float(mask) == 2.0


def test_integer_tensor_uses_default_float_dtype() -> None:
    out = group_advantages(torch.tensor([1, 2, 3]))
    assert out.dtype == torch.get_default_dtype()
    assert_allclose(out.numpy(), [-1.0, 0.0, 1.0])


def test_gradients_flow_through_advantages_and_weights() -> None:
    x = torch.tensor([1.0, 2.0, 6.0], dtype=torch.float64, requires_grad=True)
    group_advantages(x, normalize="std")[2].backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    new = torch.tensor([0.5, 3.0], dtype=torch.float64, requires_grad=True)
    prefix_importance_weights(new, torch.zeros(2, dtype=torch.float64), clip=(0.5, 2.0)).sum().backward()
    # d/dx exp(x) = exp(0.5) inside the clip range; 0 where the clip is active
    assert_allclose(new.grad.numpy(), [math.exp(0.5), 0.0], rtol=1e-12)


def test_torch_errors_match_numpy() -> None:
    with pytest.raises(ValueError, match="missing_value"):
        branch_returns(torch.zeros(2), torch.tensor([0.5, math.nan]), torch.tensor([False, False]))
    with pytest.raises(ValueError, match="mask has shape"):
        td_targets(torch.zeros(3), mask=torch.ones(2, dtype=torch.bool))
