"""The real ARC-AGI-3 toolkit adapter (``arc`` env) on a small game written for the tests.

The toolkit needs Python >= 3.12 and the ``arc`` extra; elsewhere these tests skip with that reason, except
the one checking that the missing dependency is reported clearly. Run them with
``.venv312/bin/python -m pytest tests/arc -q`` in a 3.12 venv holding
``pip install -e '.[arc]' pytest pytest-timeout hypothesis``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tempo_rl._optional import MissingDependencyError
from tempo_rl.envs import ForkCache, Snapshot, make, restore

GAMES = Path(__file__).parent / "games"
HAVE_TOOLKIT = sys.version_info >= (3, 12) and importlib.util.find_spec("arc_agi") is not None
needs_toolkit = pytest.mark.skipif(
    not HAVE_TOOLKIT, reason="needs the arc-agi toolkit: Python >= 3.12 and pip install 'tempo-rl[arc]'"
)
# Solves both levels of tests/arc/games/lock for seed 0 (player starts at cell (1, 1)).
LEVEL_ONE_SOLUTION = [
    "ACTION6 20 52",
    "ACTION4",
    "ACTION4",
    "ACTION4",
    "ACTION4",
    "ACTION2",
    "ACTION2",
    "ACTION4",
]
SOLUTION = [*LEVEL_ONE_SOLUTION, "ACTION6 12 52", "ACTION4", "ACTION4", "ACTION4", "ACTION4", "ACTION4"]
LEVEL_ONE = ["44444444", "43002004", "40002004", "400020e4", "40002004", "40002004", "40902004", "44444444"]


@pytest.mark.skipif(HAVE_TOOLKIT, reason="checks the error raised where the toolkit is absent")
def test_missing_toolkit_names_the_fix() -> None:
    with pytest.raises(MissingDependencyError, match=r"tempo-rl\[arc\]"):
        make("arc", game_id="lock", environments_dir=str(GAMES))


@needs_toolkit
def test_first_frame_and_admissible_actions() -> None:
    env = make("arc", game_id="lock", environments_dir=str(GAMES), scale=8, list_clicks=True)
    obs = env.reset(0)
    assert obs.text.splitlines()[-8:] == LEVEL_ONE
    assert obs.text.splitlines()[0] == (
        "state: NOT_FINISHED | levels completed: 0/2 | available actions: ACTION1 ACTION2 ACTION3 ACTION4 "
        "ACTION5 ACTION6"
    )
    assert obs.admissible_actions == ("ACTION1", "ACTION2", "ACTION3", "ACTION4", "ACTION5", "ACTION6 16 48")
    hidden = make("arc", game_id="lock", environments_dir=str(GAMES)).reset(0)
    assert hidden.admissible_actions == ("ACTION1", "ACTION2", "ACTION3", "ACTION4", "ACTION5")
    assert len(hidden.text.splitlines()) == 3 + 64


@needs_toolkit
def test_solution_wins_with_return_one_and_seed_moves_the_start() -> None:
    env = make("arc", game_id="lock", environments_dir=str(GAMES), scale=8)
    env.reset(0)
    results = [env.step(action) for action in SOLUTION]
    assert sum(r.reward for r in results) == pytest.approx(1.0)
    assert results[7].reward == pytest.approx(0.5) and results[-1].terminated and results[-1].info["won"]
    assert all(not r.done for r in results[:-1])
    assert env.step("ACTION1").terminated  # the game is over
    other = make("arc", game_id="lock", environments_dir=str(GAMES), scale=8).reset(1)
    assert other.text.splitlines()[-6] == "43002004"  # seed 1 starts one row lower


@needs_toolkit
def test_door_blocks_until_the_switch_is_clicked() -> None:
    env = make("arc", game_id="lock", environments_dir=str(GAMES), scale=8)
    env.reset(0)
    for _ in range(4):
        env.step("ACTION4")
    assert env.last_observation.text.splitlines()[-7] == "40032004"  # stopped by the door at x = 4
    env.step("ACTION6 20 52")  # the switch
    assert env.last_observation.text.splitlines()[-7] == "40030004"


@needs_toolkit
def test_restore_by_replay_and_by_fork() -> None:
    env = make("arc", game_id="lock", environments_dir=str(GAMES), scale=8)
    env.reset(0)
    for action in SOLUTION[:9]:
        env.step(action)
    snapshot = Snapshot.from_json(env.snapshot().to_json())
    cache = ForkCache()
    assert cache.put(env)
    replayed, forked = restore(snapshot), restore(snapshot, cache=cache)
    assert cache.stats.hits == 1
    tail = SOLUTION[9:]
    expected = [env.step(a).observation for a in tail]
    for restored in (replayed, forked):
        assert [restored.step(a).observation for a in tail] == expected
    assert env.done and env.last_observation.text.startswith("state: WIN")


@needs_toolkit
def test_fork_deep_copies_the_game() -> None:
    from tempo_rl.envs.arc.toolkit import ArcToolkitEnv

    env = ArcToolkitEnv("lock", str(GAMES), scale=8)
    env.reset(0)
    clone = env.fork()
    assert clone._game is not env._game
    clone.step("ACTION6 20 52")  # opens the door in the clone only
    assert env.frame.grid[8 * 3, 8 * 4] == 2 and clone.frame.grid[8 * 3, 8 * 4] == 0
    env.step("ACTION2")
    assert clone.steps == 1 and env.steps == 1 and env.frame.grid[8 * 2 + 1, 8 + 1] == 3


@needs_toolkit
def test_privileged_info_is_the_game_source() -> None:
    env = make("arc", game_id="lock", environments_dir=str(GAMES))
    obs = env.reset(0)
    info = env.privileged_info() or ""
    assert "class Lock(ARCBaseGame)" in info and "Hidden rule" in info
    assert "switch" not in obs.text.lower()


@needs_toolkit
def test_clear_errors_for_bad_locations(tmp_path: Path) -> None:
    from tempo_rl.envs.arc.toolkit import ArcToolkitEnv

    with pytest.raises(FileNotFoundError, match="environments_dir"):
        ArcToolkitEnv("lock", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="lock-v1"):
        ArcToolkitEnv("nope", str(GAMES))
