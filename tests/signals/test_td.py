"""td_batch: TEMPO's actor signals of a whole TD update, pinned on hand-computed numbers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tempo_rl.signals import branch_returns, degenerate_groups, group_advantages, td_batch, td_targets


def test_two_starts_by_hand() -> None:
    # start 0: branches end at a macro boundary (valued 0.6, 0.2), one wins inside the segment (r = 1,
    #          terminal), one loses (terminal, r = 0);
    # start 1: branch 3 was dropped (env error); its NaN value must not leak.
    r = [[0.0, 0.0, 1.0, 0.0], [0.0, 0.5, 0.0, 0.0]]
    v = [[0.6, 0.2, 0.9, 0.3], [0.4, 0.1, 0.4, np.nan]]
    boot = [[True, True, False, False], [True, True, True, True]]
    mask = [[True, True, True, True], [True, True, True, False]]
    b = td_batch(r, v, boot, mask)
    # R = r + b * V: [0.6, 0.2, 1.0, 0.0]; [0.4, 0.6, 0.4, (0)]
    assert np.allclose(b.returns, [[0.6, 0.2, 1.0, 0.0], [0.4, 0.6, 0.4, 0.0]])
    # G = mean over kept: 1.8 / 4 = 0.45; 1.4 / 3
    assert b.targets.tolist() == pytest.approx([0.45, 1.4 / 3])
    # A = R - G on kept, 0 on dropped
    assert np.allclose(
        b.advantages, [[0.15, -0.25, 0.55, -0.45], [0.4 - 1.4 / 3, 0.6 - 1.4 / 3, 0.4 - 1.4 / 3, 0.0]]
    )
    assert b.degenerate.tolist() == [False, False]
    assert b.mask.tolist() == mask


def test_groups_that_carry_no_gradient_are_degenerate() -> None:
    # all four branches terminal with the same reward; a second start kept no branch at all
    b = td_batch(
        [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]],
        np.full((2, 4), 7.0),
        np.zeros((2, 4), bool),
        [[True] * 4, [False] * 4],
    )
    assert b.returns.tolist() == [[1.0] * 4, [0.0] * 4]  # terminal: V is ignored
    assert b.targets.tolist() == [1.0, 0.0]
    assert b.degenerate.tolist() == [True, True]
    assert not b.advantages.any()


def test_shapes_are_checked() -> None:
    with pytest.raises(ValueError, match=r"shape \[S, N\]"):
        td_batch([0.0, 1.0], [0.0, 1.0], [True, True])
    with pytest.raises(ValueError, match="must all have shape"):
        td_batch([[0.0, 1.0]], [[0.0]], [[True, True]])


@given(
    arrays(np.float64, (3, 5), elements=st.floats(-2, 2)),
    arrays(np.float64, (3, 5), elements=st.floats(0, 1)),
    arrays(bool, (3, 5)),
    arrays(bool, (3, 5)),
)
def test_td_batch_is_the_composition_of_the_signals(r, v, boot, mask) -> None:
    b = td_batch(r, v, boot, mask)
    returns = np.where(mask, branch_returns(r, np.where(boot, v, 0.0), ~boot), 0.0)
    assert np.allclose(b.returns, returns)
    assert np.allclose(b.targets, td_targets(returns, mask=mask))
    assert np.allclose(b.advantages, group_advantages(returns, mask=mask))
    assert (b.degenerate == degenerate_groups(b.advantages, mask=mask)).all()
    # the kept advantages of every start sum to 0 (centred), the dropped ones are 0
    assert np.allclose(np.where(mask, b.advantages, 0.0).sum(axis=1), 0.0)
    assert not b.advantages[~mask].any()
