"""``arc``: real ARC-AGI-3 games through the ``arc-agi`` toolkit's OFFLINE mode (extra ``arc``, Python 3.12+).

The toolkit (``pip install 'tempo-rl[arc]'``, i.e. ``arc-agi`` + ``arcengine``) runs a game locally from a
folder ``environments_dir/<any>/{metadata.json, <class_name lower>.py}`` whose Python file defines a subclass
of ``arcengine.ARCBaseGame``. No game ships with the toolkit: write one, or fetch one once with the toolkit's
NORMAL mode (which downloads game files and needs an API key and the network) and then play it offline here.

How the adapter maps the toolkit onto :class:`~tempo_rl.envs.core.ReplayableEnv`:

* ``reset(seed)``: the first reset loads the game with ``Arcade(operation_mode=OFFLINE).make(game_id,
  seed=seed)``; every reset then builds a fresh game object of that class the way the toolkit's local wrapper
  does (``seed`` is passed when the constructor takes one), and a ``RESET`` action gives the first frame.
* ``step(text)``: the text is parsed as ``ACTION1``-``ACTION7`` / ``ACTION6 x y`` and applied with
  ``game.perform_action(ActionInput(...), raw=True)``, exactly as the toolkit's local wrapper does (without
  its scorecard bookkeeping). The last frame of the returned animation is rendered as text.
* ``fork()``: ``copy.deepcopy`` of the game object (~0.2 ms for a small game), O(1) in the episode length.
* ``privileged_info()``: the game's source file, for the critic only.

Limits: only OFFLINE mode is supported. ONLINE play has no restore at all (the server state cannot be saved or
replayed into), and COMPETITION mode forbids restore by design (only level resets are allowed), so TEMPO's
macro-steps cannot be used there; evaluate such runs as plain full episodes instead.
"""

from __future__ import annotations

import inspect
import logging
import sys
from pathlib import Path
from typing import Any

from tempo_rl._optional import MissingDependencyError
from tempo_rl.envs.arc.adapter import ArcEnvBase
from tempo_rl.envs.arc.frames import ArcAction, ArcFrame, GameState

__all__ = ["ArcToolkitEnv", "import_toolkit"]

_INSTALL = (
    "the ARC-AGI-3 toolkit ('arc-agi', Python >= 3.12) is required for the 'arc' env. Install it with: "
    "pip install 'tempo-rl[arc]' (on Python 3.12 or newer)"
)


def import_toolkit() -> tuple[Any, Any]:
    """Import and return the ``arc_agi`` and ``arcengine`` modules.

    Raises:
        MissingDependencyError: the toolkit is not installed, or the interpreter is older than Python 3.12
            (the toolkit does not support it); the message names the fix.
    """
    if sys.version_info < (3, 12):
        raise MissingDependencyError(
            f"{_INSTALL}; this interpreter is Python {sys.version_info.major}.{sys.version_info.minor}"
        )
    try:
        import arc_agi
        import arcengine
    except ImportError as exc:
        raise MissingDependencyError(_INSTALL) from exc
    return arc_agi, arcengine


def _quiet_logger() -> logging.Logger:
    scorecards = logging.getLogger("arc_agi.scorecard")  # logs INFO on every Arcade(); keep warnings only
    if scorecards.level < logging.WARNING:
        scorecards.setLevel(logging.WARNING)
    logger = logging.getLogger("tempo_rl.envs.arc.toolkit")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


