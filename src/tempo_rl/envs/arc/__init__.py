"""ARC-AGI-3 adapters: a local hidden-rule stub game (``arc-stub``) and the real toolkit (``arc``).

* :class:`ArcStubEnv` (:mod:`tempo_rl.envs.arc.stub`): pure Python, runs everywhere.
* :class:`~tempo_rl.envs.arc.toolkit.ArcToolkitEnv` (:mod:`tempo_rl.envs.arc.toolkit`): local game files
  through the ``arc-agi`` toolkit's OFFLINE mode (Python >= 3.12, ``pip install 'tempo-rl[arc]'``). It is
  imported lazily (``from tempo_rl.envs.arc.toolkit import ArcToolkitEnv``), never by this package.

Shared pieces: :mod:`tempo_rl.envs.arc.frames` (frames as text, action parsing) and
:mod:`tempo_rl.envs.arc.adapter` (:class:`ArcEnvBase`, the ReplayableEnv over any game object).
"""

from tempo_rl.envs.arc.adapter import DEFAULT_TASK, ArcEnvBase
from tempo_rl.envs.arc.frames import (
    FRAME_SIZE,
    ArcAction,
    ArcFrame,
    GameState,
    InvalidActionError,
    parse_action,
    render_frame,
    render_grid,
)
from tempo_rl.envs.arc.stub import ArcStubEnv
from tempo_rl.envs.arc.stub_game import HiddenRuleGame

__all__ = [
    "DEFAULT_TASK",
    "FRAME_SIZE",
    "ArcAction",
    "ArcEnvBase",
    "ArcFrame",
    "ArcStubEnv",
    "GameState",
    "HiddenRuleGame",
    "InvalidActionError",
    "parse_action",
    "render_frame",
    "render_grid",
]
