"""ALFWorld games load, step and restore concurrently in threads (TextWorld's shared TatSu parsers were not
thread-safe: two loads at once failed with ``'ActionGrammarNode' object is not iterable`` and the like)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from alfworld_testlib import ONE_PER_TYPE, OTHER_SMALL_GAME, SMALL_GAME, needs_alfworld

from tempo_rl.envs.snapshot import EnvSpec

GAMES = [
    SMALL_GAME,
    OTHER_SMALL_GAME,
    ONE_PER_TYPE["pick_and_place_simple"],
    ONE_PER_TYPE["pick_two_obj_and_place"],
]


def _game_file(games_root: Path, rel: str) -> Path:
    return next((games_root / "json_2.1.1" / rel).rglob("game.tw-pddl"))


def _play_and_restore(game: Path) -> tuple[str, str, int]:
    """Build and reset a game, take 4 admissible steps, restore the state by verified replay."""
    from tempo_rl.envs import make
    from tempo_rl.envs.restore import restore

    env = make(EnvSpec(name="alfworld", kwargs={"game_file": str(game), "max_steps": 30}))
    try:
        obs = env.reset()
        for _ in range(4):
            action = next(a for a in obs.admissible_actions or () if a not in ("help", "look", "inventory"))
            obs = env.step(action).observation
        snap = env.snapshot()
    finally:
        env.close()
    branch = restore(snap, verify=True)  # raises on any divergence of text or PDDL state
    try:
        return branch.last_observation.text, snap.last_observation, branch.round_index
    finally:
        branch.close()


@pytest.mark.slow
def test_games_build_step_and_restore_concurrently_in_threads(games_root: Path) -> None:
    needs_alfworld()
    from tempo_rl.envs.alfworld.fast import get_pool

    get_pool().clear()  # force real loads (no warm engine from earlier tests)
    files = [_game_file(games_root, rel) for rel in GAMES]
    results: dict[int, Any] = {}
    barrier = threading.Barrier(len(files))

    def work(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[i] = _play_and_restore(files[i])
        except BaseException as exc:  # reported below with the game it failed on
            results[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(files))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    errors = {
        GAMES[i]: f"{type(r).__name__}: {r}" for i, r in results.items() if isinstance(r, BaseException)
    }
    assert not errors, errors
    assert len(results) == len(files)
    for text, expected, depth in results.values():
        assert text == expected and depth == 4


def test_textworld_parsers_are_per_thread() -> None:
    needs_alfworld()
    import textworld.logic
    import textworld.textgen
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen as pddl_textgen

    from tempo_rl.envs.alfworld.compat import ThreadLocalParser, patch_textworld

    patch_textworld()
    shared = [
        textworld.logic._PARSER,
        textworld.textgen.TextGrammar._PARSER,
        pddl_logic._PARSER,
        pddl_textgen._PARSER,
    ]
    assert all(isinstance(p, ThreadLocalParser) for p in shared)
    here = [p.parser() for p in shared]
    assert [p.parser() for p in shared] == here  # one parser per thread, reused
    there: list[Any] = []
    worker = threading.Thread(target=lambda: there.extend(p.parser() for p in shared))
    worker.start()
    worker.join()
    assert all(a is not b and type(a) is type(b) for a, b in zip(here, there))
    assert all(a.semantics is not b.semantics for a, b in zip(here, there))
    # parses in another thread equal this thread's
    parsed: list[Any] = []
    worker = threading.Thread(target=lambda: parsed.append(textworld.logic.Predicate.parse("at(P, r)")))
    worker.start()
    worker.join()
    assert parsed == [textworld.logic.Predicate.parse("at(P, r)")]
    assert str(parsed[0]) == "at(P, r)"
