"""The rules the built-in goal envs share (:mod:`~tempo_rl.envs.keydoor`, :mod:`~tempo_rl.envs.crossings`).

* **Reward:** 1 on reaching the goal (``terminated=True``); reaching ``horizon`` steps first ends the episode with
  ``truncated=True`` and reward 0. Every call to ``step`` uses one step, whatever the action does; the action is
  read lower-cased with its whitespace collapsed. After the end, ``step`` changes nothing and says so.
* **Observation:** ``"<feedback> <where the agent is> Steps left: <n>."``, the admissible actions while the
  episode runs, ``info`` with the task sentence, the room (1-based) and the steps left, and, with
  ``state_note``, the env's critic-only note of the state while the episode runs.
"""

from __future__ import annotations

import abc

from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult

__all__ = ["GoalEnv"]


class GoalEnv(ReplayableEnv):
    """A text env whose only reward is 1 at its goal, within ``horizon`` steps (see the module docstring).

    A subclass sets ``task``, ``horizon`` and ``state_note`` and implements :meth:`_start` (the layout and the
    start position of a seed), :meth:`_apply` (the rules), :meth:`_where`, :meth:`_admissible` and
    :meth:`_note` (the text of the state)."""

    task: str
    horizon: int
    state_note: bool
    _seed: int | None
    _room: int
    _steps: int
    _done: bool
    _won: bool

    @abc.abstractmethod
    def _start(self, seed: int | None) -> None:
        """Draw the layout of ``seed`` and put the agent at its start."""

    @abc.abstractmethod
    def _apply(self, action: str) -> tuple[str, bool]:
        """Apply a normalised action to the state: ``(feedback sentence, goal reached)``."""

    @abc.abstractmethod
    def _where(self) -> str:
        """Where the agent is and what it sees there (sentences)."""

    @abc.abstractmethod
    def _admissible(self) -> tuple[str, ...]:
        """The actions the state accepts, in display order."""

    @abc.abstractmethod
    def _note(self) -> str:
        """The critic-only note of the state (shown with ``state_note``)."""

    def _observation(self, feedback: str) -> Observation:
        steps_left = self.horizon - self._steps
        return Observation(
            text=f"{feedback} {self._where()} Steps left: {steps_left}.",
            admissible_actions=None if self._done else self._admissible(),
            info={"task": self.task, "room": self._room + 1, "steps_left": steps_left},
            privileged_state=self._note() if self.state_note and not self._done else None,
        )

    def reset(self, seed: int | None = None) -> Observation:
        self._seed = seed
        self._start(seed)
        self._steps = 0
        self._done = False
        self._won = False
        return self._observation(f"Task: {self.task}")

    def step(self, action: str) -> StepResult:
        if self._done:
            return StepResult(self._observation("The episode is over."), 0.0, self._won, not self._won)
        self._steps += 1
        feedback, won = self._apply(" ".join(str(action).strip().lower().split()))
        truncated = not won and self._steps >= self.horizon
        self._won = won
        self._done = won or truncated
        return StepResult(self._observation(feedback), 1.0 if won else 0.0, won, truncated, info={"won": won})
