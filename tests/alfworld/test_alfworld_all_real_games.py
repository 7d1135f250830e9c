"""Every real valid_seen / valid_unseen game: the (id-mapped) walkthrough wins (slow).

The sweep covers ../shared's 48 valid games when that folder sits beside the clone, else the 12 vendored ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alfworld_testlib import SHARED_JSON, needs_alfworld, sweep_json

from tempo_rl.envs.alfworld.data import discover_games
from tempo_rl.envs.alfworld.walkthrough import has_raw_ids


@pytest.mark.slow
def test_every_valid_walkthrough_wins(tmp_path: Path) -> None:
    needs_alfworld()
    import shutil

    from tempo_rl.envs.alfworld.env import AlfworldEnv
    from tempo_rl.envs.alfworld.fast import get_pool

    source = sweep_json()
    for split in ("valid_seen", "valid_unseen"):
        shutil.copytree(source / split, tmp_path / "json_2.1.1" / split)
    found = discover_games(tmp_path)
    assert len(found) == (48 if source == SHARED_JSON else 12)
    failures = []
    for game in found.games:
        env = AlfworldEnv(game.game_file)
        try:
            obs = env.reset()
            walkthrough = env.walkthrough()
            assert walkthrough and not has_raw_ids(walkthrough)
            won = False
            for command in walkthrough:
                if command not in obs.admissible_actions:
                    failures.append(f"{game.id}: {command!r} not admissible")
                    break
                result = env.step(command)
                obs, won = result.observation, result.terminated
            if not won:
                failures.append(f"{game.id}: walkthrough did not win")
        finally:
            env.close()
            get_pool().clear()  # keep memory flat over many games
    assert not failures, failures
