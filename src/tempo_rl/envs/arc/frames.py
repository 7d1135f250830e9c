"""ARC-AGI-3 frames and actions as text: the pieces every ARC adapter shares.

An ARC-AGI-3 game shows the agent a **frame**: a 64 x 64 grid of colour indices 0..15, and accepts seven
actions: ``ACTION1`` .. ``ACTION5`` and ``ACTION7`` take no argument (by convention 1-4 = up, down, left,
right, 5 = interact, 7 = undo); ``ACTION6`` is a click at pixel ``(x, y)`` with ``0 <= x, y < 64``
(x = column, y = row, origin at the top-left). A game is in one of four states: ``NOT_PLAYED``,
``NOT_FINISHED``, ``WIN``, ``GAME_OVER``, and reports how many of its ``win_levels`` levels are completed.

This module turns frames into deterministic text (:func:`render_grid`, :func:`render_frame`) and text into
actions (:func:`parse_action`), so that a language model can play: one hex digit per cell, one line per row.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = [
    "FRAME_SIZE",
    "SIMPLE_ACTIONS",
    "ArcAction",
    "ArcFrame",
    "GameState",
    "InvalidActionError",
    "parse_action",
    "render_frame",
    "render_grid",
]

#: Side length of an ARC-AGI-3 frame, in pixels (cells).
FRAME_SIZE = 64
#: The actions that take no argument.
SIMPLE_ACTIONS: tuple[int, ...] = (1, 2, 3, 4, 5, 7)
_HEX = "0123456789abcdef"


class GameState(enum.Enum):
    """The toolkit's game states (``arcengine.GameState`` names)."""

    NOT_PLAYED = "NOT_PLAYED"
    NOT_FINISHED = "NOT_FINISHED"
    WIN = "WIN"
    GAME_OVER = "GAME_OVER"


class InvalidActionError(ValueError):
    """Text that is not an ARC action; the message says what the accepted forms are."""


@dataclass(frozen=True)
class ArcAction:
    """One ARC-AGI-3 action.

    Attributes:
        number: 1..7 (``ACTION<number>``).
        x: click column for ``ACTION6`` (0..63), else None.
        y: click row for ``ACTION6`` (0..63), else None.
    """

    number: int
    x: int | None = None
    y: int | None = None

    def __post_init__(self) -> None:
        if self.number not in range(1, 8):
            raise InvalidActionError(f"ARC actions are ACTION1..ACTION7, got ACTION{self.number}")
        if self.number == 6:
            if self.x is None or self.y is None:
                raise InvalidActionError(
                    "ACTION6 is a click and needs coordinates: 'ACTION6 x y' (0..63 each)"
                )
            for name, value in (("x", self.x), ("y", self.y)):
                if not 0 <= value < FRAME_SIZE:
                    raise InvalidActionError(
                        f"ACTION6 {name}={value} is outside the frame; use 0..{FRAME_SIZE - 1}"
                    )
        elif self.x is not None or self.y is not None:
            raise InvalidActionError(f"ACTION{self.number} takes no coordinates; only ACTION6 is a click")

    @property
    def name(self) -> str:
        """``"ACTION<number>"``."""
        return f"ACTION{self.number}"

    @property
    def text(self) -> str:
        """The canonical text form: ``"ACTION3"`` or ``"ACTION6 12 40"`` (x then y)."""
        return self.name if self.number != 6 else f"ACTION6 {self.x} {self.y}"


_ACTION_RE = re.compile(
    r"""^\s*action\s*(?P<number>\d+)
        (?:(?:\s*\(\s*|\s+)(?:x\s*[=:]\s*)?(?P<x>-?\d+)\s*[,\s]\s*(?:y\s*[=:]\s*)?(?P<y>-?\d+)\s*\)?)?\s*$""",
    re.IGNORECASE | re.VERBOSE,
)


def parse_action(text: str) -> ArcAction:
    """Parse an action's text.

    Accepted (case-insensitive, surrounding whitespace ignored): ``ACTION1`` .. ``ACTION7``, ``ACTION 3``, and
    for clicks ``ACTION6 x y``, ``ACTION6 x, y``, ``ACTION6(x, y)``, ``ACTION6 x=12 y=40`` and
    ``ACTION6(x=12, y=40)``.

    Raises:
        InvalidActionError: anything else, a number outside 1..7, coordinates outside 0..63, a click without
            coordinates or a simple action with them.
    """
    if not isinstance(text, str):
        raise InvalidActionError(f"an action is text, got {type(text).__name__}")
    match = _ACTION_RE.match(text)
    if match is None:
        raise InvalidActionError(
            f"not an ARC action: {text[:80]!r}; use ACTION1..ACTION5, ACTION7, or 'ACTION6 x y' (0..63)"
        )
    x, y = match.group("x"), match.group("y")
    return ArcAction(
        number=int(match.group("number")),
        x=int(x) if x is not None else None,
        y=int(y) if y is not None else None,
    )


