"""Gymnasium adapter: any Gymnasium env as a text :class:`ReplayableEnv`, via obs->text and text->action maps.

Needs the ``gymnasium`` extra (imported only when an env is built). Replay relies on Gymnasium's seeding
contract: ``reset(seed=s)`` followed by the same actions reproduces the same trajectory, stochastic dynamics
included (the env's ``np_random`` is seeded by ``reset``). A ``None`` seed is replaced by 0 so that every
episode stays replayable.

Two ways to use it:

* from a spec string, ``gymnasium:id=FrozenLake-v1,is_slippery=false``: extra keyword arguments go to
  ``gymnasium.make``; the text mapping comes from a built-in preset for ``FrozenLake`` and ``Taxi`` (any
  version), or the generic one (``repr`` of the observation, actions ``action 0 .. action n-1`` for a
  ``Discrete`` space);
* from code, with your own functions::

      env = GymnasiumEnv("CliffWalking-v1", obs_to_text=lambda obs, env: f"You are on cell {obs}.",
                         actions=("up", "right", "down", "left"))
      register("cliff", lambda: env_factory())  # register a zero-argument factory to restore it by name

Unparseable text is refused with feedback listing the actions (the Gymnasium env is not stepped, a step of
``max_steps`` is still used); never an exception.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from tempo_rl._optional import require
from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult

__all__ = ["PRESETS", "GymnasiumEnv", "TextPreset", "frozenlake_text", "taxi_text"]

#: obs_to_text(observation, gymnasium_env) -> text
ObsToText = Callable[[Any, Any], str]
#: text_to_action(text) -> a Gymnasium action, or None when the text is not an action
TextToAction = Callable[[str], Any]


def frozenlake_text(obs: Any, env: Any) -> str:
    """FrozenLake: the map rows (S start, F frozen, H hole, G goal) and the agent's row and column
    (1-based)."""
    desc = env.unwrapped.desc
    rows = [b"".join(row).decode() for row in desc]
    ncol = len(rows[0])
    row, col = int(obs) // ncol + 1, int(obs) % ncol + 1
    return f"Lake map: {' '.join(rows)}. You are at row {row} column {col}."


_TAXI_LOCS = ("red", "green", "yellow", "blue")


def taxi_text(obs: Any, env: Any) -> str:
    """Taxi: the taxi's row and column (1-based), where the passenger waits (or "in taxi") and the
    destination."""
    taxi_row, taxi_col, passenger, destination = env.unwrapped.decode(int(obs))
    where = "in the taxi" if passenger == 4 else f"at the {_TAXI_LOCS[passenger]} stand"
    return (
        f"Taxi at row {taxi_row + 1} column {taxi_col + 1}. The passenger is {where}. "
        f"Destination: the {_TAXI_LOCS[destination]} stand."
    )


class TextPreset:
    """A text mapping for one Gymnasium env id: how observations read and which action texts exist."""

    def __init__(self, obs_to_text: ObsToText, actions: Sequence[str], task: str, fork: bool) -> None:
        self.obs_to_text = obs_to_text
        self.actions = tuple(actions)
        self.task = task
        self.fork = fork


#: Built-in presets by Gymnasium env name (the id without its ``-vN`` version suffix).
PRESETS: dict[str, TextPreset] = {
    "FrozenLake": TextPreset(
        frozenlake_text,
        ("move left", "move down", "move right", "move up"),
        "Walk from S to G over the frozen lake without falling into a hole H.",
        fork=True,
    ),
    "Taxi": TextPreset(
        taxi_text,
        ("move south", "move north", "move east", "move west", "pick up", "drop off"),
        "Drive to the passenger, pick them up, drive to the destination and drop them off.",
        fork=True,
    ),
}


def _generic_text(obs: Any, env: Any) -> str:
    return f"Observation: {obs!r}."


class GymnasiumEnv(ReplayableEnv):
    """A Gymnasium env driven by text actions.

    Args:
        id: the Gymnasium id passed to ``gymnasium.make``.
        obs_to_text: ``f(observation, gymnasium_env) -> str``; default: the preset for ``id`` or ``repr``.
        actions: the action texts, index ``i`` meaning Gymnasium action ``i`` (``Discrete`` spaces); they are
            the admissible actions. Default: the preset's, else ``action 0 .. action n-1``.
        text_to_action: ``f(text) -> action or None`` for non-discrete spaces (then ``actions`` may be None
            and no admissible list is shown).
        task: the task sentence (``info["task"]`` and the start of the reset text).
        max_steps: an extra step limit (truncation) on top of the Gymnasium env's own.
        fork: allow ``fork()`` by ``copy.deepcopy`` of the Gymnasium env (sound for toy-text envs); default:
            the preset's setting, else False.
        **make_kwargs: passed to ``gymnasium.make`` (JSON-serialisable when used through the registry).
    """

    def __init__(
        self,
        id: str,
        obs_to_text: ObsToText | None = None,
        actions: Sequence[str] | None = None,
        text_to_action: TextToAction | None = None,
        task: str | None = None,
        max_steps: int | None = None,
        fork: bool | None = None,
        **make_kwargs: Any,
    ) -> None:
        gymnasium = require("gymnasium", "gymnasium")
        preset = PRESETS.get(id.rsplit("-v", 1)[0])
        try:
            self._gym = gymnasium.make(id, **make_kwargs)
        except gymnasium.error.Error as exc:
            raise ValueError(f"gymnasium.make({id!r}) failed: {exc}") from exc
        self.id = id
        self._obs_to_text = obs_to_text or (preset.obs_to_text if preset else _generic_text)
        space = self._gym.action_space
        if actions is None and text_to_action is None:
            if preset is not None:
                actions = preset.actions
            elif isinstance(space, gymnasium.spaces.Discrete):
                actions = tuple(f"action {i}" for i in range(int(space.n)))
            else:
                raise ValueError(
                    f"{id} has a {type(space).__name__} action space: pass text_to_action (and optionally "
                    "actions) to map text to actions"
                )
        self._actions = tuple(actions) if actions is not None else None
        if (
            self._actions is not None
            and isinstance(space, gymnasium.spaces.Discrete)
            and len(self._actions) != int(space.n)
        ):
            raise ValueError(
                f"{id} has {int(space.n)} actions but {len(self._actions)} action texts were given"
            )
        self._text_to_action = text_to_action
        self.task = task or (preset.task if preset else f"Play {id}.")
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
        self.max_steps = max_steps
        self._fork = bool(preset.fork) if fork is None and preset is not None else bool(fork)
        self._steps = 0
        self._done = False
        self._last_obs: Any = None

    def _decode(self, text: str) -> Any:
        normalised = " ".join(text.strip().lower().split())
        if self._actions is not None:
            lowered = [a.lower() for a in self._actions]
            if normalised in lowered:
                return lowered.index(normalised)
        if self._text_to_action is not None:
            return self._text_to_action(text)
        return None

    def _observation(self, feedback: str = "") -> Observation:
        text = self._obs_to_text(self._last_obs, self._gym)
        return Observation(
            text=f"{feedback} {text}".strip() if feedback else text,
            admissible_actions=None if self._done else self._actions,
            info={"task": self.task, "steps": self._steps},
        )

    def reset(self, seed: int | None = None) -> Observation:
        self._last_obs, _ = self._gym.reset(seed=0 if seed is None else seed)
        self._steps = 0
        self._done = False
        return self._observation(f"Task: {self.task}")

    def step(self, action: str) -> StepResult:
        if self._last_obs is None:
            raise RuntimeError("step() before reset(); call reset(seed) first")
        if self._done:
            return StepResult(self._observation("The episode is over."), 0.0, False, False)
        self._steps += 1
        decoded = self._decode(str(action))
        limit_hit = self.max_steps is not None and self._steps >= self.max_steps
        if decoded is None:
            options = ", ".join(self._actions) if self._actions else "a valid action"
            self._done = limit_hit
            return StepResult(
                self._observation(f"Unknown action {str(action)[:40]!r}. Use one of: {options}."),
                0.0,
                False,
                limit_hit,
                info={"admissible": False},
            )
        self._last_obs, reward, terminated, truncated, info = self._gym.step(decoded)
        truncated = bool(truncated) or (not terminated and limit_hit)
        self._done = bool(terminated) or truncated
        return StepResult(self._observation(), float(reward), bool(terminated), truncated, info=dict(info))

    @property
    def supports_fork(self) -> bool:
        """True when ``fork=True`` (or the preset says deepcopy is sound)."""
        return self._fork

    def fork(self) -> GymnasiumEnv:
        if not self._fork:
            raise NotImplementedError(
                f"fork() is off for {self.id}; pass fork=True if deepcopy is sound for it"
            )
        return copy.deepcopy(self)

    def state_fingerprint(self) -> str | None:
        unwrapped = self._gym.unwrapped
        state = getattr(unwrapped, "s", None)
        rng = getattr(unwrapped, "_np_random", None)
        if state is None or rng is None:
            return None
        payload = f"{int(state)}|{rng.bit_generator.state}|{self._steps}|{self._done}"
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def close(self) -> None:
        self._gym.close()
