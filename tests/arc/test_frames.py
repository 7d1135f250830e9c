"""Frames as text and action parsing for the ARC adapters: pinned examples and property tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.envs.arc.frames import (
    ArcAction,
    ArcFrame,
    GameState,
    InvalidActionError,
    parse_action,
    render_frame,
    render_grid,
)


def test_render_grid_pinned() -> None:
    grid = np.array([[0, 1, 15], [10, 11, 2]])
    assert render_grid(grid) == "01f\nab2"
    assert render_grid(grid, sep=" ") == "0 1 f\na b 2"
    assert render_grid(grid, scale=2) == "0f"


def test_render_grid_scale_keeps_top_left_of_each_block() -> None:
    grid = np.kron(np.array([[1, 2], [3, 4]]), np.ones((8, 8), dtype=int))
    assert render_grid(grid, scale=8) == "12\n34"
    assert render_grid(grid).splitlines()[0] == "1" * 8 + "2" * 8


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        (np.zeros(4, dtype=int), "2-D"),
        (np.array([[16]]), "0..15"),
        (np.array([[-1]]), "0..15"),
        (np.array([[0.5]]), "0..15"),
    ],
)
def test_render_grid_rejects_bad_frames(grid: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render_grid(grid)


def test_render_grid_rejects_bad_scale() -> None:
    with pytest.raises(ValueError, match="scale"):
        render_grid(np.zeros((2, 2), dtype=int), scale=0)


def test_render_frame_layout() -> None:
    frame = ArcFrame(
        grid=np.zeros((64, 64), dtype=np.int64),
        state=GameState.NOT_FINISHED,
        win_levels=3,
        available_actions=(1, 6),
    )
    text = render_frame(frame, scale=32, feedback="invalid: nope", extra_lines=("step: 1/5",))
    assert text.splitlines() == [
        "state: NOT_FINISHED | levels completed: 0/3 | available actions: ACTION1 ACTION6",
        "last action: invalid: nope",
        "step: 1/5",
        "frame (2x2, one hex colour per cell, 1 cell = 32x32 pixels, x = column, y = row from the top-left):",
        "00",
        "00",
    ]
    full = render_frame(frame)
    assert len(full.splitlines()) == 2 + 64 and full.splitlines()[-1] == "0" * 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ACTION1", ArcAction(1)),
        ("  action7 ", ArcAction(7)),
        ("ACTION 3", ArcAction(3)),
        ("ACTION6 12 40", ArcAction(6, 12, 40)),
        ("ACTION6 12, 40", ArcAction(6, 12, 40)),
        ("ACTION6(12,40)", ArcAction(6, 12, 40)),
        ("ACTION6 x=0 y=63", ArcAction(6, 0, 63)),
        ("action6(x=5, y=6)", ArcAction(6, 5, 6)),
    ],
)
def test_parse_action_accepts(text: str, expected: ArcAction) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("go north", "not an ARC action"),
        ("ACTION8", "ACTION1..ACTION7"),
        ("ACTION0", "ACTION1..ACTION7"),
        ("ACTION6", "needs coordinates"),
        ("ACTION6 64 0", "outside the frame"),
        ("ACTION6 3 -1", "outside the frame"),
        ("ACTION2 3 4", "takes no coordinates"),
        ("ACTION61 2", "not an ARC action"),  # the number and the coordinates need a separator
        ("ACTION6 1240", "not an ARC action"),
        ("ACTION6 1 2 3", "not an ARC action"),
    ],
)
def test_parse_action_rejects(text: str, message: str) -> None:
    with pytest.raises(InvalidActionError, match=message):
        parse_action(text)


actions = st.one_of(
    st.sampled_from([1, 2, 3, 4, 5, 7]).map(ArcAction),
    st.builds(lambda x, y: ArcAction(6, x, y), st.integers(0, 63), st.integers(0, 63)),
)


@settings(max_examples=200)
@given(actions, st.sampled_from(["{}", " {} ", "{}\n"]), st.booleans())
def test_canonical_text_round_trips(action: ArcAction, pad: str, lower: bool) -> None:
    text = pad.format(action.text)
    assert parse_action(text.lower() if lower else text) == action
    assert parse_action(action.text).text == action.text


@settings(max_examples=200)
@given(st.text(max_size=30))
def test_parse_action_never_crashes_on_junk(text: str) -> None:
    try:
        action = parse_action(text)
    except InvalidActionError:
        return
    assert 1 <= action.number <= 7
    assert (action.x is not None) == (action.number == 6)
