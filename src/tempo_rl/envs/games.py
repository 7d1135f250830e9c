"""Game files: an env that plays one file per episode (ALFWorld, TextWorld) draws its games from a folder."""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["GAME_KWARG", "NoGamesError", "find_games", "game_file_pattern"]

#: the env constructor keyword that takes a game file (``env.games_dir``): an env built from game files names
#: its argument ``game_file``
GAME_KWARG = "game_file"


class NoGamesError(FileNotFoundError):
    """A games folder holds no file that matches the pattern."""


@functools.lru_cache(maxsize=64)
def find_games(folder: str, pattern: str) -> tuple[str, ...]:
    """The files under ``folder`` matching the glob ``pattern`` (e.g. ``"**/game.tw-pddl"``), sorted, so
    that game ``i`` is the same file on every call and after a resume. Read once per (folder, pattern).

    Raises:
        NoGamesError: nothing matches (the message names the folder and the pattern).
    """
    files = tuple(sorted(str(p) for p in Path(folder).glob(pattern) if p.is_file()))
    if not files:
        raise NoGamesError(f"no game file matches {pattern!r} under {folder!r}")
    return files


def game_file_pattern(env_name: str) -> str:
    """The glob of the game files of registered env ``env_name`` in a games folder: its factory's
    ``game_files`` attribute (ALFWorld: ``"**/game.tw-pddl"``), else every file (``"**/*"``)."""
    from tempo_rl.envs.registry import get_factory

    return str(getattr(get_factory(env_name), "game_files", "**/*"))
