"""The step rule of the built-in goal envs (:mod:`~tempo_rl.envs.keydoor`, :mod:`~tempo_rl.envs.crossings`).

One reward, 1, on reaching the goal (``terminated=True``); reaching ``horizon`` steps first ends the episode with
``truncated=True`` and reward 0. Every call to ``step`` uses one step, whatever the action does; the action is
read lower-cased with its whitespace collapsed. After the end, ``step`` changes nothing and says so.
"""

from __future__ import annotations

import abc

from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult

__all__ = ["GoalEnv"]


class GoalEnv(ReplayableEnv):
    """A text env whose only reward is 1 at its goal, within ``horizon`` steps (see the module docstring).

    A subclass sets ``horizon`` and, at reset, ``_steps = 0`` and ``_done = _won = False``, and implements
    :meth:`_apply` (the rules) and :meth:`_observation` (the text of the state)."""

    horizon: int
    _steps: int
    _done: bool
    _won: bool

    @abc.abstractmethod
    def _apply(self, action: str) -> tuple[str, bool]:
        """Apply a normalised action to the state: ``(feedback sentence, goal reached)``."""

    @abc.abstractmethod
    def _observation(self, feedback: str) -> Observation:
        """The observation of the current state, led by ``feedback``."""

    def step(self, action: str) -> StepResult:
        if self._done:
            return StepResult(self._observation("The episode is over."), 0.0, self._won, not self._won)
        self._steps += 1
        feedback, won = self._apply(" ".join(str(action).strip().lower().split()))
        truncated = not won and self._steps >= self.horizon
        self._won = won
        self._done = won or truncated
        return StepResult(self._observation(feedback), 1.0 if won else 0.0, won, truncated, info={"won": won})
