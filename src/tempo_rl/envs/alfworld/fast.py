"""The ALFWorld game engine behind :class:`~tempo_rl.envs.alfworld.env.AlfworldEnv`, and what makes it fast.

An :class:`Engine` is one loaded TextWorld ``PddlEnv`` (wrapped by ``AlfredDemangler(shuffle=False)`` and
``AlfredInfos``, exactly as ALFWorld builds it) plus three things the stock stack lacks:

* **Translation memoisation** (:func:`~tempo_rl.envs.alfworld.compat.enable_translation_cache`): a ``reset()``
  re-runs the PDDL->SAS translation twice; memoised per game it drops from ~1.4 s to the state build.
* **A warm pool** (:class:`EnginePool`): engines are keyed by the SHA-256 of the game file's *content* and
  handed back on ``close()``, so restoring N branches reuses N loaded engines through a cheap reset instead
  of creating N fresh ones (or N worker processes).
* **Text-free replay** (:meth:`Engine.apply_operator`): per step ~90% of the stock cost is deriving the text
  of
  every admissible command; the PDDL state update itself is ~0.2 ms. Every full step records
  ``(game key, fact digest before, command) -> operator id`` in a process-wide :class:`OperatorMemo`; a replay
  applies the recorded operators directly, checks the fact digest after *every* step, and rebuilds text and
  the admissible list once at the end, where they are checked too. A memo miss falls back to a full step.

The fact digest (:meth:`Engine.fingerprint`) is the SHA-256 of the sorted PDDL fact set: the exact hidden
state
of a PDDL game. Feedback text is a deterministic function of (facts, applied operator) (TextWorld's grammar
always takes its first applicable rule and uses no RNG), so checking facts per step and text at the end is a
stronger check than comparing texts alone (ALFWorld's "Nothing happens." says nothing about the state).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempo_rl._optional import require
from tempo_rl.envs.alfworld.compat import (
    CompatWrapper,
    enable_parse_cache,
    enable_translation_cache,
    patch_textworld,
    preserve_argv,
)
from tempo_rl.envs.alfworld.data import AlfworldDataError, read_game_file

__all__ = ["Engine", "EnginePool", "OperatorMemo", "game_key", "get_pool", "operator_memo"]


def game_key(data: bytes) -> str:
    """Content key of a game file: SHA-256 (hex, first 32 chars) of its bytes."""
    return hashlib.sha256(data).hexdigest()[:32]


class OperatorMemo:
    """LRU map ``(game key, fact digest, command) -> operator id | None`` (None = "Nothing happens.").

    Filled by every full step; read by text-free replay. Bounded (``maxsize`` entries, ~200 bytes each).
    """

    def __init__(self, maxsize: int = 500_000) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[str, str, str], int | None] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    _MISSING = object()

    def get(self, key: tuple[str, str, str]) -> tuple[bool, int | None]:
        """``(found, operator id or None)``."""
        with self._lock:
            value = self._entries.get(key, self._MISSING)
            if value is self._MISSING:
                self.misses += 1
                return False, None
            self._entries.move_to_end(key)
            self.hits += 1
            return True, value  # type: ignore[return-value]

    def put(self, key: tuple[str, str, str], operator_id: int | None) -> None:
        with self._lock:
            self._entries[key] = operator_id
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


_MEMO = OperatorMemo()


def operator_memo() -> OperatorMemo:
    """The process-wide operator memo."""
    return _MEMO


@dataclass
class _GameState:
    """What the last full (text) step or reset produced."""

    text: str
    admissible: tuple[str, ...]
    won: bool


@dataclass(frozen=True)
class _OperatorRef:
    """What ``PddlState.apply`` reads from an action: its operator id."""

    id: int


class Engine:
    """One loaded ALFWorld game: a stock TextWorld ``PddlEnv`` with demangled names, driven directly.

    Not thread-safe; one engine serves one :class:`AlfworldEnv` at a time (the pool enforces it).
    """

    def __init__(self, game_file: str | Path, data: bytes | None = None) -> None:
        path = Path(game_file)
        raw = data if data is not None else path.read_bytes()
        read_game_file(path)  # validates, with an error naming the file
        require("alfworld", "alfworld")
        textworld = require("textworld", "alfworld")
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        patch_textworld()
        enable_translation_cache()
        enable_parse_cache()
        self._fd = require("fast_downward", "alfworld", package="fast-downward-textworld")
        self.path = path
        self.key = game_key(raw)
        infos = textworld.EnvInfos(won=True, admissible_commands=True)
        try:
            with preserve_argv():
                self._tw = textworld.start(
                    str(path), infos, wrappers=[CompatWrapper, AlfredDemangler(shuffle=False), AlfredInfos]
                )
        except (
            Exception
        ) as exc:  # TextWorld / Fast Downward raise bare KeyError, AssertionError, SystemExit...
            raise AlfworldDataError(
                f"cannot load ALFWorld game {str(path)!r}: {type(exc).__name__}: {exc}. The PDDL problem is "
                "malformed or its goal is statically unreachable (an unsolvable game); skip or regenerate it"
            ) from exc
        self._pe: Any = self._tw.unwrapped
        self._gamestate_cls = textworld.core.GameState
        #: raw PDDL entity id (lower case) -> the name the agent sees, e.g. "cabinet 1"
        self.names: dict[str, str] = {k: str(v.name).strip() for k, v in self._pe._entity_infos.items()}
        self.file_walkthrough: list[str] | None = self._pe._game_data.get("walkthrough") or None
        self._fingerprint: str | None = None
        self._infos_stale = True
        self.closed = False

    # -- state ---------------------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """SHA-256 (hex, 32 chars) of the sorted PDDL fact set (cached until the state changes)."""
        if self._fingerprint is None:
            facts = sorted(
                f"{p.name}({','.join(f'{v.name}:{v.type}' for v in p.arguments)})"
                for p in self._pe._pddl_state.facts
            )
            self._fingerprint = hashlib.sha256("\n".join(facts).encode("utf-8")).hexdigest()[:32]
        return self._fingerprint

    def _current(self, text: str) -> _GameState:
        st = self._pe.state
        return _GameState(text=text, admissible=tuple(st["admissible_commands"]), won=bool(st["won"]))

    # -- full (text) operations, stock TextWorld code paths -------------------------------------------------
    def reset(self) -> _GameState:
        """Stock ``reset()``: new PDDL state, intro text, admissible commands."""
        with preserve_argv():
            st = self._tw.reset()
        self._fingerprint = None
        self._infos_stale = False
        return self._current(str(st.feedback))

    def step(self, command: str) -> _GameState:
        """Stock ``step(command)`` (feedback + admissible list); records the applied operator in the memo."""
        if self._infos_stale:
            self._pe._gather_infos()
            self._infos_stale = False
        before = self.fingerprint()
        st, _score, _done = self._tw.step(command)
        action = self._pe._last_action
        _MEMO.put((self.key, before, command.strip()), None if action is None else int(action.id))
        if action is not None:
            self._fingerprint = None
        return self._current(str(st.feedback))

    # -- text-free operations (replay) -----------------------------------------------------------------------
    def reset_silent(self) -> None:
        """Rebuild the initial PDDL state without generating any text (the translation is memoised)."""
        textworld = require("textworld", "alfworld")
        from textworld.envs.pddl import logic as pddl_logic

        pe = self._pe
        with preserve_argv():
            pe._pddl_state = pddl_logic.PddlState(pe.downward_lib, pe._game_data["pddl_problem"], pe._logic)
        pe.prev_state = None
        pe.state = textworld.core.GameState()
        pe._last_action = None
        pe._moves = 0
        self._fingerprint = None
        self._infos_stale = True

    def lookup(self, command: str) -> tuple[bool, int | None]:
        """The memoised operator of ``command`` in the current state: ``(found, operator id or None)``."""
        return _MEMO.get((self.key, self.fingerprint(), command.strip()))

    def _find_action(self, operator_id: int) -> Any:
        for action in self._pe._pddl_state.all_applicable_actions():
            if int(action.id) == operator_id:
                return action
        return None

    def apply_operator(self, operator_id: int | None) -> bool:
        """Apply a recorded operator (``None`` = a no-op "Nothing happens." step) without any text.

        Only the applicable operators' ids are enumerated (no TextWorld ``Action`` objects are built).
        Returns False when the operator is not applicable here (the caller reports a divergence).
        """
        if operator_id is None:
            return True
        ps = self._pe._pddl_state
        lib = ps.downward_lib
        count = lib.get_applicable_operators_count()
        operators = (self._fd.Operator * count)()
        lib.get_applicable_operators(operators)
        chosen = None
        for op in operators:
            if op.id == operator_id:
                chosen = op
                break
        if chosen is None:
            return False
        ps._operators = {chosen.id: chosen}
        ps.apply(_OperatorRef(chosen.id))
        self._pe._last_action = None
        self._pe._moves += 1
        self._fingerprint = None
        self._infos_stale = True
        return True

    def finish_step(self, command: str, operator_id: int | None) -> _GameState | None:
        """Apply a recorded operator and build the full text result (feedback + admissible), as TextWorld's
        ``PddlEnv.step`` would, without first deriving the previous state's command list.

        Returns None when the operator is not applicable (a divergence).
        """
        pe = self._pe
        pe.prev_state = pe.state
        new_state = self._gamestate_cls()
        new_state.last_command = command.strip()
        if operator_id is None:
            pe._last_action = None
            feedback = "Nothing happens."
        else:
            action = self._find_action(operator_id)
            if action is None:
                return None
            pe._pddl_state.apply(action)
            pe._last_action = action
            context = {
                "state": pe._pddl_state,
                "facts": list(pe._pddl_state.facts),
                "variables": {ph.name: pe._entity_infos[var.name] for ph, var in action.mapping.items()},
                "mapping": action.mapping,
                "entity_infos": pe._entity_infos,
            }
            feedback = pe._logic.grammar.derive(action.feedback_rule, context)
            pe._moves += 1
            self._fingerprint = None
        new_state.feedback = feedback
        new_state.raw = feedback
        pe.state = new_state
        pe._gather_infos()
        pe.state["score"] = 1 if pe.state["won"] else 0
        pe.state["done"] = pe.state["won"] or pe.state["lost"]
        self._infos_stale = False
        return self._current(str(feedback))

    def won(self) -> bool:
        """The goal holds in the current PDDL state."""
        return bool(self._pe._pddl_state.check_goal())

    def task_text(self) -> str:
        """The grammar's ``#task#`` text (a static rule in ALFWorld games: "Your task is to: ...")."""
        pe = self._pe
        context = {
            "state": pe._pddl_state,
            "facts": list(pe._pddl_state.facts),
            "variables": {},
            "mapping": {},
            "entity_infos": pe._entity_infos,
        }
        return str(pe._logic.grammar.derive("#task#", context))

    def plan(self) -> list[str]:
        """Fast Downward's expert plan from the *current* state, as agent commands (slow: seconds)."""
        with preserve_argv():
            return list(self._pe._pddl_state.replan(self._pe._entity_infos))

    def close(self) -> None:
        """Drop this engine's TextWorld objects. Idempotent.

        The private copy of ``libdownward.so`` stays mapped until the process exits, as with stock TextWorld
        (``dlclose`` while ctypes still holds its function pointers can crash the interpreter at exit).
        """
        if self.closed:
            return
        self.closed = True
        self._tw = None
        self._pe = None


