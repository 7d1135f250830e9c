"""The shared ARC-AGI-3 adapter: frames in, text observations out; text actions in, game actions out.

:class:`ArcEnvBase` implements the whole :class:`~tempo_rl.envs.core.ReplayableEnv` contract on top of three
hooks a concrete adapter provides (``_new_game``, ``_game_reset``, ``_game_step``); the local stub game
(:mod:`tempo_rl.envs.arc.stub`) and the real toolkit (:mod:`tempo_rl.envs.arc.toolkit`) differ only there.

Per step (``t`` counts every action, accepted or not, since the reset):

* reward ``r_t = (levels_completed_t - levels_completed_{t-1}) / win_levels``, so an episode's return is the
  fraction of levels completed and lies in [0, 1] (TEMPO's ``R_max = 1``);
* ``terminated`` when the game reports ``WIN`` or ``GAME_OVER`` (the MDP ended: no bootstrap);
* ``truncated`` when ``t == max_steps`` and the game is not over (cut by the step limit: bootstrap V_hat).

Text that is not an action, or an action the game does not list as available, is not sent to the game: the
observation repeats the frame with a ``last action:`` line explaining why, and the step still counts towards
``max_steps``. Both are deterministic, so replay reproduces them.

Restore: by replay (every adapter is deterministic given its seed), or natively with :meth:`ArcEnvBase.fork`,
which deep-copies the game object (O(size of the game state), independent of the episode's length).
"""

from __future__ import annotations

import abc
import copy
from dataclasses import dataclass
from typing import Any

from tempo_rl.envs.arc.frames import (
    ArcAction,
    ArcFrame,
    GameState,
    InvalidActionError,
    parse_action,
    render_frame,
)
from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult, require_reset

__all__ = ["DEFAULT_TASK", "ArcEnvBase"]

#: The task sentence shown to the actor (the rules are hidden: that is the point of ARC-AGI-3).
DEFAULT_TASK = (
    "Play the game shown in the frames and win it by completing every level. The rules are not given: "
    "find them by experimenting. Actions: ACTION1-ACTION5, ACTION7, or 'ACTION6 x y' to click pixel (x, y)."
)


