"""ALFWorld as a :class:`~tempo_rl.envs.core.ReplayableEnv`.

Observations are ALFWorld's text after ``AlfredDemangler(shuffle=False)`` (entity names such as
``"cabinet 1"``), with the sorted admissible commands. Rules:

* actions are canonicalised (stripped, lower-cased, inner whitespace collapsed) before they reach the game; an
  inadmissible action is still sent and gets the game's own feedback (``"Nothing happens."``);
* ``won`` -> reward 1.0 and ``terminated``; reaching ``max_steps`` without winning -> ``truncated`` (a limit
  outside the MDP, so TEMPO bootstraps it); every step, admissible or not, counts towards ``max_steps``;
* the task sentence (the text after ``"Your task is to: "``) is in ``observation.info["task"]``;
* ``state_fingerprint()`` is the SHA-256 of the PDDL fact set, so replay verifies the hidden state per step;
* ``replay(actions, ...)`` restores a state fast (recorded operators without text, fact digest checked every
  step, text and admissible list checked at the end); see :mod:`tempo_rl.envs.alfworld.fast`.

The walkthrough (critic-only) comes from the game file, mapped from raw PDDL ids to agent-visible names, or
from a verified, disk-cached planner run; it is ``None`` rather than unusable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from tempo_rl.envs.alfworld.data import TRAJ_FILE, AlfworldDataError, read_game_file
from tempo_rl.envs.alfworld.fast import Engine, game_key, get_pool
from tempo_rl.envs.alfworld.text import canonicalize_action, extract_task
from tempo_rl.envs.alfworld.walkthrough import (
    default_cache_dir,
    format_walkthrough,
    has_raw_ids,
    load_cached_walkthrough,
    map_walkthrough,
)
from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult
from tempo_rl.envs.snapshot import observation_digest

__all__ = ["AlfworldEnv", "ReplayMismatch", "canonicalize_action", "extract_task"]

WalkthroughMode = Literal["auto", "file", "planner", "none"]
#: Process-wide cache: game content key (SHA-256 of the game file's bytes) -> digest of that game's reset
#: observation. Written by :meth:`AlfworldEnv.reset` (every full reset of any env in the process); read by
#: :meth:`AlfworldEnv.replay`, which checks a snapshot's step-0 digest against it and so skips a full text reset
#: for a game this process has already reset. Process-wide because the reset observation is a pure function of
#: the game's content: every env of the same game, in any thread, computes the same entry, so sharing it is what
#: makes a worker pool's second replay of a game cheap. It only grows, by one short string per distinct game
#: played. Thread-safety: each access is a single dict get or set (atomic under the GIL), and concurrent writers
#: of one key write the same value, so no lock is needed.
_RESET_DIGESTS: dict[str, str] = {}


class ReplayMismatch(RuntimeError):
    """A replayed step did not reproduce the recorded digest (raised only when no richer error type exists).

    Attributes:
        step: the observation index that failed (0 = reset).
        kind: ``"observation"`` or ``"state"``.
    """

    def __init__(self, message: str, step: int, kind: str) -> None:
        super().__init__(message)
        self.step = step
        self.kind = kind


def _divergence(message: str, step: int, kind: str, expected: str | None, got: str | None) -> Exception:
    """Build the envs layer's ``ReplayDivergenceError`` when it exists, else :class:`ReplayMismatch`."""
    try:
        from tempo_rl.envs.restore import ReplayDivergenceError
    except ImportError:  # pragma: no cover - the generic restore module is part of tempo_rl.envs
        return ReplayMismatch(message, step, kind)
    return ReplayDivergenceError(
        step=step,
        action=None,
        expected=expected or "(see detail)",
        actual=got or "(see detail)",
        kind=kind,
        detail=message,
    )


