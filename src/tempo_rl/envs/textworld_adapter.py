"""TextWorld adapter: any Inform7 ``.z8`` (or ``.ulx``) game file as a :class:`ReplayableEnv`.

Needs the ``alfworld`` extra (``pip install 'tempo-rl[alfworld]'``, which brings ``textworld==1.7.0``);
TextWorld is imported only when an env is built. Games can be generated offline with TextWorld's generator,
e.g. ``tw-make custom --world-size 3 --nb-objects 5 --quest-length 3 --seed 1 --output g1.z8`` (it also writes
``g1.json``, which holds the walkthrough and the objective).

Semantics:

* ``reset(seed)``: z8 games are deterministic; the seed does not change the game (it is recorded, as for any
  env, and must still be passed identically on restore).
* ``step(action)``: the command is sent as is (TextWorld lowercases and parses it); an unknown command gets
  the game's own answer (e.g. ``"That's not a verb I recognise."``), never an exception.
* reward = the change in the game's score; ``terminated`` when the game is won or lost; ``truncated`` after
  ``max_steps`` steps when a limit is given.
* observation text: the game's feedback with the ASCII-art banner, the status line and surplus blank lines
  removed (``clean=False`` keeps TextWorld's raw feedback); admissible commands as TextWorld lists them;
  ``info["task"]`` is the game's objective.
* privileged info: the walkthrough (when the game's ``.json`` sidecar has one) and the objective.
* ``fork()``: ``env.copy()`` of the Inform7 interpreter (~0.1 s), checked sound by ``check-replay``.
* ``state_fingerprint()``: the interpreter's world-object-tree hash (Jericho), so replay verifies the hidden
  state as well as the text.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

from tempo_rl._optional import require
from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult

__all__ = ["TextWorldEnv", "clean_feedback"]

_BANNER_LINE = re.compile(r"^[\s_|\\/$<>]*$")
_STATUS = re.compile(r"\n>[^\n]*$")


def clean_feedback(text: str) -> str:
    """Drop banner lines made only of ``_|\\/$<>`` art, the trailing ``>`` prompt/status line and blanks."""
    text = _STATUS.sub("", text)
    lines = [line.rstrip() for line in text.split("\n")]
    kept = [line for line in lines if line.strip() and not _BANNER_LINE.match(line)]
    return "\n".join(kept).strip()


#: the facts TextWorld is asked to report with every observation (``textworld.EnvInfos`` flags)
_GAME_INFOS = ("admissible_commands", "won", "lost", "score", "max_score", "objective")


class TextWorldEnv(ReplayableEnv):
    """One TextWorld game file.

    Args:
        path: the ``.z8`` / ``.ulx`` game file (its ``.json`` sidecar, when present, provides the
        walkthrough).
        max_steps: truncate after this many steps (``None``: no limit beyond the game's own).
        clean: tidy the feedback text (see :func:`clean_feedback`).
        fingerprint: record the interpreter's world-state hash at every step (stronger verification).
    """

    def __init__(
        self, path: str, max_steps: int | None = None, clean: bool = True, fingerprint: bool = True
    ) -> None:
        game = Path(path)
        if not game.is_file():
            raise ValueError(
                f"TextWorld game file {str(game)!r} does not exist; generate one with e.g. "
                "'tw-make custom --world-size 3 --nb-objects 5 --quest-length 3 --seed 1 --output game.z8'"
            )
        if game.suffix not in (".z8", ".ulx", ".z5"):
            raise ValueError(f"expected a .z8 / .ulx game file, got {str(game)!r}")
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"max_steps must be a positive int or None, got {max_steps!r}")
        self.path = str(game)
        self.max_steps = max_steps
        self.clean = clean
        self.fingerprint = fingerprint
        self._env: Any = None
        self._steps = 0
        self._score = 0.0
        self._done = False
        self._objective = ""
        self._walkthrough: tuple[str, ...] | None = None

    def _start(self) -> Any:
        textworld = require("textworld", "alfworld")
        infos = textworld.EnvInfos(**dict.fromkeys(_GAME_INFOS, True), extras=["walkthrough"])
        from tempo_rl.envs.alfworld.compat import make_parsers_thread_safe

        make_parsers_thread_safe()  # one TatSu parser per thread: games may load in several threads
        with warnings.catch_warnings():
            # Jericho warns that generated games are "not fully supported" (its own score/move detection);
            # the adapter reads the score from TextWorld, so the warning is noise here.
            warnings.simplefilter("ignore")
            return textworld.start(self.path, request_infos=infos)

    def _observation(self, state: Any) -> Observation:
        raw = str(state.feedback or "")
        text = clean_feedback(raw) if self.clean else raw
        admissible = state.get("admissible_commands")
        return Observation(
            text=text,
            admissible_actions=tuple(admissible) if admissible is not None and not self._done else None,
            info={"task": self._objective, "score": self._score, "max_score": state.get("max_score")},
        )

    def reset(self, seed: int | None = None) -> Observation:
        if self._env is None:
            self._env = self._start()
        state = self._env.reset()
        self._steps = 0
        self._score = float(state.get("score") or 0.0)
        self._done = False
        self._objective = str(state.get("objective") or "")
        walkthrough = state.get("extra.walkthrough")
        self._walkthrough = tuple(walkthrough) if walkthrough else None
        return self._observation(state)

    def step(self, action: str) -> StepResult:
        if self._env is None:
            raise RuntimeError("step() before reset(); call reset(seed) first")
        if self._done:
            return StepResult(
                Observation("The episode is over.", None, {"task": self._objective}), 0.0, True, False
            )
        state, _, _ = self._env.step(str(action))
        self._steps += 1
        score = float(state.get("score") or 0.0)
        reward, self._score = score - self._score, score
        won, lost = bool(state.get("won")), bool(state.get("lost"))
        terminated = won or lost
        truncated = not terminated and self.max_steps is not None and self._steps >= self.max_steps
        self._done = terminated or truncated
        return StepResult(
            self._observation(state), reward, terminated, truncated, info={"won": won, "lost": lost}
        )

    def privileged_info(self) -> str | None:
        parts = [f"Objective: {self._objective}"] if self._objective else []
        if self._walkthrough:
            parts.append("Walkthrough: " + ", ".join(self._walkthrough) + ".")
        return " ".join(parts) or None

    def walkthrough(self) -> tuple[str, ...] | None:
        return self._walkthrough

    def fork(self) -> TextWorldEnv:
        if self._env is None:
            raise RuntimeError("fork() before reset(); call reset(seed) first")
        copy = TextWorldEnv.__new__(TextWorldEnv)
        copy.__dict__.update(self.__dict__)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the same Jericho "not fully supported" notice as in _start
            copy._env = self._env.copy()
        return copy

    def state_fingerprint(self) -> str | None:
        if not self.fingerprint or self._env is None:
            return None
        jericho = getattr(self._env, "_jericho", None) or getattr(
            getattr(self._env, "_wrapped_env", None), "_jericho", None
        )
        if jericho is None:
            return None
        return f"{jericho.get_world_state_hash()}|{self._steps}|{self._score}|{self._done}"

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