@dataclass(kw_only=True, eq=False, repr=False)
class ArcEnvBase(ReplayableEnv):
    """A :class:`ReplayableEnv` over any ARC-AGI-3-style game object.

    Args:
        max_steps: the step limit T of an episode (>= 1); reaching it truncates.
        scale: render one cell per ``scale`` x ``scale`` pixel block (1 = the full 64 x 64 frame).
        sep: separator between the cells of a rendered row (``""`` or ``" "``).
        list_clicks: include ``ACTION6 x y`` for the game's click targets in ``admissible_actions`` (when the
            game exposes them); the simple available actions are always listed.
        task: the task sentence (``Observation.info["task"]``).

    Subclasses set ``self._game`` in :meth:`_new_game` and implement :meth:`_game_reset` and
    :meth:`_game_step`; they may override :meth:`_click_targets`, :meth:`_fingerprint`,
    :meth:`privileged_info` and :meth:`walkthrough`.
    """

    max_steps: int = 30
    scale: int = 1
    sep: str = ""
    list_clicks: bool = True
    task: str = DEFAULT_TASK

    def __post_init__(self) -> None:
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {self.max_steps!r}")
        if not isinstance(self.scale, int) or self.scale < 1 or 64 % self.scale:
            raise ValueError(f"scale must divide 64 (1, 2, 4, 8, ...), got {self.scale!r}")
        if self.sep not in ("", " "):
            raise ValueError(f"sep must be '' or ' ', got {self.sep!r}")
        self._game: Any = None
        self._frame: ArcFrame | None = None
        self._steps = 0
        self._seed: int | None = None

    # ------------------------------------------------------------------ hooks
    @abc.abstractmethod
    def _new_game(self, seed: int) -> None:
        """Build a fresh game for ``seed`` and store it in ``self._game`` (called by every :meth:`reset`)."""

    @abc.abstractmethod
    def _game_reset(self) -> ArcFrame:
        """Reset ``self._game`` and return its first frame."""

    @abc.abstractmethod
    def _game_step(self, action: ArcAction) -> ArcFrame:
        """Apply ``action`` to ``self._game`` and return the resulting frame."""

    def _click_targets(self) -> tuple[tuple[int, int], ...]:
        """Pixels ``(x, y)`` worth clicking now (listed as admissible ``ACTION6 x y``); none by default."""
        return ()

    def _fingerprint(self) -> str | None:
        """An exact digest of the game's hidden state, or None."""
        return None

    # ------------------------------------------------------------------ contract
    @property
    def frame(self) -> ArcFrame:
        """The current frame (raises before the first reset)."""
        return require_reset(self._frame)

    @property
    def steps(self) -> int:
        """Actions taken since the last reset."""
        return self._steps

    def reset(self, seed: int | None = None) -> Observation:
        """Build the game for ``seed`` (``None`` means 0) and return the first frame as text."""
        self._seed = 0 if seed is None else int(seed)
        self._new_game(self._seed)
        self._frame = self._game_reset()
        self._steps = 0
        return self._observation()

    def step(self, action: str) -> StepResult:
        """Parse ``action``, apply it when valid, report reward and end flags (see the module docstring)."""
        before = self.frame
        if before.state in (GameState.WIN, GameState.GAME_OVER):
            over = f"ignored: the game is over ({before.state.value}); reset to play again"
            return StepResult(self._observation(over), 0.0, terminated=True, info=self._info(False))
        self._steps += 1
        feedback: str | None = None
        valid = False
        try:
            parsed = parse_action(action)
        except InvalidActionError as exc:
            feedback = f"invalid: {exc}"
        else:
            if parsed.number not in before.available_actions:
                feedback = f"invalid: {parsed.name} is not available now"
            else:
                self._frame = self._game_step(parsed)
                valid = True
        after = self.frame
        reward = (after.levels_completed - before.levels_completed) / max(after.win_levels, 1)
        terminated = after.state in (GameState.WIN, GameState.GAME_OVER)
        truncated = not terminated and self._steps >= self.max_steps
        return StepResult(
            observation=self._observation(feedback),
            reward=float(reward),
            terminated=terminated,
            truncated=truncated,
            info=self._info(valid),
        )

    def _info(self, valid: bool) -> dict[str, Any]:
        frame = self.frame
        return {
            "won": frame.state == GameState.WIN,
            "state": frame.state.value,
            "levels_completed": frame.levels_completed,
            "valid_action": valid,
        }

    def admissible(self) -> tuple[str, ...]:
        """The available simple actions in order, then ``ACTION6 x y`` per click target (if listed)."""
        actions: list[str] = []
        for number in sorted(self.frame.available_actions):
            if number != 6:
                actions.append(f"ACTION{number}")
            elif self.list_clicks:
                actions.extend(f"ACTION6 {x} {y}" for x, y in self._click_targets())
        return tuple(actions)

    def _observation(self, feedback: str | None = None) -> Observation:
        frame = self.frame
        text = render_frame(
            frame,
            scale=self.scale,
            sep=self.sep,
            feedback=feedback,
            extra_lines=(f"step: {self._steps}/{self.max_steps}",),
        )
        return Observation(text=text, admissible_actions=self.admissible(), info={"task": self.task})

    def state_fingerprint(self) -> str | None:
        """The game's hidden-state digest combined with the step counter (None when the game has none)."""
        digest = self._fingerprint() if self._game is not None else None
        return None if digest is None else f"{digest}:{self._steps}"

    def fork(self) -> ArcEnvBase:
        """An exact, independent copy: the adapter's fields are copied and the game object is deep-copied."""
        if self._frame is None:
            raise RuntimeError("fork() before reset(); call reset(seed) first")
        clone = copy.copy(self)
        clone._game = copy.deepcopy(self._game)
        return clone
