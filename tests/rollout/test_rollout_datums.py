"""Datum builders: the one-token shift, context zeros, sampled logprobs + advantages, validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.backends.validation import DatumError, validate_datum
from tempo_rl.rollout.datums import SequenceBuilder, completion_datum, make_datum, sft_datum


def test_multi_turn_sequence_layout_is_pinned() -> None:
    b = SequenceBuilder()
    b.add_context([10, 11, 12])  # prompt
    b.add_sampled([20, 21], [-0.5, -0.25])  # turn 1 completion
    b.add_context([13])  # closing + observation
    b.add_sampled([22], [-1.0])  # turn 2 completion
    d = b.to_datum(2.0, vocab_size=50, role="actor")
    assert d.model_input == (10, 11, 12, 20, 21, 13)
    np.testing.assert_array_equal(d.loss_fn_inputs["target_tokens"], [11, 12, 20, 21, 13, 22])
    np.testing.assert_array_equal(d.loss_fn_inputs["logprobs"], [0, 0, -0.5, -0.25, 0, -1.0])
    np.testing.assert_array_equal(d.loss_fn_inputs["advantages"], [0, 0, 2, 2, 0, 2])
    assert d.loss_fn_inputs["target_tokens"].dtype == np.int64
    assert d.loss_fn_inputs["logprobs"].dtype == np.float32
    assert dict(d.tags) == {"role": "actor"} and b.num_sampled == 3


def test_completion_and_sft_datums() -> None:
    d = completion_datum([1, 2], [3, 4], [-0.1, -0.2], -0.5, vocab_size=10, role="critic")
    np.testing.assert_allclose(d.loss_fn_inputs["advantages"], [0, -0.5, -0.5])
    np.testing.assert_allclose(d.loss_fn_inputs["logprobs"], [0, -0.1, -0.2])
    s = sft_datum([1, 2], [3, 4], weight=0.5, vocab_size=10)
    assert set(s.loss_fn_inputs) == {"target_tokens", "weights"}
    np.testing.assert_allclose(s.loss_fn_inputs["weights"], [0, 0.5, 0.5])
    b = SequenceBuilder()
    b.add_context([1, 2])
    b.add_sampled([3, 4], [0.0, 0.0])
    np.testing.assert_allclose(b.to_sft_datum([9, 9, 0.25, 0.75]).loss_fn_inputs["weights"], [0, 0.25, 0.75])


def test_extend_context_to_checks_the_prefix() -> None:
    b = SequenceBuilder()
    b.add_context([1, 2])
    b.add_sampled([3], [-1.0])
    b.extend_context_to([1, 2, 3, 4, 5])
    assert b.tokens == [1, 2, 3, 4, 5] and b.sampled == [False, False, True, False, False]
    with pytest.raises(ValueError, match="does not extend"):
        b.extend_context_to([1, 9, 3, 4, 5, 6])


def test_validation_errors_are_specific() -> None:
    with pytest.raises(ValueError, match="at least 2 tokens"):
        make_datum([1], [0.0], [0.0])
    with pytest.raises(ValueError, match="same length"):
        make_datum([1, 2], [0.0], [0.0, 0.0])
    with pytest.raises(DatumError, match=r"\[0, 5\)"):
        make_datum([1, 7], [0.0, 0.0], [0.0, 0.0], vocab_size=5)
    with pytest.raises(ValueError, match="finite"):
        make_datum([1, 2], [0.0, float("nan")], [0.0, 1.0])
    with pytest.raises(ValueError, match="start with context"):
        SequenceBuilder().add_sampled([1], [0.0])
    with pytest.raises(ValueError, match="logprobs"):
        completion_datum([1], [2, 3], [0.0], 1.0)


@settings(max_examples=100)
@given(
    st.lists(
        st.tuples(st.booleans(), st.lists(st.integers(0, 99), min_size=1, max_size=5)), min_size=1, max_size=8
    ),
    st.floats(-5, 5),
)
def test_shift_invariants(spans: list[tuple[bool, list[int]]], adv: float) -> None:
    b = SequenceBuilder()
    b.add_context([0])
    for sampled, toks in spans:
        if sampled:
            b.add_sampled(toks, [-0.5] * len(toks))
        else:
            b.add_context(toks)
    if len(b) < 2:
        return
    d = b.to_datum(adv, vocab_size=100)
    validate_datum(d, 100, "importance_sampling")
    n = len(b) - 1
    assert len(d.model_input) == n and list(d.model_input) == b.tokens[:-1]
    assert list(d.loss_fn_inputs["target_tokens"]) == b.tokens[1:]
    sampled = np.asarray(b.sampled[1:])
    a = d.loss_fn_inputs["advantages"]
    assert np.all(a[~sampled] == 0) and np.allclose(a[sampled], np.float32(adv))
    assert np.all(d.loss_fn_inputs["logprobs"][~sampled] == 0)
