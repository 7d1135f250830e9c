"""Shared fixtures for the env tests: one TextWorld game generated per test session (~5 s)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def z8_game(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small TextWorld game (3 rooms, 5 objects, quest length 3, seed 1), compiled once per session."""
    pytest.importorskip("textworld", reason="TextWorld is not installed (pip install 'tempo-rl[alfworld]')")
    import textworld
    import textworld.generator

    options = textworld.GameOptions()
    options.seeds = 1
    options.nb_rooms = 3
    options.nb_objects = 5
    options.quest_length = 3
    options.path = str(tmp_path_factory.mktemp("textworld") / "g1.z8")
    game = textworld.generator.make_game(options)
    return Path(textworld.generator.compile_game(game, options))
