"""Stand-in planners for the ``--plan`` tests, run inside the planner worker processes.

What a fake does depends on the name of the game's folder: ``hang`` sleeps for an hour (a planner that never
returns), ``crash`` kills its worker, ``raise`` raises, ``noplan`` finds no plan, ``slow`` takes 0.4 s and
then succeeds; anything else succeeds at once. A success caches the one-step walkthrough ``("look",)`` under
the game's content key, as the real planner would cache its plan. ``PLAN_FAKES_IMPORT_DELAY_S`` delays the
import of this module (a worker's start-up).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import tempo_rl.envs.alfworld.fast  # noqa: F401 - content_key's import, paid at start-up, not per game
from tempo_rl.envs.alfworld.planning import PlanOutcome, content_key
from tempo_rl.envs.alfworld.walkthrough import store_cached_walkthrough

#: A slow worker start-up (a cold interpreter, heavy imports), in seconds, when the variable is set.
time.sleep(float(os.environ.get("PLAN_FAKES_IMPORT_DELAY_S", "0")))


def fake_planner(game_file: str, cache_dir: str) -> PlanOutcome:
    kind = Path(game_file).parent.name.split("-")[0]
    if kind == "hang":
        time.sleep(3600)
    if kind == "crash":
        os._exit(3)
    if kind == "raise":
        raise RuntimeError("the planner broke")
    if kind == "noplan":
        return PlanOutcome(game_file, "no_plan", detail="the planner found no plan")
    if kind == "slow":
        time.sleep(0.4)
    store_cached_walkthrough(Path(cache_dir), content_key(game_file), ["look"], source="fake")
    return PlanOutcome(game_file, "planned", 1)


def cached_only(game_file: str, cache_dir: str) -> PlanOutcome:
    """Fails every game: a run with it succeeds only on games the cache already answers."""
    raise AssertionError(f"{game_file} was sent to a planner although its plan is cached")
