"""The critic contract: K value estimates of a state, as numbers plus what is needed to train on them.

A critic answers one :class:`CriticQuery` (a state described as text: task, initial observation, the
``(action, observation)`` turns since, optional privileged information and remaining step budget; and, when
the caller has it, the state's :class:`~tempo_rl.envs.Snapshot`, for critics that restore the state, and the
actor's own context there, for critics that play the policy on from it) with
:class:`CriticEstimates`: ``K`` numbers ``V_1..V_K`` in ``[0, R_max]`` (NaN where a sample could not be read)
and, for each sample, the exact prompt and sampled tokens so that the trainer can build critic Datums.

How the trainer uses them (see :mod:`tempo_rl.signals`):

* start state: the K samples are trained with rewards ``-|V_k - G| / R_max`` (or Brier) against the TD
  target G;
* truncated endpoint: ``V_hat = mean(parsed V_e)`` over E samples (:func:`endpoint_value`), bootstrapping the
  segment return ``R_n = r_n + V_hat``;
* terminated endpoint: ``V_hat = 0`` by definition, no critic call (:func:`bootstrap_value`).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tempo_rl.backends.types import SampledSequence, SamplingClient
from tempo_rl.critic.parse import ValueStatus, validate_r_max
from tempo_rl.envs.snapshot import Snapshot

if TYPE_CHECKING:
    from tempo_rl.rollout.branches import RolloutStart

__all__ = [
    "Critic",
    "CriticEstimates",
    "CriticQuery",
    "CriticSample",
    "Turn",
    "bootstrap_value",
    "endpoint_value",
]

#: One interaction round after the initial observation: (the actor's action text, the env's observation text).
Turn = tuple[str, str]


@dataclass(frozen=True)
class CriticQuery:
    """A state, described for the critic.

    Attributes:
        task: the task sentence.
        history: the ``(action, observation)`` turns after the initial observation, oldest first.
        initial_observation: the observation returned by ``reset``.
        privileged_info: critic-only text (e.g. an expert walkthrough); never shown to the actor.
        privileged_state: critic-only text about the current state (the env's
            :attr:`~tempo_rl.envs.Observation.privileged_state`, e.g. which pieces conflict now); shown after
            the interaction.
        remaining_steps: env steps left before the episode limit T, when the trainer shows the budget.
        r_max: the largest possible return from any state (R_max > 0); values live in ``[0, r_max]``.
        snapshot: the env state itself (a verified-restore :class:`~tempo_rl.envs.Snapshot`), for critics that
            value the state rather than its text (:class:`~tempo_rl.critic.OracleCritic`,
            :class:`~tempo_rl.critic.MonteCarloCritic`); None when the caller has none (the generative critic
            never reads it). Filled in from ``actor_start`` when only that is given.
        actor_start: where the actor stood at the state, as a :class:`~tempo_rl.rollout.branches.RolloutStart`
            (a :class:`~tempo_rl.training.types.StoredState` is one): the snapshot, the turns and the exact token
            prefix the policy was continuing. :class:`~tempo_rl.critic.MonteCarloCritic` plays its rollouts on
            from that prefix, so they estimate the value of the policy that reached the state, older turns
            remembered; without it they start from a fresh prompt rendered from the current observation. None
            when the caller has no prefix; the other critics never read it.
    """

    task: str
    history: Sequence[Turn]
    initial_observation: str
    privileged_info: str | None = None
    privileged_state: str | None = None
    remaining_steps: int | None = None
    r_max: float = 1.0
    snapshot: Snapshot | None = None
    actor_start: RolloutStart | None = None

    def __post_init__(self) -> None:
        validate_r_max(self.r_max)
        if self.actor_start is not None:
            start_snapshot = getattr(self.actor_start, "snapshot", None)
            if not isinstance(start_snapshot, Snapshot) or not hasattr(self.actor_start, "token_prefix"):
                raise TypeError(
                    "CriticQuery.actor_start must be a RolloutStart (a snapshot, a history and a token_prefix, e.g. "
                    f"a StoredState), got {type(self.actor_start).__name__}"
                )
            if self.snapshot is None:
                object.__setattr__(self, "snapshot", start_snapshot)
            elif self.snapshot != start_snapshot:
                raise ValueError(
                    "CriticQuery.snapshot and CriticQuery.actor_start.snapshot are different states; pass the "
                    "actor_start alone (its snapshot is used) or the snapshot of the same state"
                )
        if self.snapshot is not None and not isinstance(self.snapshot, Snapshot):
            raise TypeError(
                f"CriticQuery.snapshot must be a tempo_rl.envs.Snapshot or None, got {type(self.snapshot).__name__}"
            )
        if not isinstance(self.task, str) or not isinstance(self.initial_observation, str):
            raise TypeError("CriticQuery.task and .initial_observation must be str")
        for i, turn in enumerate(self.history):
            if len(turn) != 2 or not all(isinstance(part, str) for part in turn):
                raise TypeError(
                    f"CriticQuery.history[{i}] must be an (action, observation) pair of str, got {turn!r}"
                )
        if self.remaining_steps is not None and self.remaining_steps < 0:
            raise ValueError(f"CriticQuery.remaining_steps must be >= 0 or None, got {self.remaining_steps}")


@dataclass(frozen=True)
class CriticSample:
    """One critic sample: the prompt it answered, the sampled completion, and the value read from it.

    Attributes:
        prompt_tokens: the exact prompt token ids.
        sequence: the sampled completion (tokens, sampler logprobs, text, stop reason).
        value: the parsed value in ``[0, r_max]``; NaN when unparsed.
        status: how the text was read (ok / clipped / missing / malformed / non_finite).
    """

    prompt_tokens: tuple[int, ...]
    sequence: SampledSequence
    value: float
    status: ValueStatus = ValueStatus.OK

    @property
    def parsed(self) -> bool:
        """True when a value could be read (``value`` is finite)."""
        return math.isfinite(self.value)


@dataclass(frozen=True)
class CriticEstimates:
    """K value estimates of one state.

    Attributes:
        values: float64 array of shape ``(K,)``; NaN where a sample was not parsed (or was never drawn because
            the prompt could not fit at all, see ``prompt_too_long``).
        samples: the K samples (empty when the prompt could not fit even with the whole history omitted).
        prompt_too_long: the prompt exceeded the critic's token budget; the middle of the history was omitted
            (``omitted_turns`` > 0) or, when even that was not enough, nothing was sampled.
        omitted_turns: how many history turns were left out of the prompt.
        expectation: the critic's exact expected value of the state, when it reads one from the probabilities
            of its answers (``GenerativeCritic(answer="expected")``: ``sum_i q_i v_i``); None when its estimate
            is the mean of the K values. :func:`endpoint_value` and the critic metrics use it when set.
        answers: every valid answer of the level grid, scored (not sampled), in grid order, when the critic
            reads its value from their probabilities (``"expected"``): what its log-loss trains (see
            :func:`tempo_rl.critic.levels.two_hot`); empty otherwise.
    """

    values: np.ndarray
    samples: tuple[CriticSample, ...]
    prompt_too_long: bool = False
    omitted_turns: int = 0
    expectation: float | None = None
    answers: tuple[CriticSample, ...] = ()

    def __post_init__(self) -> None:
        if self.values.ndim != 1:
            raise ValueError(f"CriticEstimates.values must have shape (K,), got {self.values.shape}")
        if self.samples and len(self.samples) != self.values.shape[0]:
            raise ValueError(
                f"CriticEstimates has {len(self.samples)} samples but {self.values.shape[0]} values"
            )
        if self.expectation is not None and not math.isfinite(self.expectation):
            raise ValueError(f"CriticEstimates.expectation must be finite or None, got {self.expectation}")

    @property
    def k(self) -> int:
        """The number of estimates K."""
        return int(self.values.shape[0])

    @property
    def parse_failures(self) -> int:
        """How many of the K values are NaN (unparsed or never sampled)."""
        return int(np.isnan(self.values).sum())


def endpoint_value(estimates: CriticEstimates) -> float:
    """``V_hat = mean(V_e over parsed samples)``; NaN when no sample was parsed. When the estimates carry an
    exact ``expectation`` (a critic that reads its value from its answers' probabilities), ``V_hat`` is it.

    NaN is deliberate: the trainer decides (per config) whether to drop the branch or substitute a value; an
    unreadable critic is never silently worth 0.
    """
    if estimates.expectation is not None:
        return float(estimates.expectation)
    values = estimates.values[~np.isnan(estimates.values)]
    if values.size == 0:
        return math.nan
    return float(values.mean())


def bootstrap_value(terminated: bool, estimates: CriticEstimates | None) -> float:
    """The bootstrap ``V_hat`` of a branch endpoint: 0 when terminated, else :func:`endpoint_value`.

    Args:
        terminated: the branch reached a terminal MDP state (Gymnasium ``terminated``).
        estimates: the critic's estimates of the endpoint; required when not terminated.

    Raises:
        ValueError: a truncated endpoint without estimates (the critic must be asked).
    """
    if terminated:
        return 0.0
    if estimates is None:
        raise ValueError(
            "a truncated endpoint needs critic estimates to bootstrap from; ask the critic first"
        )
    return endpoint_value(estimates)


class Critic(abc.ABC):
    """Estimates the value of a state K times.

    Subclasses implement :meth:`estimate`. The generative critic (:class:`~tempo_rl.critic.GenerativeCritic`)
    prompts the policy model; a scalar-head critic or a scripted oracle for tests fit the same contract.
    """

    @abc.abstractmethod
    async def estimate(
        self, query: CriticQuery, k: int, sampler: SamplingClient, *, seed: int | None = None
    ) -> CriticEstimates:
        """Return K value estimates of the state described by ``query``, sampled with ``sampler``.

        ``seed`` (when not None) seeds the sampling request, so that the trainer, which draws it from its own
        checkpointed random state, reproduces the same K samples after a resume.
        """
