"""Shared fixtures for the ALFWorld adapter tests.

Real games come from ``tests/data/alfworld/json_2.1.1`` (vendored into the repository; copied into temp dirs
before use). Tests that need TextWorld skip with a reason only when the ``alfworld`` extra is absent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from alfworld_testlib import (
    ONE_PER_TYPE,
    OTHER_SMALL_GAME,
    SMALL_GAME,
    copy_game,
    needs_alfworld,
)


@pytest.fixture(scope="session", autouse=True)
def _alfworld_data_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """``import alfworld.info`` creates $ALFWORLD_DATA; keep it out of the user's home during tests."""
    old = os.environ.get("ALFWORLD_DATA")
    os.environ["ALFWORLD_DATA"] = str(tmp_path_factory.mktemp("alfworld_data"))
    yield
    if old is None:
        os.environ.pop("ALFWORLD_DATA", None)
    else:
        os.environ["ALFWORLD_DATA"] = old


@pytest.fixture(scope="session")
def games_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temp data root holding copies of the games the default tests use."""
    root = tmp_path_factory.mktemp("alfworld_games")
    for rel in [*ONE_PER_TYPE.values(), SMALL_GAME, OTHER_SMALL_GAME]:
        copy_game(rel, root)
    return root


@pytest.fixture(scope="session")
def small_game(games_root: Path) -> Path:
    needs_alfworld()
    return next((games_root / "json_2.1.1" / SMALL_GAME).rglob("game.tw-pddl"))


@pytest.fixture(scope="session")
def other_small_game(games_root: Path) -> Path:
    needs_alfworld()
    return next((games_root / "json_2.1.1" / OTHER_SMALL_GAME).rglob("game.tw-pddl"))
