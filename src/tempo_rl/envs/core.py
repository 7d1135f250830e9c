"""The environment contract: what an adapter implements and what every step returns.

An adapter author subclasses :class:`ReplayableEnv`.

**Implement in ALL subclasses:**

* ``reset(seed) -> Observation``: start a new episode. The same ``seed`` (and constructor arguments) must
  always give the same initial observation.
* ``step(action) -> StepResult``: apply one text action. Given the same seed and the same action history the
  env must return the same observations: that determinism is what lets tempo-rl restore any intermediate
  state by replaying its action history (and verify every replayed observation). An action the env does not
  accept is **not** an exception: return the env's own feedback (e.g. ``"Nothing happens."``) as the
  observation, with whatever reward and termination the env's rules give.

**Override in SOME subclasses:**

* ``privileged_info() -> str | None``: critic-only text about the episode (an expert walkthrough, hidden
  rules, game source), read once at reset. It is never put in an actor prompt.
* ``Observation.privileged_state``: critic-only text about the state an observation shows (what the env's
  hidden rule makes of it now: knights names the pieces that conflict). The critic reads it at that state,
  after the interaction; it is never put in an actor prompt. Give it when the value turns on a relation the
  observation hides (measured on knights, ``docs/results.md``).
* ``fork() -> ReplayableEnv``: an exact, independent native copy of the live state (``supports_fork`` must
  then return True). Restoring through ``fork`` costs O(1) in the episode length instead of O(depth).
* ``walkthrough() -> tuple[str, ...] | None``: an expert action sequence from the reset state (warm starts).
* ``expert_action() -> str | None``: the expert's next action from the *current* state, wherever earlier
  actions led (``None``: unknown, or the episode can no longer be won). With it, a warm start's noisy
  demonstrations show the expert recovering from off-expert actions (``warmstart.expert = "recovering"``)
  instead of stopping where the reset-state walkthrough no longer applies.
* ``state_fingerprint() -> str | None``: a cheap exact digest of the hidden state (e.g. the PDDL fact set).
  When available, replay verifies it at every step in addition to the observation text.
* ``oracle_value(steps_left) -> float | None``: the exact value of the current state under an optimal policy
  that may take at most ``steps_left`` more steps (the env's own step limit still applies), i.e.
  ``V*(s) = max_pi E[sum of the remaining rewards]``; ``None`` (the default) means the env does not know it.
  It powers :class:`~tempo_rl.critic.OracleCritic` ("does my setup learn with a perfect critic?"). It must
  not change the state, and a terminal state is worth 0 (its reward was paid on the way in).
* ``close()``: release processes, files and sockets.

**What the trainer relies on besides the two methods:**

* Constructor keyword arguments are JSON values (str, int, float, bool, None, lists and dicts of them): they
  are stored in every :class:`~tempo_rl.envs.Snapshot` and rebuild the env on restore.
* Construction, ``reset`` and ``step`` of *different* instances may run concurrently in worker threads (the
  trainer restores N branches at once); one instance is only ever called from one thread at a time. Shared
  module-level state must therefore be read-only or locked.
* ``Observation.info`` keys the trainer reads (all optional): ``"task"`` (str, the task sentence shown to the
  critic; see :func:`task_of`), ``"task_type"`` (str, groups evaluation results), and in ``StepResult.info``
  ``"won"`` (bool; without it, success is ``terminated and reward > 0``).

Gymnasium semantics for the two end flags (they decide TEMPO's bootstrap):

* ``terminated``: the episode reached a terminal state of the MDP (won, lost). The value of what follows is
  0 by definition; TEMPO never bootstraps it.
* ``truncated``: the episode was cut for a reason outside the MDP (a step limit). The trainer values the
  future at 0 (the task's step budget is spent).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

_T = TypeVar("_T")

__all__ = ["Observation", "ReplayableEnv", "StepResult", "check_steps_left", "require_reset", "task_of"]


@dataclass(frozen=True)
class Observation:
    """What the agent sees after ``reset`` or ``step``.

    Attributes:
        text: the observation text shown to the actor. Never contains privileged information.
        admissible_actions: the actions the env accepts in this state, when the env knows them (``None`` when
            it does not). Order is meaningful (it is shown to the actor) and must be deterministic.
        info: free-form diagnostics (JSON-serialisable values preferred). Not shown to the actor unless an
            adapter's prompt builder chooses to. The key ``"task"`` by convention carries the task sentence.
        privileged_state: critic-only text about this state (None: nothing to add). The trainer keeps it with
            the state and shows it to the critic there, after the interaction; never shown to the actor, and
            not part of the replay check (the text and the admissible actions are).
    """

    text: str
    admissible_actions: tuple[str, ...] | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    privileged_state: str | None = None


def check_steps_left(steps_left: int) -> int:
    """``steps_left`` as given when it is an int >= 0 (the argument of :meth:`ReplayableEnv.oracle_value`).

    Raises:
        ValueError: it is not an int, or is negative.
    """
    if isinstance(steps_left, bool) or not isinstance(steps_left, int) or steps_left < 0:
        raise ValueError(
            f"oracle_value(steps_left) needs an int >= 0 (steps before the limit T), got {steps_left!r}"
        )
    return steps_left


def require_reset(value: _T | None) -> _T:
    """``value``, a piece of an env's episode state (its current frame, last observation, game), which is None
    until the first ``reset``.

    Raises:
        RuntimeError: ``value`` is None: the env has not been reset yet.
    """
    if value is None:
        raise RuntimeError("the env has not been reset yet; call reset(seed) first")
    return value


def task_of(observation: Observation) -> str:
    """The task sentence an observation carries in ``info["task"]`` (``""`` when it carries none)."""
    return str(observation.info.get("task", "")) if observation.info else ""


@dataclass(frozen=True)
class StepResult:
    """The outcome of one ``step``.

    Attributes:
        observation: the next observation.
        reward: the scalar reward of this transition (environment units; TEMPO's R_max bounds the sum).
        terminated: the MDP reached a terminal state (no bootstrap).
        truncated: the episode was cut by a limit outside the MDP (bootstrap with V_hat).
        info: free-form diagnostics, e.g. ``{"won": True}`` or ``{"admissible": False}``.
    """

    observation: Observation
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        """True when the episode is over for any reason (``terminated or truncated``)."""
        return self.terminated or self.truncated


class ReplayableEnv(abc.ABC):
    """A deterministic text environment that can be restored by replaying its action history.

    Subclasses implement :meth:`reset` and :meth:`step`; everything else has a working default.
    See the module docstring for the full contract.

    Attributes:
        branch_restorer: optional ``"module:attribute"`` path of an adapter's own fast restorer
            (``restorer(snapshot, n, *, verify) -> list[RecordedEnv]``, see
            :func:`tempo_rl.envs.restore.register_restorer`), used instead of reset + generic replay.
    """

    branch_restorer: ClassVar[str | None] = None

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> Observation:
        """Start a new episode and return its first observation.

        Args:
            seed: selects the instance for seeded envs. ``None`` means the env's default instance; it must
                still be deterministic.
        """

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one text action. Rejected actions return the env's feedback, never raise."""

    def privileged_info(self) -> str | None:
        """Critic-only information about the current episode (walkthrough, hidden rules, source), or None."""
        return None

    @property
    def supports_fork(self) -> bool:
        """True when :meth:`fork` returns an exact independent copy of the live state."""
        return type(self).fork is not ReplayableEnv.fork

    def fork(self) -> ReplayableEnv:
        """Return an exact, independent copy of the live state. Optional; see :attr:`supports_fork`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement fork(); restore replays instead")

    def walkthrough(self) -> tuple[str, ...] | None:
        """An expert action sequence that solves the episode from its reset state, or None when unknown.

        Used for supervised warm starts and as part of the critic's privileged information; never shown to
        the actor.
        """
        return None

    def expert_action(self) -> str | None:
        """The expert's next action from the current state, or None when unknown or when the episode can no
        longer be won. Must not change the state. Optional: the default returns None.

        Used by warm starts with ``warmstart.expert = "recovering"``: after a noisy off-expert step the
        demonstration goes on with the expert's recovery from where it is (DART-style noise injection), so the
        actor also learns to act in the states its own mistakes lead to.
        """
        return None

    def state_fingerprint(self) -> str | None:
        """A cheap exact digest of the hidden state, or None when the env offers none."""
        return None

    def oracle_value(self, steps_left: int) -> float | None:
        """The exact optimal value of the current state within ``steps_left`` more steps, or None when unknown.

        ``V*(s, n) = max over policies of E[r_{t+1} + ... + r_{t+m}]``, where ``m <= n`` and the episode's own
        limits (the env's step limit, termination) also end the sum. Environment reward units; 0 for a
        terminal state. Must not change the live state. Optional: the default returns None.

        Args:
            steps_left: n >= 0, the steps the trainer's episode limit leaves (``T - round_index``).
        """
        check_steps_left(steps_left)
        return None

    def close(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release resources (processes, files). Idempotent."""

    def __enter__(self) -> ReplayableEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