class EnginePool:
    """Idle engines per game content key, reused through reset instead of being re-created.

    ``acquire`` returns an idle engine of the same game *content* (a file swapped on disk gets a new key, so
    a stale engine is never reused) or loads a new one; ``release`` keeps up to ``max_idle_per_game`` idle
    engines for each of the ``max_games`` most recently used games and closes the rest (an engine holds the
    game's PDDL state and a private copy of ``libdownward.so``: a few MB).
    """

    def __init__(self, max_idle_per_game: int = 4, max_games: int = 16) -> None:
        self.max_idle_per_game = max_idle_per_game
        self.max_games = max_games
        self._idle: OrderedDict[str, list[Engine]] = OrderedDict()
        self._lock = threading.Lock()
        self.created = 0
        self.reused = 0

    def acquire(self, game_file: str | Path) -> Engine:
        data = Path(game_file).read_bytes() if Path(game_file).is_file() else None
        if data is None:
            read_game_file(game_file)  # raises the clear "does not exist" error
            raise AssertionError("unreachable")
        key = game_key(data)
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                engine = idle.pop()
                self.reused += 1
                if Path(game_file) != engine.path:
                    engine.path = Path(game_file)
                return engine
        engine = Engine(game_file, data)
        self.created += 1
        return engine

    def release(self, engine: Engine) -> None:
        if engine.closed:
            return
        evicted: list[Engine] = []
        with self._lock:
            idle = self._idle.setdefault(engine.key, [])
            self._idle.move_to_end(engine.key)
            if len(idle) < self.max_idle_per_game:
                idle.append(engine)
            else:
                evicted.append(engine)
            while len(self._idle) > self.max_games:
                _, old = self._idle.popitem(last=False)
                evicted.extend(old)
        for e in evicted:
            e.close()

    def prewarm(self, game_file: str | Path, n: int) -> None:
        """Make sure ``n`` idle engines of this game are ready (loads the missing ones now)."""
        engines = [self.acquire(game_file) for _ in range(n)]
        for e in engines:
            self.release(e)

    def idle_count(self, game_file: str | Path | None = None) -> int:
        with self._lock:
            if game_file is None:
                return sum(len(v) for v in self._idle.values())
            return len(self._idle.get(game_key(Path(game_file).read_bytes()), []))

    def clear(self) -> None:
        """Close every idle engine."""
        with self._lock:
            engines = [e for v in self._idle.values() for e in v]
            self._idle.clear()
        for e in engines:
            e.close()


_POOL = EnginePool()


def get_pool() -> EnginePool:
    """The process-wide engine pool."""
    return _POOL
