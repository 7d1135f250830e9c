"""Strict <value> parsing: pinned cases and hypothesis fuzzing against an independent oracle."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.critic import ValueStatus, classify_value, parse_value


@pytest.mark.parametrize(
    ("text", "r_max", "status", "value"),
    [
        ("<value>0.42</value>", 1.0, ValueStatus.OK, 0.42),
        ("reasoning...\n<VALUE> 0.25 </Value>", 1.0, ValueStatus.OK, 0.25),
        ("<value>0.9</value> changed my mind <value>0.1</value>", 1.0, ValueStatus.OK, 0.1),
        ("<value>0.9</value> then <value>oops</value>", 1.0, ValueStatus.MALFORMED, None),  # last decides
        ("<value>1.7</value>", 1.0, ValueStatus.CLIPPED, 1.0),
        ("<value>1.7</value>", 2.0, ValueStatus.OK, 1.7),
        ("<value>3</value>", 2.0, ValueStatus.CLIPPED, 2.0),
        ("<value>-0.3</value>", 1.0, ValueStatus.CLIPPED, 0.0),
        ("<value>-0.0</value>", 1.0, ValueStatus.OK, 0.0),
        ("<value>1e309</value>", 1.0, ValueStatus.NON_FINITE, None),
        ("<value>-1e309</value>", 1.0, ValueStatus.NON_FINITE, None),
        ("<value>NaN</value>", 1.0, ValueStatus.NON_FINITE, None),
        ("<value>inf</value>", 1.0, ValueStatus.NON_FINITE, None),
        ("<value>0.5.5</value>", 1.0, ValueStatus.MALFORMED, None),
        ("<value>50%</value>", 1.0, ValueStatus.MALFORMED, None),
        ("<value>1_0</value>", 1.0, ValueStatus.MALFORMED, None),
        ("<value>0x1</value>", 1.0, ValueStatus.MALFORMED, None),
        ("<value></value>", 1.0, ValueStatus.MALFORMED, None),
        ("<value>٣</value>", 5.0, ValueStatus.MALFORMED, None),  # non-ASCII digits are not numbers here
        ("<value>.5</value>", 1.0, ValueStatus.OK, 0.5),
        ("<value>5e-1</value>", 1.0, ValueStatus.OK, 0.5),
        ("<value><value>0.3</value></value>", 1.0, ValueStatus.OK, 0.3),  # innermost well-formed pair
        ("<value>0.3", 1.0, ValueStatus.MISSING, None),
        ("value: 0.3", 1.0, ValueStatus.MISSING, None),
        ("", 1.0, ValueStatus.MISSING, None),
    ],
)
def test_pinned_cases(text: str, r_max: float, status: ValueStatus, value: float | None) -> None:
    read = classify_value(text, r_max)
    assert read.status is status
    assert read.value == value
    assert parse_value(text, r_max) == value


def test_negative_zero_reads_as_positive_zero() -> None:
    value = parse_value("<value>-0.0</value>")
    assert value == 0.0 and math.copysign(1.0, value) == 1.0


@pytest.mark.parametrize("r_max", [0.0, -1.0, math.inf, math.nan])
def test_invalid_r_max_is_rejected_with_a_clear_message(r_max: float) -> None:
    with pytest.raises(ValueError, match="r_max must be a finite number > 0"):
        parse_value("<value>0.5</value>", r_max)


def _oracle(text: str, r_max: float) -> tuple[ValueStatus, float | None]:
    """Independent reading: the rightmost close tag whose nearest open tag encloses no '<'; float()."""
    lowered = text.lower()
    end = len(lowered)
    while True:
        close = lowered.rfind("</value>", 0, end)
        if close < 0:
            return ValueStatus.MISSING, None
        open_ = lowered.rfind("<value>", 0, close)
        if open_ >= 0 and "<" not in text[open_ + len("<value>") : close]:
            break
        end = close
    raw = text[open_ + len("<value>") : close].strip()
    if raw.lower().lstrip("+-") in {"nan", "inf", "infinity"}:
        return ValueStatus.NON_FINITE, None
    if not raw or any(c not in "0123456789.eE+-" for c in raw):
        return ValueStatus.MALFORMED, None
    try:
        number = float(raw)
    except ValueError:
        return ValueStatus.MALFORMED, None
    if not math.isfinite(number):
        return ValueStatus.NON_FINITE, None
    clipped = min(max(number, 0.0), r_max)
    return (ValueStatus.OK if clipped == number else ValueStatus.CLIPPED), clipped


_FRAGMENTS = st.sampled_from(
    [
        "<value>",
        "</value>",
        "<VALUE>",
        "</Value>",
        "<",
        ">",
        "/",
        " ",
        "\n",
        "0.5",
        "1",
        ".",
        "e",
        "-",
        "+",
        "1e309",
        "-0.0",
        "nan",
        "NaN",
        "inf",
        "0.5.5",
        "abc",
        "2.5",
        "1e-3",
        "٣",
    ]
)
_TEXT = st.one_of(st.text(max_size=200), st.lists(_FRAGMENTS, max_size=30).map("".join))
_R_MAX = st.sampled_from([1.0, 2.0, 0.5, 10.0])


@settings(max_examples=400)
@given(text=_TEXT, r_max=_R_MAX)
def test_fuzz_never_crashes_and_matches_the_oracle(text: str, r_max: float) -> None:
    read = classify_value(text, r_max)
    status, value = _oracle(text, r_max)
    assert read.status is status, (text, read)
    assert read.value == value
    if read.value is not None:
        assert 0.0 <= read.value <= r_max and math.isfinite(read.value)


@settings(max_examples=200)
@given(text=_TEXT, x=st.floats(allow_nan=False, allow_infinity=False), r_max=_R_MAX)
def test_an_appended_answer_always_wins(text: str, x: float, r_max: float) -> None:
    assert parse_value(f"{text}<value>{x!r}</value>", r_max) == min(max(x, 0.0), r_max)


@settings(max_examples=200)
@given(text=_TEXT)
def test_an_earlier_answer_loses_to_any_later_pair(text: str) -> None:
    later = classify_value(text)
    combined = classify_value("<value>0.123</value>" + text)
    if later.status is ValueStatus.MISSING and "<value>" not in text.lower():
        assert combined.value == 0.123
    elif later.status is not ValueStatus.MISSING:
        assert combined == later
