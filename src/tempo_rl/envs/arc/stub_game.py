"""A small local ARC-AGI-3-style game with a hidden rule; its source is the critic's privileged info.

The screen is 64 x 64 pixels drawn as an 8 x 8 board of 8 x 8-pixel cells. The outer ring of cells is a wall
painted in the level's **key colour**. Inside, a 6 x 6 field holds the player (colour 3) and ``n_tiles`` tiles
of distinct colours, exactly one of which has the key colour.

Actions (the ARC-AGI-3 convention):

* ``ACTION1`` / ``ACTION2`` / ``ACTION3`` / ``ACTION4``: move the player one cell up / down / left / right
  (blocked by the wall; the player may stand on a tile).
* ``ACTION5``: activate the tile under the player (nothing happens when there is none).
* ``ACTION6 x y``: activate the tile in the clicked cell ``(x // 8, y // 8)`` (nothing when there is none).
* ``ACTION7``: undo the last move of this level (activations cannot be undone).

**The hidden rule:** activating the tile whose colour equals the wall colour completes the level; activating
any other tile removes it and costs one life. With no lives left the game is over (``GAME_OVER``); completing
every level wins (``WIN``). The actor is never told the rule: it must infer it from the frames.

Everything is determined by the seed: ``HiddenRuleGame(seed=s)`` always plays the same levels.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tempo_rl.envs.arc.frames import FRAME_SIZE, ArcAction, ArcFrame, GameState

__all__ = ["BOARD_CELLS", "CELL_PIXELS", "PLAYER_COLOUR", "TILE_COLOURS", "HiddenRuleGame", "Level"]

#: cells per side of the board (including the wall ring)
BOARD_CELLS = 8
#: pixels per side of one cell
CELL_PIXELS = FRAME_SIZE // BOARD_CELLS
PLAYER_COLOUR = 3
#: colours a tile (and hence the wall) may take
TILE_COLOURS: tuple[int, ...] = (6, 8, 9, 10, 11, 12, 14)
_MOVES: dict[int, tuple[int, int]] = {1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}  # (d_row, d_col)


@dataclass
class Level:
    """One level's layout: the key colour, the player's start cell and the tiles ``{(row, col): colour}``."""

    key_colour: int
    start: tuple[int, int]
    tiles: dict[tuple[int, int], int] = field(default_factory=dict)

    def key_cell(self) -> tuple[int, int]:
        """The cell of the tile that completes the level."""
        return next(cell for cell, colour in self.tiles.items() if colour == self.key_colour)


def _generate_level(rng: random.Random, n_tiles: int) -> Level:
    cells = [(r, c) for r in range(1, BOARD_CELLS - 1) for c in range(1, BOARD_CELLS - 1)]
    chosen = rng.sample(cells, n_tiles + 1)
    colours = rng.sample(TILE_COLOURS, n_tiles)
    key_colour = colours[rng.randrange(n_tiles)]
    return Level(key_colour=key_colour, start=chosen[0], tiles=dict(zip(chosen[1:], colours, strict=True)))


class HiddenRuleGame:
    """The game: ``reset()`` and ``perform(action)`` return :class:`~tempo_rl.envs.arc.frames.ArcFrame`.

    Args:
        seed: selects the levels (any int).
        levels: how many levels win the game (>= 1).
        n_tiles: tiles per level (2..7); one of them has the key colour.
        lives: wrong activations allowed before ``GAME_OVER`` (>= 1).
    """

    def __init__(self, seed: int = 0, levels: int = 2, n_tiles: int = 3, lives: int = 2) -> None:
        if levels < 1:
            raise ValueError(f"levels must be >= 1, got {levels}")
        if not 2 <= n_tiles <= len(TILE_COLOURS):
            raise ValueError(f"n_tiles must be in 2..{len(TILE_COLOURS)}, got {n_tiles}")
        if lives < 1:
            raise ValueError(f"lives must be >= 1, got {lives}")
        self.seed, self.n_levels, self.n_tiles, self.max_lives = seed, levels, n_tiles, lives
        rng = random.Random(seed)
        self.levels = [_generate_level(rng, n_tiles) for _ in range(levels)]
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> ArcFrame:
        """Restart the whole game (level 0, full lives) and return the first frame."""
        self.level_index = 0
        self.lives = self.max_lives
        self.state = GameState.NOT_FINISHED
        self._enter_level()
        return self.frame()

    def _enter_level(self) -> None:
        level = self.levels[self.level_index]
        self.player = level.start
        self.tiles = dict(level.tiles)
        self.history: list[tuple[int, int]] = []

    @property
    def level(self) -> Level:
        """The current level's layout."""
        return self.levels[self.level_index]

    def frame(self) -> ArcFrame:
        """The current 64 x 64 frame and status."""
        return ArcFrame(
            grid=self.grid(),
            state=self.state,
            levels_completed=self.level_index if self.state != GameState.WIN else self.n_levels,
            win_levels=self.n_levels,
            available_actions=(1, 2, 3, 4, 5, 6, 7),
        )

    def grid(self) -> npt.NDArray[np.int64]:
        """Draw the board: wall ring in the key colour, tiles, then the player on top."""
        cells = np.zeros((BOARD_CELLS, BOARD_CELLS), dtype=np.int64)
        cells[0, :] = cells[-1, :] = cells[:, 0] = cells[:, -1] = self.level.key_colour
        for (row, col), colour in self.tiles.items():
            cells[row, col] = colour
        cells[self.player] = PLAYER_COLOUR
        return np.kron(cells, np.ones((CELL_PIXELS, CELL_PIXELS), dtype=np.int64))

    def fingerprint(self) -> str:
        """SHA-256 (hex, 32 chars) of the complete game state (an exact hidden-state digest)."""
        state = [
            self.seed,
            self.level_index,
            self.lives,
            self.state.value,
            list(self.player),
            sorted([list(cell), colour] for cell, colour in self.tiles.items()),
            [list(cell) for cell in self.history],
        ]
        return hashlib.sha256(json.dumps(state).encode()).hexdigest()[:32]

    # ------------------------------------------------------------------ rules
    def perform(self, action: ArcAction) -> ArcFrame:
        """Apply one action and return the new frame. After ``WIN`` / ``GAME_OVER`` actions change nothing."""
        if self.state in (GameState.WIN, GameState.GAME_OVER):
            return self.frame()
        if action.number in _MOVES:
            d_row, d_col = _MOVES[action.number]
            row, col = self.player[0] + d_row, self.player[1] + d_col
            if 1 <= row < BOARD_CELLS - 1 and 1 <= col < BOARD_CELLS - 1:
                self.history.append(self.player)
                self.player = (row, col)
        elif action.number == 5:
            self._activate(self.player)
        elif action.number == 6:
            assert action.x is not None and action.y is not None
            self._activate((action.y // CELL_PIXELS, action.x // CELL_PIXELS))
        elif action.number == 7 and self.history:
            self.player = self.history.pop()
        return self.frame()

    def _activate(self, cell: tuple[int, int]) -> None:
        colour = self.tiles.get(cell)
        if colour is None:
            return
        if colour == self.level.key_colour:  # the hidden rule
            if self.level_index + 1 == self.n_levels:
                self.state = GameState.WIN
            else:
                self.level_index += 1
                self._enter_level()
            return
        del self.tiles[cell]
        self.lives -= 1
        if self.lives == 0:
            self.state = GameState.GAME_OVER

    # ------------------------------------------------------------------ helpers for adapters
    def click_targets(self) -> tuple[tuple[int, int], ...]:
        """The centre pixel ``(x, y)`` of every tile still on the board, row-major."""
        half = CELL_PIXELS // 2
        return tuple((col * CELL_PIXELS + half, row * CELL_PIXELS + half) for row, col in sorted(self.tiles))

    def levels_left(self) -> int:
        """Levels still to complete (0 once the game is won or over)."""
        if self.state in (GameState.WIN, GameState.GAME_OVER):
            return 0
        return self.n_levels - self.level_index

    def solution(self) -> tuple[ArcAction, ...]:
        """An optimal action sequence from the reset state: one click on each level's key tile."""
        half = CELL_PIXELS // 2
        return tuple(
            ArcAction(6, x=col * CELL_PIXELS + half, y=row * CELL_PIXELS + half)
            for row, col in (level.key_cell() for level in self.levels)
        )
