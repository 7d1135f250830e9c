"""``arc-stub``: the ARC-AGI-3-style adapter over the local hidden-rule game.

The game is :class:`~tempo_rl.envs.arc.stub_game.HiddenRuleGame`. No toolkit, no network: it is pure Python,
so this env runs everywhere (CI included) and shows every mechanism a real ARC-AGI-3 adapter needs: 64 x 64
frames as text, ``ACTION1``-``ACTION7`` with ``ACTION6 x y`` clicks, a hidden rule, the game source as the
critic's privileged information, and restore both by replay and by a native fork (a deep copy of the game).

Example::

    from tempo_rl.envs import make

    env = make("arc-stub", levels=2, scale=8)
    obs = env.reset(seed=3)
    result = env.step("ACTION6 20 36")
"""

from __future__ import annotations

import inspect

import tempo_rl.envs.arc.stub_game as stub_game
from tempo_rl.envs.arc.adapter import ArcEnvBase
from tempo_rl.envs.arc.frames import ArcAction, ArcFrame
from tempo_rl.envs.arc.stub_game import HiddenRuleGame
from tempo_rl.envs.core import check_steps_left, require_reset

__all__ = ["ArcStubEnv"]


class ArcStubEnv(ArcEnvBase):
    """The local hidden-rule ARC game as a :class:`~tempo_rl.envs.core.ReplayableEnv` (name ``arc-stub``).

    Args:
        levels: levels per game (each completed level is worth ``1 / levels`` reward).
        n_tiles: tiles per level, one of which completes it.
        lives: wrong activations allowed before ``GAME_OVER``.
        max_steps: the episode step limit T (truncation).
        scale: 1 renders the full 64 x 64 frame; 8 renders the 8 x 8 board of cells, losslessly (the game
            draws uniform 8 x 8 blocks), ~64x fewer characters.
        sep: separator between rendered cells (``""`` or ``" "``).
        list_clicks: list ``ACTION6 x y`` on each remaining tile's centre among the admissible actions.

    The seed passed to :meth:`reset` selects the layout of every level.
    """

    def __init__(
        self,
        levels: int = 2,
        n_tiles: int = 3,
        lives: int = 2,
        max_steps: int = 30,
        scale: int = 1,
        sep: str = "",
        list_clicks: bool = True,
    ) -> None:
        super().__init__(max_steps=max_steps, scale=scale, sep=sep, list_clicks=list_clicks)
        HiddenRuleGame(0, levels, n_tiles, lives)  # validate the arguments now, not at the first reset
        self.levels, self.n_tiles, self.lives = levels, n_tiles, lives
        self._game: HiddenRuleGame | None = None

    def _new_game(self, seed: int) -> None:
        self._game = HiddenRuleGame(seed, self.levels, self.n_tiles, self.lives)

    @property
    def game(self) -> HiddenRuleGame:
        """The live game object (hidden state: privileged, for critics, oracles and tests; never the actor)."""
        return self._live_game()

    def _live_game(self) -> HiddenRuleGame:
        return require_reset(self._game)

    def _game_reset(self) -> ArcFrame:
        return self._live_game().reset()

    def _game_step(self, action: ArcAction) -> ArcFrame:
        return self._live_game().perform(action)

    def _click_targets(self) -> tuple[tuple[int, int], ...]:
        return self._live_game().click_targets()

    def _fingerprint(self) -> str | None:
        return self._live_game().fingerprint()

    def oracle_value(self, steps_left: int) -> float | None:
        """``V* = min(levels left, n) / levels`` with ``n = min(steps_left, max_steps - steps)``.

        Each level is worth ``1 / levels`` and an optimal player completes one level per step: one
        ``ACTION6`` click on the key tile, which is always on the board (a wrong activation removes only the
        tile it hits) and never costs a life. No step can complete two levels, so no policy does better. 0 once
        the game is won or over.
        """
        check_steps_left(steps_left)
        game = self._live_game()
        budget = min(steps_left, self.max_steps - self.steps)
        return min(game.levels_left(), max(0, budget)) / game.n_levels

    def privileged_info(self) -> str:
        """The game's full source code (its hidden rule included), as the TEMPO critic sees it."""
        header = "Source code of the game being played (hidden from the player):\n\n"
        return header + inspect.getsource(stub_game)

    def walkthrough(self) -> tuple[str, ...] | None:
        """One click on each level's key tile (None before the first reset)."""
        if self._game is None:
            return None
        return tuple(action.text for action in self._game.solution())
