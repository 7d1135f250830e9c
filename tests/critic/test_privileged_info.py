"""How much privileged information the critic gets: the per-update tally and the training-start check."""

from __future__ import annotations

import math
import shutil
import warnings
from pathlib import Path

import pytest

from tempo_rl.critic.privileged import (
    PRIVILEGED_INFO_RATE,
    PrivilegedInfoTally,
    PrivilegedInfoWarning,
    has_privileged_info,
    privileged_info_coverage,
    warn_missing_privileged_info,
)
from tempo_rl.envs import register, unregister
from tempo_rl.envs.keydoor import KeyDoorEnv
from tempo_rl.training.config import EnvConfig

GAMES = Path(__file__).resolve().parents[1] / "data" / "alfworld" / "json_2.1.1"  # vendored real games


class BlindKeyDoor(KeyDoorEnv):
    """KeyDoor without privileged information."""

    def privileged_info(self) -> str | None:
        return None


def test_tally_rate_is_the_share_of_starts_with_non_blank_info() -> None:
    tally = PrivilegedInfoTally()
    for text in ("walkthrough: go to desk 1", None, "  \n", "x"):
        tally.observe(text)
    assert tally.pop_metrics() == {PRIVILEGED_INFO_RATE: 0.5}  # 2 of 4
    assert math.isnan(tally.pop_metrics()[PRIVILEGED_INFO_RATE])  # popped: the next update starts at 0
    tally.observe(None)
    tally.clear()
    tally.observe("a")
    assert tally.pop_metrics() == {PRIVILEGED_INFO_RATE: 1.0}
    assert has_privileged_info("a") and not has_privileged_info("") and not has_privileged_info(None)


def _alfworld_games(tmp_path: Path) -> Path:
    """3 train games (no walkthrough) and 1 valid_seen game (its own walkthrough) in one folder."""
    root = tmp_path / "games"
    for split in ("valid_train", "valid_seen"):
        for task in sorted((GAMES / split).iterdir()):
            if split == "valid_seen" and not task.name.startswith("look_at_obj_in_light"):
                continue
            shutil.copytree(task, root / split / task.name)
    return root


def test_alfworld_train_games_are_named_with_the_fix(tmp_path: Path) -> None:
    """No TextWorld needed: the ALFWorld check reads game files and the planner cache only."""
    from tempo_rl.envs.alfworld.planning import content_key
    from tempo_rl.envs.alfworld.walkthrough import store_cached_walkthrough

    root = _alfworld_games(tmp_path)
    cache = tmp_path / "cache"
    env = EnvConfig(name="alfworld", kwargs={"max_steps": 30, "cache_dir": str(cache)}, games_dir=str(root))
    with pytest.warns(PrivilegedInfoWarning) as caught:
        coverage = warn_missing_privileged_info(env)
    assert coverage is not None and coverage.exhaustive
    assert coverage.checked == 4 and len(coverage.missing) == 3 and coverage.rate == 0.25
    assert all("valid_train" in m for m in coverage.missing)
    message = str(caught[0].message)
    assert "3 of 4 training games" in message and str(root) in message
    assert "tempo-rl data alfworld --plan" in message and "critic/privileged_info_rate" in message

    planned = Path(coverage.missing[0])  # a cached plan (what --plan writes) counts
    store_cached_walkthrough(cache, content_key(planned), ["go to desk 1"], source="test")
    assert privileged_info_coverage(env).missing == coverage.missing[1:]
    planner = EnvConfig(name="alfworld", kwargs={"walkthrough": "planner"}, games_dir=str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivilegedInfoWarning)
        assert warn_missing_privileged_info(planner) is not None  # plans on first use: no warning
    none = EnvConfig(name="alfworld", kwargs={"walkthrough": "none"}, games_dir=str(root))
    assert privileged_info_coverage(none).rate == 0.0
    file_only = EnvConfig(
        name="alfworld", kwargs={"walkthrough": "file", "cache_dir": str(cache)}, games_dir=str(root)
    )
    assert len(privileged_info_coverage(file_only).missing) == 3  # the cache is not read in "file" mode


def test_other_envs_are_checked_on_their_first_game() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivilegedInfoWarning)
        coverage = warn_missing_privileged_info(EnvConfig(name="keydoor"))
    assert coverage is not None and coverage.checked == 1 and not coverage.missing and not coverage.exhaustive
    register("test-blind-keydoor", BlindKeyDoor, overwrite=True)
    try:
        with pytest.warns(PrivilegedInfoWarning, match=r"first training game \(test-blind-keydoor:0\)"):
            coverage = warn_missing_privileged_info(EnvConfig(name="test-blind-keydoor"))
    finally:
        unregister("test-blind-keydoor")
    assert coverage is not None and coverage.missing == ("test-blind-keydoor:0",)


def test_a_broken_env_does_not_stop_the_check() -> None:
    assert (
        warn_missing_privileged_info(EnvConfig(name="alfworld", games_dir="/nonexistent/games")) is not None
    )
    assert warn_missing_privileged_info(EnvConfig(name="no-such-env")) is None