class ArcToolkitEnv(ArcEnvBase):
    """A local ARC-AGI-3 game (toolkit OFFLINE mode) as a :class:`~tempo_rl.envs.core.ReplayableEnv`.

    Registered as ``arc``; e.g. ``tempo-rl check-replay "arc:environments_dir=games,game_id=lock"``.

    Args:
        game_id: the game's id (its first part before ``-``, e.g. ``"ls20"``; a full ``"ls20-<version>"``
            selects a version).
        environments_dir: the folder scanned for ``metadata.json`` files.
        max_steps: the episode step limit T (truncation).
        scale: render one cell per ``scale`` x ``scale`` pixel block (1 = the full 64 x 64 frame).
        sep: separator between rendered cells (``""`` or ``" "``).
        list_clicks: list ``ACTION6 x y`` for the sprites the game marks clickable (``sys_click``) among the
            admissible actions. Off by default: the ARC-AGI-3 API never tells an agent where to click.

    Raises:
        MissingDependencyError: the toolkit is missing or Python < 3.12.
        FileNotFoundError: ``environments_dir`` does not exist.
        ValueError: no game ``game_id`` under ``environments_dir`` (the message lists those found).
    """

    def __init__(
        self,
        game_id: str,
        environments_dir: str,
        max_steps: int = 50,
        scale: int = 1,
        sep: str = "",
        list_clicks: bool = False,
    ) -> None:
        super().__init__(max_steps=max_steps, scale=scale, sep=sep, list_clicks=list_clicks)
        arc_agi, arcengine = import_toolkit()
        root = Path(environments_dir).expanduser()
        if not root.is_dir():
            raise FileNotFoundError(
                f"environments_dir {str(root)!r} is not a folder; point it at the folder holding "
                "<game>/metadata.json and <game>/<class_name>.py"
            )
        self.game_id = game_id
        self.environments_dir = str(root)
        self._arcengine = arcengine
        self._arcade = arc_agi.Arcade(
            operation_mode=arc_agi.OperationMode.OFFLINE,
            environments_dir=str(root),
            recordings_dir=str(root / ".recordings"),
            logger=_quiet_logger(),
        )
        found = sorted({info.game_id for info in self._arcade.available_environments})
        base = game_id.split("-", 1)[0]
        if not any(found_id.split("-", 1)[0] == base for found_id in found):
            raise ValueError(
                f"no ARC game {game_id!r} under {str(root)!r}; games found: {', '.join(found) or 'none'}. "
                "Each game needs <dir>/metadata.json (with game_id and class_name) and <dir>/<class_name>.py"
            )
        self._source: str | None = None
        self._game_class: type | None = None

    # ------------------------------------------------------------------ hooks
    def _new_game(self, seed: int) -> None:
        if self._game_class is not None:  # later resets: instantiate as the toolkit's local wrapper does
            accepts_seed = "seed" in inspect.signature(self._game_class).parameters
            self._game = self._game_class(seed=seed) if accepts_seed else self._game_class()
            return
        wrapper = self._arcade.make(self.game_id, seed=seed)  # first reset: the toolkit loads the game file
        game = getattr(wrapper, "_game", None) if wrapper is not None else None
        if game is None:
            raise RuntimeError(
                f"the arc-agi toolkit could not load game {self.game_id!r} from {self.environments_dir!r} "
                "(see the toolkit's log: a syntax error in the game file, or a class_name that differs)"
            )
        self._game = game
        self._game_class = type(game)
        if self._source is None:
            info = wrapper.info
            class_name = info.class_name or ""
            directory = Path(info.local_dir or self.environments_dir)
            for candidate in (directory / f"{class_name.lower()}.py", directory / f"{class_name}.py"):
                if candidate.is_file():
                    self._source = candidate.read_text(encoding="utf-8")
                    break

    def _to_frame(self, raw: Any) -> ArcFrame:
        frames = list(raw.frame)
        grid = frames[-1] if frames else self.frame.grid  # finished games return no new frame
        return ArcFrame(
            grid=grid.astype("int64", copy=True),
            state=GameState(raw.state.value if hasattr(raw.state, "value") else str(raw.state)),
            levels_completed=int(raw.levels_completed),
            win_levels=int(raw.win_levels),
            available_actions=tuple(sorted(int(n) for n in raw.available_actions)),
        )

    def _perform(self, number: int, data: dict[str, int] | None = None) -> ArcFrame:
        engine = self._arcengine
        action_input = engine.ActionInput(id=engine.GameAction.from_id(number), data=data or {})
        return self._to_frame(self._game.perform_action(action_input, raw=True))

    def _game_reset(self) -> ArcFrame:
        return self._perform(0)

    def _game_step(self, action: ArcAction) -> ArcFrame:
        data = {"x": action.x, "y": action.y} if action.number == 6 else None
        return self._perform(action.number, data)  # type: ignore[arg-type]

    def _click_targets(self) -> tuple[tuple[int, int], ...]:
        targets = []
        for valid in self._game._get_valid_actions():
            if valid.id.value == 6 and "x" in valid.data and "y" in valid.data:
                targets.append((int(valid.data["x"]), int(valid.data["y"])))
        return tuple(sorted(set(targets), key=lambda xy: (xy[1], xy[0])))

    def privileged_info(self) -> str | None:
        """The game's source file (its rules), as the TEMPO critic sees it; None if it could not be read."""
        if self._source is None:
            return None
        header = f"Source code of the ARC-AGI-3 game {self.game_id!r} (hidden from the player):\n\n"
        return header + self._source
