"""Precompute planner walkthroughs for a folder of ALFWorld games (``tempo-rl data alfworld --plan DIR``).

ALFWorld's train games carry no ``walkthrough``, so without a plan the critic gets no privileged information
on them. :func:`plan_walkthroughs` runs Fast Downward on every game that lacks one, keeps a plan only when
replaying it wins, and caches it under the game's content hash (:func:`~.walkthrough.store_cached_walkthrough`,
the cache :class:`~.env.AlfworldEnv` reads in its default ``walkthrough="auto"`` mode). How it copes with a
large folder:

* **parallel:** ``workers`` processes, each loading games one after another (a worker is reused across games);
* **resumable:** a game whose plan is already cached is not planned again, and every plan is written
  atomically as soon as it is found, so a killed run loses only the games in flight;
* **failures are counted, listed and skipped:** no plan, a plan that does not win, a planner error, a worker
  that died, and a game that took longer than ``timeout`` seconds (ALFWorld's planner can hang on large
  games): the worker planning it is killed and replaced, and the rest go on.

Outcome statuses (:class:`PlanOutcome`): ``planned``, ``cached``, ``has_walkthrough`` (the file's own
walkthrough is used; nothing to plan) and the failures ``no_plan``, ``not_winning``, ``error``, ``crashed``,
``timeout``.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Literal

from tempo_rl.envs.alfworld.data import read_game_file
from tempo_rl.envs.alfworld.text import canonicalize_action
from tempo_rl.envs.alfworld.walkthrough import default_cache_dir, load_cached_walkthrough

__all__ = [
    "DEFAULT_PLANNER",
    "FAILURES",
    "STARTUP_LIMIT_S",
    "PlanOutcome",
    "PlanReport",
    "PlanStatus",
    "content_key",
    "discover_plan_targets",
    "plan_game",
    "plan_walkthroughs",
    "plan_with_engine",
]

PlanStatus = Literal[
    "planned", "cached", "has_walkthrough", "no_plan", "not_winning", "error", "crashed", "timeout"
]
#: The statuses that count as failures (the game is listed and skipped).
FAILURES: frozenset[str] = frozenset({"no_plan", "not_winning", "error", "crashed", "timeout"})
#: Seconds a new worker may take to begin a game (interpreter start and imports; at least ``timeout``).
STARTUP_LIMIT_S = 120.0
#: ``"module:function"`` of the planner a worker runs per game: ``planner(game_file, cache_dir) -> PlanOutcome``.
DEFAULT_PLANNER = "tempo_rl.envs.alfworld.planning:plan_game"


@dataclass(frozen=True)
class PlanOutcome:
    """What happened to one game.

    Attributes:
        game_file: the ``game.tw-pddl`` path.
        status: see the module docstring.
        steps: commands in the walkthrough (planned, cached or the file's own), else 0.
        seconds: wall-clock seconds spent on it (0 for games that needed no planning).
        detail: why it failed, when it did.
    """

    game_file: str
    status: PlanStatus
    steps: int = 0
    seconds: float = 0.0
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.status in FAILURES


@dataclass
class PlanReport:
    """Every game's :class:`PlanOutcome`, in input order."""

    outcomes: list[PlanOutcome] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """``{status: games}`` for the statuses that occurred."""
        return dict(Counter(o.status for o in self.outcomes))

    @property
    def failures(self) -> list[PlanOutcome]:
        return [o for o in self.outcomes if o.failed]

    @property
    def with_walkthrough(self) -> int:
        """Games that now have a walkthrough (their own, cached before, or planned now)."""
        return sum(o.status in ("planned", "cached", "has_walkthrough") for o in self.outcomes)

    def summary(self) -> str:
        """One line, e.g. ``"6 games: 2 planned, 1 cached, 3 has_walkthrough; 0 failed"``."""
        order = ("planned", "cached", "has_walkthrough", *sorted(FAILURES))
        counts = self.counts()
        parts = ", ".join(f"{counts[s]} {s}" for s in order if counts.get(s))
        n = len(self.outcomes)
        return f"{n} game{'' if n == 1 else 's'}: {parts or 'none'}; {len(self.failures)} failed"


def content_key(game_file: str | os.PathLike[str]) -> str:
    """The cache key of a game: SHA-256 (32 hex chars) of the file's bytes, as the engine pool computes it."""
    from tempo_rl.envs.alfworld.fast import game_key

    return game_key(Path(game_file).read_bytes())


def plan_with_engine(engine: Any, cache_dir: Path) -> tuple[PlanOutcome, tuple[str, ...] | None]:
    """Plan the game loaded in ``engine`` (an :class:`~.fast.Engine`): Fast Downward from the reset state, kept
    and cached only when replaying it wins; a cached plan is returned without planning.

    Returns:
        The outcome and the walkthrough (None unless ``planned`` or ``cached``).
    """
    from tempo_rl.envs.alfworld.walkthrough import store_cached_walkthrough

    t0 = time.perf_counter()
    game_file = str(engine.path)
    cached = load_cached_walkthrough(cache_dir, engine.key)
    if cached is not None:
        return PlanOutcome(game_file, "cached", len(cached), time.perf_counter() - t0), cached
    engine.reset()
    plan = tuple(canonicalize_action(c) for c in engine.plan())
    if not plan:
        return PlanOutcome(
            game_file, "no_plan", 0, time.perf_counter() - t0, "the planner found no plan"
        ), None
    engine.reset()
    won = False
    for command in plan:
        won = engine.step(command).won
    if not won:
        detail = f"replaying the {len(plan)}-step plan does not win the game"
        return PlanOutcome(game_file, "not_winning", 0, time.perf_counter() - t0, detail), None
    store_cached_walkthrough(cache_dir, engine.key, plan, source="fast_downward")
    return PlanOutcome(game_file, "planned", len(plan), time.perf_counter() - t0), plan


def plan_game(game_file: str, cache_dir: str) -> PlanOutcome:
    """Plan one game in this process (what a worker runs, see :func:`plan_with_engine`); the engine is
    dropped afterwards, so a worker's memory stays flat over many games. Needs the ``alfworld`` extra."""
    from tempo_rl.envs.alfworld.fast import get_pool

    pool = get_pool()
    engine = pool.acquire(game_file)
    try:
        return plan_with_engine(engine, Path(cache_dir))[0]
    finally:
        pool.release(engine)
        pool.clear()


def _resolve(path: str) -> Callable[[str, str], PlanOutcome]:
    module, _, attribute = path.partition(":")
    if not module or not attribute:
        raise ValueError(f"planner must be 'module:function', got {path!r}")
    planner: Callable[[str, str], PlanOutcome] = getattr(importlib.import_module(module), attribute)
    return planner


def _worker(conn: Connection, planner_path: str, cache_dir: str) -> None:
    """Worker process: for each ``(index, game_file)`` received, answer ``("started", index)`` at once, then
    ``("done", index, PlanOutcome)``; the parent's per-game clock starts at the first answer, so the worker's
    own start-up (a fresh interpreter and its imports) never counts against a game."""
    planner = _resolve(planner_path)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if message is None:
            return
        index, game_file = message
        t0 = time.perf_counter()
        try:
            conn.send(("started", index))
            try:
                outcome = planner(game_file, cache_dir)
            except (
                Exception,
                SystemExit,
            ) as exc:  # TextWorld / Fast Downward raise bare errors, even SystemExit
                outcome = PlanOutcome(
                    game_file, "error", 0, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
                )
            conn.send(("done", index, outcome))
        except (BrokenPipeError, OSError):
            return


@dataclass
class _Slot:
    process: Any
    conn: Connection
    job: tuple[int, str, float] | None = None  # (index, game_file, sent at)
    started: float | None = None  # when the worker began the job (its clock for the time limit)

    def deadline(self, timeout: float, startup: float) -> float:
        assert self.job is not None
        return self.started + timeout if self.started is not None else self.job[2] + startup


def _prefilter(game_file: Path, cache: Path) -> PlanOutcome | None:
    """The outcome of a game that needs no planner (its own walkthrough, or a cached plan), else None."""
    data = read_game_file(game_file)
    own = data.get("walkthrough")
    if own:
        return PlanOutcome(str(game_file), "has_walkthrough", len(own))
    cached = load_cached_walkthrough(cache, content_key(game_file))
    if cached is not None:
        return PlanOutcome(str(game_file), "cached", len(cached))
    return None


def plan_walkthroughs(
    game_files: Iterable[str | os.PathLike[str]],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    timeout: float = 300.0,
    planner: str = DEFAULT_PLANNER,
    on_outcome: Callable[[PlanOutcome], None] | None = None,
) -> PlanReport:
    """Plan, verify and cache a walkthrough for every game that lacks one.

    Args:
        game_files: ``game.tw-pddl`` paths.
        cache_dir: the walkthrough cache (default :func:`~.walkthrough.default_cache_dir`, the one
            :class:`~.env.AlfworldEnv` reads by default).
        workers: planner processes (>= 1).
        timeout: seconds one game may take in a worker (engine load included, the worker's own start-up
            not) before the worker is killed and the game counted as ``timeout``.
        planner: ``"module:function"`` a worker runs per game, ``planner(game_file, cache_dir) -> PlanOutcome``
            (default :func:`plan_game`; another one plugs in a different planner).
        on_outcome: called with each game's outcome as it is known (in completion order): a progress bar.

    Returns:
        A :class:`PlanReport` in input order.

    Raises:
        ValueError: ``workers < 1``, ``timeout <= 0`` or a ``planner`` that is not ``"module:function"``.
        ImportError / AttributeError: the planner cannot be imported.
        AlfworldDataError: a game file is missing or corrupt (checked before any planning starts).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    _resolve(planner)  # a bad planner path fails here, not as one crashed worker per game
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    files = [Path(f) for f in game_files]
    outcomes: list[PlanOutcome | None] = [None] * len(files)
    todo: deque[tuple[int, str]] = deque()
    for i, path in enumerate(files):
        known = _prefilter(path, cache)
        if known is None:
            todo.append((i, str(path)))
        else:
            outcomes[i] = known
            if on_outcome is not None:
                on_outcome(known)
    if todo:
        _run_workers(todo, outcomes, cache, min(workers, len(todo)), timeout, planner, on_outcome)
    return PlanReport([o for o in outcomes if o is not None])


def _run_workers(
    todo: deque[tuple[int, str]],
    outcomes: list[PlanOutcome | None],
    cache: Path,
    workers: int,
    timeout: float,
    planner: str,
    on_outcome: Callable[[PlanOutcome], None] | None,
) -> None:
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that has loaded TextWorld / threads
    cache.mkdir(parents=True, exist_ok=True)
    startup = max(STARTUP_LIMIT_S, timeout)  # a worker that cannot even start a job: wedged or starved

    def start() -> _Slot:
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_worker, args=(child, planner, str(cache)), daemon=True)
        process.start()
        child.close()
        return _Slot(process, parent)

    def finish(slot: _Slot, outcome: PlanOutcome) -> None:
        assert slot.job is not None
        outcomes[slot.job[0]] = outcome
        slot.job = slot.started = None
        if on_outcome is not None:
            on_outcome(outcome)

    def stop(slot: _Slot) -> None:
        slot.process.kill()
        slot.process.join(5)
        slot.conn.close()

    slots = [start() for _ in range(workers)]
    try:
        while todo or any(s.job is not None for s in slots):
            for slot in slots:
                if slot.job is None and todo:
                    index, game = todo.popleft()
                    slot.job = (index, game, time.monotonic())
                    with contextlib.suppress(BrokenPipeError, OSError):  # a dead worker: seen as EOF below
                        slot.conn.send((index, game))
            busy = [s for s in slots if s.job is not None]
            deadline = min(s.deadline(timeout, startup) for s in busy)
            ready = wait([s.conn for s in busy], timeout=max(0.0, deadline - time.monotonic()))
            for i, slot in enumerate(slots):
                if slot.job is None:
                    continue
                _, game, sent = slot.job
                if slot.conn in ready:
                    try:
                        message = slot.conn.recv()
                    except (EOFError, OSError):
                        slot.process.join(5)
                        since = slot.started if slot.started is not None else sent
                        detail = f"the worker died (exit code {slot.process.exitcode})"
                        finish(slot, PlanOutcome(game, "crashed", 0, time.monotonic() - since, detail))
                        stop(slot)
                        slots[i] = start()
                        continue
                    if message[0] == "started":
                        slot.started = time.monotonic()
                    else:
                        finish(slot, message[2])
                    continue
                now = time.monotonic()
                if now < slot.deadline(timeout, startup):
                    continue
                stop(slot)
                if slot.started is not None:
                    outcome = PlanOutcome(
                        game,
                        "timeout",
                        0,
                        now - slot.started,
                        f"no plan within {timeout:g} s (the worker was killed)",
                    )
                else:
                    detail = f"the worker did not start the game within {startup:g} s (it was killed)"
                    outcome = PlanOutcome(game, "timeout", 0, now - sent, detail)
                finish(slot, outcome)
                slots[i] = start()
    finally:
        for slot in slots:
            if slot.process.is_alive():
                with contextlib.suppress(BrokenPipeError, OSError):
                    slot.conn.send(None)
        for slot in slots:
            slot.process.join(2)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join(2)
            slot.conn.close()


def discover_plan_targets(root: str | os.PathLike[str]) -> tuple[list[Path], dict[str, int]]:
    """Every playable game under ``root`` (any split, see :func:`~.data.discover_games`) and the skip counts."""
    from tempo_rl.envs.alfworld.data import discover_games

    found = discover_games(root)
    return [g.game_file for g in found.games], dict(found.skipped)