def _as_grid(grid: npt.ArrayLike) -> npt.NDArray[np.int64]:
    array = np.asarray(grid)
    if array.ndim != 2:
        raise ValueError(f"a frame is a 2-D grid of colour indices, got shape {array.shape}")
    if array.size and (not np.issubdtype(array.dtype, np.integer) or array.min() < 0 or array.max() > 15):
        raise ValueError("frame cells must be integer colour indices in 0..15")
    return array.astype(np.int64, copy=False)


def render_grid(grid: npt.ArrayLike, *, scale: int = 1, sep: str = "") -> str:
    """Render a grid of colours 0..15 as text: one hex digit per cell, one line per row (top row first).

    Args:
        grid: a 2-D array of integers in 0..15 (rows x columns).
        scale: keep one cell out of every ``scale`` x ``scale`` block (its top-left cell), i.e. render the
            grid at ``1/scale`` resolution. ``1`` (default) is lossless; a game drawn in uniform blocks of
            ``scale`` pixels (like the stub game with ``scale=8``) also renders losslessly and ~``scale**2``
            times shorter.
        sep: the separator between cells of a row (``""`` or ``" "``).

    Returns:
        ``rows / scale`` lines of ``columns / scale`` digits, joined by ``"\\n"`` (no trailing newline).
    """
    if not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be a positive integer, got {scale!r}")
    array = _as_grid(grid)[::scale, ::scale]
    return "\n".join(sep.join(_HEX[int(v)] for v in row) for row in array)


@dataclass(frozen=True)
class ArcFrame:
    """What a game returns after ``reset`` or an action (the toolkit's ``FrameDataRaw``, framework-neutral).

    Attributes:
        grid: the last 64 x 64 frame (colour indices 0..15). Toolkit games may return several frames per
            action (an animation); adapters keep the last one.
        state: the game state after the action.
        levels_completed: how many levels are done.
        win_levels: how many levels win the game.
        available_actions: the action numbers the game accepts now (1..7).
    """

    grid: npt.NDArray[np.int64]
    state: GameState
    levels_completed: int = 0
    win_levels: int = 1
    available_actions: tuple[int, ...] = field(default=(1, 2, 3, 4, 5, 6, 7))


def render_frame(
    frame: ArcFrame,
    *,
    scale: int = 1,
    sep: str = "",
    feedback: str | None = None,
    extra_lines: Sequence[str] = (),
) -> str:
    """The actor's observation text for one frame: a status header, optional feedback, then the grid.

    Example (``scale=8``)::

        state: NOT_FINISHED | levels completed: 0/2 | available actions: ACTION1 ACTION2 ... ACTION7
        frame (8x8, one hex colour per cell, 1 cell = 8x8 pixels, x = column, y = row from the top-left):
        77777777
        ...

    Args:
        frame: the frame to render.
        scale: see :func:`render_grid`.
        sep: see :func:`render_grid`.
        feedback: one line about the last action (e.g. why it was rejected), shown after the header.
        extra_lines: more header lines (game-specific, visible to the actor).
    """
    grid = _as_grid(frame.grid)
    rows, cols = (grid.shape[0] + scale - 1) // scale, (grid.shape[1] + scale - 1) // scale
    actions = " ".join(f"ACTION{n}" for n in frame.available_actions)
    lines = [
        f"state: {frame.state.value} | levels completed: {frame.levels_completed}/{frame.win_levels} | "
        f"available actions: {actions}"
    ]
    if feedback:
        lines.append(f"last action: {feedback}")
    lines.extend(extra_lines)
    unit = "1 cell = 1 pixel" if scale == 1 else f"1 cell = {scale}x{scale} pixels"
    lines.append(
        f"frame ({rows}x{cols}, one hex colour per cell, {unit}, x = column, y = row from the top-left):"
    )
    lines.append(render_grid(grid, scale=scale, sep=sep))
    return "\n".join(lines)
