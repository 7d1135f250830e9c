"""The trainer's contract on one screen: stored states, start states, and what a trainer drives.

Data flows one way through a TD update::

    StateStore --sample--> StoredState --restore--> StartState (N live envs)
        --run_branches--> BranchResult[S][N] --critic--> endpoint values V_hat[S, N]
        --td_batch--> R, G, A [S, N] --datums--> Datum[D] --train_step--> new policy version
        --StoredState.child--> StateStore

Axis names follow the signals: ``S`` start states, ``N`` branches per start, ``K`` critic samples per state,
``D`` Datums of one update.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tempo_rl.backends.types import SamplingClient, TrainingClient
from tempo_rl.critic.base import Critic
from tempo_rl.envs.snapshot import EnvSpec, Snapshot
from tempo_rl.rollout.renderer import ChatRenderer, PromptState, PromptWindow
from tempo_rl.rollout.tool_call import ToolCallParser

__all__ = [
    "EndpointValues",
    "EnvPool",
    "PrefixSpan",
    "StartState",
    "StateStoreLike",
    "StoredState",
    "TrainerComponents",
    "Turn",
    "make_state_id",
]

#: One interaction round after the initial observation: (action text, observation text).
Turn = tuple[str, str]

_MAX_TOKEN = 2**31 - 1


@dataclass(frozen=True)
class PrefixSpan:
    """A run of consecutive assistant tokens of a stored prefix, sampled by one policy version.

    Attributes:
        start: first token position (0-based, into ``StoredState.token_prefix``).
        end: one past the last position (half-open, ``end > start``).
        version: the policy version that sampled these tokens.
        logprob_sum: the sampler's summed logprob (nats) of ``token_prefix[start:end]``.
    """

    start: int
    end: int
    version: int
    logprob_sum: float

    def __post_init__(self) -> None:
        if (
            self.start < 0
            or self.end <= self.start
            or self.version < 0
            or not math.isfinite(self.logprob_sum)
        ):
            raise ValueError(
                f"invalid prefix span {self.to_json()!r}: need 0 <= start < end, version >= 0, finite sum"
            )

    def to_json(self) -> list[float | int]:
        """``[start, end, version, logprob_sum]``."""
        return [self.start, self.end, self.version, self.logprob_sum]

    @classmethod
    def from_json(cls, row: Sequence[Any]) -> PrefixSpan:
        """Inverse of :meth:`to_json`; raises ``ValueError`` on a malformed row."""
        if len(row) != 4:
            raise ValueError(f"a prefix span is [start, end, version, logprob_sum]; got {row!r}")
        return cls(int(row[0]), int(row[1]), int(row[2]), float(row[3]))


def make_state_id(snapshot: Snapshot, token_prefix: Sequence[int]) -> str:
    """A content id: BLAKE2b-96 (hex) over the snapshot id and the token prefix.

    Two states with the same env state but different prompts (different sampled reasoning) get different ids.
    """
    h = hashlib.blake2b(snapshot.id.encode(), digest_size=12)
    h.update(np.asarray(token_prefix, dtype="<i8").tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class StoredState:
    """A state the trainer can restart from: the env state (a verified-restore :class:`Snapshot`) and the exact
    actor prompt that led there.

    Build one with :meth:`at_reset` (a fresh episode: empty prompt) or :meth:`child` (an endpoint of a branch
    from a parent state).

    Attributes:
        id: a unique id (see :func:`make_state_id`).
        snapshot: how to rebuild and verify the env state (spec, seed, action history, digests, texts).
        game_id: the game / task instance this state belongs to (for the store's per-game cap).
        task: the task sentence (shown to the critic).
        token_prefix: the exact actor prompt tokens to continue from (sampled tokens are never re-tokenized);
            empty for an episode start, whose opening prompt is rendered from the reset observation.
        prompt: the renderer window of ``token_prefix`` (None exactly when the prefix is empty).
        spans: the assistant-token spans of ``token_prefix`` with the policy version that sampled each (the
            prefix importance correction's bookkeeping); ``()`` for an empty prefix, None when unknown.
        policy_version: the policy version that produced the newest part of the prefix.
        macro_index: how many macro-steps of H rounds led here (0 = an episode start).
        parent_id: the state this one was branched from, if any.
        privileged_info: critic-only text for this episode (never shown to the actor).
        privileged_state: critic-only text about this state (the env's
            :attr:`~tempo_rl.envs.Observation.privileged_state` here); not inherited by children.
    """

    id: str
    snapshot: Snapshot
    game_id: str
    task: str
    token_prefix: tuple[int, ...]
    policy_version: int
    macro_index: int
    prompt: PromptWindow | None = None
    spans: tuple[PrefixSpan, ...] | None = ()
    parent_id: str | None = None
    privileged_info: str | None = None
    privileged_state: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError("StoredState.id must be a non-empty str (see make_state_id)")
        if not isinstance(self.snapshot, Snapshot):
            raise TypeError(f"StoredState.snapshot must be a Snapshot, got {type(self.snapshot).__name__}")
        object.__setattr__(self, "token_prefix", tuple(int(t) for t in self.token_prefix))
        if self.policy_version < 0 or self.macro_index < 0:
            raise ValueError(
                f"StoredState.policy_version and .macro_index must be >= 0, "
                f"got {self.policy_version} and {self.macro_index}"
            )
        if any(t < 0 or t > _MAX_TOKEN for t in self.token_prefix):
            raise ValueError(f"StoredState.token_prefix holds ids outside [0, {_MAX_TOKEN}]")
        if self.token_prefix and self.prompt is None:
            raise ValueError(
                f"stored state {self.id} has a token prefix but no prompt window; build it with "
                "StoredState.child (the renderer needs the window to extend the prefix)"
            )
        if self.snapshot.round_index and self.snapshot.observation_texts is None:
            raise ValueError(
                f"stored state {self.id}: its snapshot carries no observation texts; take it with "
                "env.snapshot(include_texts=True) (the critic's history is read from them)"
            )
        if self.spans:
            for a, b in itertools.pairwise(self.spans):
                if b.start < a.end:
                    raise ValueError(f"state {self.id}: prefix spans overlap or are unsorted ({a} then {b})")
            if self.spans[-1].end > len(self.token_prefix):
                raise ValueError(
                    f"state {self.id}: prefix span {self.spans[-1]} ends past the prefix length "
                    f"{len(self.token_prefix)}"
                )

    @property
    def initial_observation(self) -> str:
        """The reset observation's text."""
        texts = self.snapshot.observation_texts
        return texts[0] if texts is not None else self.snapshot.last_observation

    @property
    def history(self) -> tuple[Turn, ...]:
        """The ``(action, observation)`` turns since reset, read from the snapshot."""
        texts = self.snapshot.observation_texts or ()
        return tuple(zip(self.snapshot.actions, texts[1:]))

    @classmethod
    def at_reset(
        cls,
        snapshot: Snapshot,
        *,
        game_id: str,
        task: str,
        policy_version: int,
        privileged_info: str | None = None,
        privileged_state: str | None = None,
    ) -> StoredState:
        """An episode start: the reset snapshot, an empty prompt (rendered from the reset observation)."""
        return cls(
            id=snapshot.id,
            snapshot=snapshot,
            game_id=game_id,
            task=task,
            token_prefix=(),
            policy_version=policy_version,
            macro_index=0,
            privileged_info=privileged_info,
            privileged_state=privileged_state,
        )

    def child(
        self,
        snapshot: Snapshot,
        *,
        token_prefix: Sequence[int],
        prompt: PromptWindow,
        spans: Sequence[PrefixSpan],
        policy_version: int,
        macro_steps: int,
        privileged_state: str | None = None,
    ) -> StoredState:
        """A state reached from this one by ``macro_steps`` more macro-steps (same game, task and privileged
        info; this state as its parent); ``privileged_state`` is the new state's own."""
        return StoredState(
            id=make_state_id(snapshot, token_prefix),
            snapshot=snapshot,
            game_id=self.game_id,
            task=self.task,
            token_prefix=tuple(token_prefix),
            policy_version=policy_version,
            macro_index=self.macro_index + macro_steps,
            prompt=prompt,
            spans=tuple(spans),
            parent_id=self.id,
            privileged_info=self.privileged_info,
            privileged_state=privileged_state,
        )

    def prompt_state(self) -> PromptState:
        """The renderer state of :attr:`token_prefix` (raises for an episode start, which has no prompt yet)."""
        if self.prompt is None:
            raise ValueError(f"stored state {self.id} is an episode start: render its opening prompt instead")
        return self.prompt.prompt_state(self.token_prefix)


@dataclass
class StartState:
    """A start of N branches: a stored state or a fresh game, with its N live branch envs."""

    state: StoredState
    envs: list[Any]
    fresh: bool


@dataclass(frozen=True)
class EndpointValues:
    """What the TD targets need of the played branches (``[S, N]`` arrays).

    Attributes:
        segment_rewards: r_n, the reward of each branch's segment.
        values: V_hat_n at each queried endpoint (0 elsewhere; an unparsed endpoint is dropped or substituted).
        bootstrap: the endpoint is valued (a macro boundary); False for terminal, step-limit, token-budget and
            failed branches.
        mask: the branch counts (no env error, and its endpoint value is known or substituted).
        queried: the ``(s, n)`` of every endpoint the critic valued, in query order.
        unparsed: queried endpoints none of whose E samples parsed.
    """

    segment_rewards: np.ndarray
    values: np.ndarray
    bootstrap: np.ndarray
    mask: np.ndarray
    queried: list[tuple[int, int]]
    unparsed: int


@runtime_checkable
class StateStoreLike(Protocol):
    """What the trainer needs of a state store (:class:`~tempo_rl.training.store.StateStore` is one)."""

    def __len__(self) -> int: ...

    def add(self, state: StoredState) -> bool:
        """Add a state; False when it was not added (a duplicate id)."""
        ...

    def sample(self, n: int, rng: np.random.Generator) -> list[StoredState]:
        """``min(n, len(self))`` distinct states."""
        ...

    def quarantine(self, state: str | StoredState, reason: str, diff: str | None = None) -> None:
        """Move a state out of the sampling pool for good."""
        ...

    def evict_stale(self, current_version: int) -> int:
        """Drop states too old for ``current_version``; returns how many."""
        ...

    def stats(self, current_version: int | None = None) -> Mapping[str, float]:
        """``size``, ``mean_age``, ``games``, ``bytes`` (what the store knows of them)."""
        ...

    def close(self) -> None:
        """Release the store's files."""
        ...


@runtime_checkable
class EnvPool(Protocol):
    """Runs env calls off the event loop with a per-call time-out
    (:class:`~tempo_rl.envs.workers.EnvWorkerPool` is one).

    ``await pool.call(env, "step", action)`` returns the method's result, or raises ``EnvWorkerError`` on a
    crash or time-out (the caller drops that branch)."""

    async def call(self, env_handle: Any, method: str, *args: Any, **kwargs: Any) -> Any: ...

    def close(self) -> None:
        """Stop the workers."""
        ...


@dataclass
class TrainerComponents:
    """What a trainer drives (built by :func:`tempo_rl.training.run.build_trainer`).

    Attributes:
        training_client: forward_backward / optim_step / save_state.
        sampler: the sampling client of the current policy version.
        chat: the actor's chat renderer.
        critic: the critic (usually :class:`~tempo_rl.critic.GenerativeCritic`).
        store: the state store.
        pool: the env worker pool.
        parser: the single-tool-call parser.
        make_env: ``(spec, seed) -> live env`` at the reset state (a ``RecordedEnv``).
        restore_branches: ``(snapshot, n) -> n live envs`` at the snapshot's state (verified).
        critic_training_client: with ``tempo.critic_weights = "own"``, the critic's own weights (its Datums
            train them, and only them); None when actor and critic share ``training_client``.
        critic_sampler: the sampling client of the critic's current weights (None: ``sampler``).
    """

    training_client: TrainingClient
    sampler: SamplingClient
    chat: ChatRenderer
    critic: Critic
    store: StateStoreLike
    pool: EnvPool
    parser: ToolCallParser
    make_env: Callable[[EnvSpec, int], Any]
    restore_branches: Callable[[Snapshot, int], list[Any]]
    critic_training_client: TrainingClient | None = None
    critic_sampler: SamplingClient | None = None