class AlfworldEnv(ReplayableEnv):
    """One ALFWorld game (a ``game.tw-pddl`` file) on the ReplayableEnv contract.

    Args:
        game_file: path of the ``game.tw-pddl``.
        max_steps: the episode's step limit T (>= 1); reaching it without winning is ``truncated``.
        walkthrough: where the critic's walkthrough comes from: ``"auto"`` (the game file's, id-mapped, else a
            cached planner walkthrough, else None), ``"file"`` (the game file's only), ``"planner"`` (as auto,
            but run and cache the planner when nothing else is available; seconds per game, once), ``"none"``.
        cache_dir: where planner walkthroughs are cached (default :func:`default_cache_dir`).
    """

    #: replay applies the recorded PDDL operators without generating text (see :mod:`.branching`)
    branch_restorer = "tempo_rl.envs.alfworld.branching:restore_branches"

    def __init__(
        self,
        game_file: str | Path,
        *,
        max_steps: int = 50,
        walkthrough: WalkthroughMode = "auto",
        cache_dir: str | Path | None = None,
    ) -> None:
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        if walkthrough not in ("auto", "file", "planner", "none"):
            raise ValueError(f"walkthrough must be one of auto/file/planner/none, got {walkthrough!r}")
        self.game_file = Path(game_file)
        if not self.game_file.is_file():
            raise AlfworldDataError(
                f"ALFWorld game file {str(self.game_file)!r} does not exist; pass the path of a game.tw-pddl"
            )
        self.max_steps = max_steps
        self.walkthrough_mode: WalkthroughMode = walkthrough
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._engine: Engine | None = get_pool().acquire(self.game_file)
        self._walkthrough: tuple[str, ...] | None = None
        self._walkthrough_resolved = False
        self._steps = 0
        self._done = True
        self._task = ""
        self._admissible: tuple[str, ...] = ()

    # -- helpers --------------------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("this AlfworldEnv is closed; create a new one")
        return self._engine

    @property
    def game_key(self) -> str:
        """SHA-256 prefix of the game file's content (what the pool and the operator memo are keyed by)."""
        return self.engine.key

    @property
    def steps_taken(self) -> int:
        """Steps taken since the last reset (admissible or not)."""
        return self._steps

    @property
    def done(self) -> bool:
        """True when the episode ended (won or step limit) or was never started."""
        return self._done

    def _observation(self, text: str, admissible: tuple[str, ...]) -> Observation:
        return Observation(
            text=text,
            admissible_actions=admissible,
            info={"task": self._task, "step": self._steps, "game_file": str(self.game_file)},
        )

    # -- contract -------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Observation:
        """Start the episode (ALFWorld games are deterministic: ``seed`` is accepted and has no effect)."""
        gs = self.engine.reset()
        self._task = extract_task(gs.text)
        self._steps = 0
        self._done = False
        self._admissible = gs.admissible
        observation = self._observation(gs.text, gs.admissible)
        _RESET_DIGESTS[self.engine.key] = observation_digest(observation)
        return observation

    def step(self, action: str) -> StepResult:
        """Apply one text action (canonicalised); inadmissible actions get the game's own feedback."""
        if self._done:
            raise RuntimeError("the episode is over (won or step limit reached) or not started; call reset()")
        command = canonicalize_action(action)
        admissible = command in self._admissible
        gs = self.engine.step(command)
        self._steps += 1
        return self._result(gs.text, gs.admissible, gs.won, admissible, command)

    def _result(
        self, text: str, admissible_now: tuple[str, ...], won: bool, was_admissible: bool, command: str
    ) -> StepResult:
        self._admissible = admissible_now
        truncated = not won and self._steps >= self.max_steps
        self._done = won or truncated
        return StepResult(
            observation=self._observation(text, admissible_now),
            reward=1.0 if won else 0.0,
            terminated=won,
            truncated=truncated,
            info={"won": won, "admissible": was_admissible, "action": command},
        )

    def state_fingerprint(self) -> str | None:
        """SHA-256 prefix of the sorted PDDL fact set: the game's exact hidden state."""
        return self.engine.fingerprint()

    def replay(
        self,
        actions: Sequence[str],
        observation_digests: Sequence[str] | None = None,
        state_digests: Sequence[str | None] | None = None,
    ) -> Observation:
        """Reset and replay ``actions`` fast, verifying as it goes; returns the final observation.

        Verification: the state fingerprint after every step against ``state_digests[i]`` (when given and not
        None); the observation digest (text + admissible list) of the reset (against the digest of a full
        reset of the same game content in this process, doing one if there is none yet), of the final step,
        and of every step that had to be replayed with text (operator-memo miss), against
        ``observation_digests``.
        Intermediate texts are not regenerated: they are a deterministic function of the verified fact set and
        the applied operator.

        Raises:
            ReplayDivergenceError (from :mod:`tempo_rl.envs.restore`, else :class:`ReplayMismatch`): a digest
                differs or a recorded operator is not applicable; the message names the step.
            ValueError: digest sequences of the wrong length.
        """
        actions = [canonicalize_action(a) for a in actions]
        n = len(actions)
        for name, seq in (("observation_digests", observation_digests), ("state_digests", state_digests)):
            if seq is not None and len(seq) != n + 1:
                raise ValueError(f"{name} must have len(actions) + 1 = {n + 1} entries, got {len(seq)}")
        engine = self.engine

        def check_state(i: int) -> None:
            if state_digests is None or state_digests[i] is None:
                return
            got = engine.fingerprint()
            if got != state_digests[i]:
                raise _divergence(
                    f"ALFWorld replay of {str(self.game_file)!r} diverged at step {i}: "
                    f"PDDL fact digest {got} "
                    f"!= recorded {state_digests[i]} (game file changed, or non-deterministic env?)",
                    i,
                    "state",
                    state_digests[i],
                    got,
                )

        def check_obs(i: int, obs: Observation) -> None:
            if observation_digests is None:
                return
            got = observation_digest(obs)
            if got != observation_digests[i]:
                raise _divergence(
                    f"ALFWorld replay of {str(self.game_file)!r} diverged at step {i}: observation digest "
                    f"{got} != recorded {observation_digests[i]}; observation was: {obs.text[:200]!r}",
                    i,
                    "observation",
                    observation_digests[i],
                    got,
                )

        if n == 0:
            obs = self.reset()
            check_state(0)
            check_obs(0, obs)
            return obs
        # The reset observation is deterministic per game content: verify it against the digest this process
        # saw at a full reset of the same content, and do a full (text) reset only when there is none yet.
        known_reset = _RESET_DIGESTS.get(engine.key)
        if observation_digests is not None and known_reset is None:
            check_obs(0, self.reset())
        else:
            if observation_digests is not None and known_reset != observation_digests[0]:
                raise _divergence(
                    f"ALFWorld replay of {str(self.game_file)!r} diverged at step 0: the reset observation "
                    f"digest of this game is {known_reset}, the snapshot recorded {observation_digests[0]}",
                    0,
                    "observation",
                    observation_digests[0],
                    known_reset,
                )
            engine.reset_silent()
            self._task = ""
        check_state(0)
        self._steps = 0
        self._done = False
        last_text: str | None = None

        def inapplicable(i: int, command: str) -> Exception:
            return _divergence(
                f"ALFWorld replay of {str(self.game_file)!r} diverged at step {i}: the recorded operator of "
                f"{command!r} is not applicable",
                i,
                "state",
                None,
                None,
            )

        for i, command in enumerate(actions, start=1):
            found, op = engine.lookup(command)
            if i < n and found:
                if not engine.apply_operator(op):
                    raise inapplicable(i, command)
                self._steps = i
                check_state(i)
                continue
            if found:
                gs = engine.finish_step(command, op)
                if gs is None:
                    raise inapplicable(i, command)
            else:
                gs = engine.step(command)
            self._steps = i
            self._admissible = gs.admissible
            last_text = gs.text
            check_state(i)
            check_obs(i, self._observation(gs.text, gs.admissible))
        if not self._task:
            self._task = self._task_from_file()
        assert last_text is not None
        won = engine.won()
        truncated = not won and self._steps >= self.max_steps
        self._done = won or truncated
        return self._observation(last_text, self._admissible)

    def _task_from_file(self) -> str:
        return extract_task(self.engine.task_text())

    # -- privileged information -----------------------------------------------------------------------------
    def walkthrough(self) -> tuple[str, ...] | None:
        """The expert commands from reset, in agent-visible names, or None when no usable one exists."""
        if not self._walkthrough_resolved:
            self._walkthrough = self._resolve_walkthrough()
            self._walkthrough_resolved = True
        return self._walkthrough

    def _resolve_walkthrough(self) -> tuple[str, ...] | None:
        if self.walkthrough_mode == "none":
            return None
        engine = self.engine
        if engine.file_walkthrough:
            mapped = map_walkthrough(engine.file_walkthrough, engine.names)
            if not has_raw_ids(mapped):
                return mapped
        if self.walkthrough_mode == "file":
            return None
        cached = load_cached_walkthrough(self.cache_dir, engine.key)
        if cached is not None or self.walkthrough_mode != "planner":
            return cached
        return compute_planner_walkthrough(self.game_file, cache_dir=self.cache_dir)

    #: the files of a games folder (``env.games_dir``) that are games
    game_files = "**/game.tw-pddl"

    #: What to do about games without privileged info (shown in the training-start warning).
    privileged_info_hint = (
        "ALFWorld's train-split games carry no walkthrough. Precompute verified planner walkthroughs once with "
        "`tempo-rl data alfworld --plan <games folder>` (cached by content hash where env.kwargs.cache_dir "
        "points, default $TEMPO_RL_CACHE/alfworld or ~/.cache/tempo_rl/alfworld), or set "
        "env.kwargs.walkthrough = 'planner' to plan each game on first use (seconds per game, in training)"
    )

    @staticmethod
    def privileged_info_available(
        game_file: str | Path,
        *,
        walkthrough: WalkthroughMode = "auto",
        cache_dir: str | Path | None = None,
        **_other: Any,
    ) -> bool:
        """Whether :meth:`privileged_info` will give the critic a walkthrough, read from the file and the cache
        alone (no game is loaded, so it is cheap enough for thousands of games).

        True when the file has a walkthrough (raw-id ones are mapped at load), when a planner walkthrough of
        this content is cached, or in ``"planner"`` mode (it plans on first use); False in ``"none"`` mode.
        Other constructor arguments (``max_steps``, ...) are accepted and ignored.
        """
        if walkthrough == "none":
            return False
        path = Path(game_file)
        data = read_game_file(path)
        if data.get("walkthrough"):
            return True
        if walkthrough == "file":
            return False
        if walkthrough == "planner":
            return True
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        return load_cached_walkthrough(cache, game_key(path.read_bytes())) is not None

    def goal_params(self) -> Mapping[str, Any]:
        """``pddl_params`` of the sibling ``traj_data.json`` (goal object/receptacle targets), or {}."""
        try:
            traj = json.loads((self.game_file.parent / TRAJ_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}
        params = traj.get("pddl_params") if isinstance(traj, dict) else None
        return dict(params) if isinstance(params, dict) else {}

    def privileged_info(self) -> str | None:
        """Critic-only text: the expert walkthrough (never shown to the actor), or None when there is none."""
        commands = self.walkthrough()
        if not commands:
            return None
        return "Expert walkthrough from the initial state:\n" + format_walkthrough(commands)

    def oracle_value(self, steps_left: int) -> float | None:
        """1 when Fast Downward's plan from the current state fits in ``min(steps_left, max_steps - steps)``
        more steps, else 0; 0 once the episode is over. Reward is 1 only on winning, so this is ``V*`` when the
        planner's plan is a shortest one (else a lower bound). Slow: one planner call (seconds) per state; the
        PDDL state is checked unchanged afterwards."""
        from tempo_rl.envs.core import check_steps_left

        check_steps_left(steps_left)
        if self._done:
            return 0.0
        budget = min(steps_left, self.max_steps - self._steps)
        before = self.state_fingerprint()
        plan = self.engine.plan()
        if self.state_fingerprint() != before:  # pragma: no cover - the planner only reads the state
            raise RuntimeError("the ALFWorld planner changed the game state; oracle_value must not")
        return 1.0 if plan and len(plan) <= budget else 0.0

    def close(self) -> None:
        """Hand the engine back to the warm pool (no process is ever started). Idempotent."""
        if self._engine is not None:
            engine, self._engine = self._engine, None
            get_pool().release(engine)


def compute_planner_walkthrough(
    game_file: str | Path, *, cache_dir: str | Path | None = None
) -> tuple[str, ...] | None:
    """Plan with Fast Downward from the reset state, keep the plan only if replaying it wins, cache it.

    Returns None (walkthrough absent) when the planner finds no plan or the plan does not win. Costs seconds
    per game, once: later calls read the cache (keyed by the game's content hash). For a whole folder, in
    parallel and with a per-game time limit, use ``tempo-rl data alfworld --plan DIR``
    (:func:`~tempo_rl.envs.alfworld.planning.plan_walkthroughs`).
    """
    from tempo_rl.envs.alfworld.planning import plan_with_engine

    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    engine = get_pool().acquire(game_file)
    try:
        return plan_with_engine(engine, cache)[1]
    finally:
        get_pool().release(engine)
