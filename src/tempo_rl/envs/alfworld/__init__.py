"""ALFWorld on the ReplayableEnv contract: data discovery, the env, fast verified restore, offline games.

Importing this package is cheap: TextWorld and ALFWorld (the ``alfworld`` extra) are imported only when a game
is loaded. Public names:

* data: :func:`discover_games`, :class:`GameRecord`, :data:`TASK_TYPES`, :data:`SPLITS`,
  :func:`shuffle_games`,
  :func:`take_batch`, :func:`count_by_split_and_type`, :class:`AlfworldDataError`;
* the env: :class:`AlfworldEnv`; its text conventions: :func:`canonicalize_action`, :func:`extract_task`;
* walkthroughs: :func:`map_walkthrough`, :func:`compute_planner_walkthrough`, :func:`plan_walkthroughs` (a
  folder, in parallel: ``tempo-rl data alfworld --plan``);
* speed: :func:`get_pool` (warm engine pool), :func:`operator_memo`;
* offline games: :func:`generate_game`, :func:`generate_games` (see :mod:`.generator`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tempo_rl.envs.alfworld.data import (
    SPLITS,
    TASK_TYPES,
    AlfworldDataError,
    Discovery,
    GameRecord,
    count_by_split_and_type,
    default_data_root,
    discover_games,
    read_game_file,
    shuffle_games,
    take_batch,
)
from tempo_rl.envs.alfworld.text import canonicalize_action, extract_task
from tempo_rl.envs.alfworld.walkthrough import map_walkthrough

if TYPE_CHECKING:
    from tempo_rl.envs.alfworld.env import AlfworldEnv, compute_planner_walkthrough
    from tempo_rl.envs.alfworld.fast import get_pool, operator_memo
    from tempo_rl.envs.alfworld.generator import generate_game, generate_games
    from tempo_rl.envs.alfworld.planning import plan_walkthroughs

__all__ = [
    "SPLITS",
    "TASK_TYPES",
    "AlfworldDataError",
    "AlfworldEnv",
    "Discovery",
    "GameRecord",
    "canonicalize_action",
    "compute_planner_walkthrough",
    "count_by_split_and_type",
    "default_data_root",
    "discover_games",
    "extract_task",
    "generate_game",
    "generate_games",
    "get_pool",
    "map_walkthrough",
    "operator_memo",
    "plan_walkthroughs",
    "read_game_file",
    "shuffle_games",
    "take_batch",
]

_LAZY = {
    "AlfworldEnv": "env",
    "compute_planner_walkthrough": "env",
    "get_pool": "fast",
    "operator_memo": "fast",
    "generate_game": "generator",
    "generate_games": "generator",
    "plan_walkthroughs": "planning",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tempo_rl.envs.alfworld' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"tempo_rl.envs.alfworld.{module}"), name)
