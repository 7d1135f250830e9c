"""The Monte Carlo critic (VinePPO's estimator): the mean return of M rollouts of the current policy.

For a query it restores M live envs at ``query.snapshot`` (verified), plays each to the end of the episode
with the policy being trained (the ``sampler`` the trainer passes, at the actor's sampling settings, up to the
episode limit T counted from reset), and returns

    V_hat(s) = clip( (1/M) * sum_m G_m , 0, R_max ),    G_m = sum_t r_t over rollout m's rounds,

with each ``r_t`` the env reward less ``invalid_action_penalty`` for an invalid action, exactly the rewards the
trainer's own returns use. Rollouts that end in an env error are left out of the mean (all M errors -> NaN:
the trainer's unparsed-endpoint rule applies). The K estimates are K copies of ``V_hat``: the estimator is one
number, so their mean is ``V_hat`` and their spread 0; nothing is sampled for the critic itself, so there is
nothing to train (no critic Datum).

What the actor sees: with ``query.actor_start`` (the trainer always fills it in where the state can be
continued) the rollouts continue the exact token prefix the policy had at the state, as its own branches would,
so ``V_hat`` estimates the value of the policy that reached the state, older turns remembered (keydoor's clue
before the key room). Without it, or when that prefix leaves no room for another turn, they start from a fresh
prompt rendered from the restored state's current observation (the opening-prompt format, with the step
budget): the value of a policy that has forgotten the turns before. On ``keydoor_rule`` that restarted policy
won less than the one that played the episodes on each of the 5 seeds measured, so a fresh start reads
the values low where the history matters.

Cost: every rollout is real env steps and sampled tokens; the counters (:attr:`MonteCarloCritic.env_steps`,
:attr:`sampled_tokens`, :attr:`prompt_tokens`, ...) accumulate over the critic's life; the trainer reads them
(:meth:`MonteCarloCritic.cost_counters`) into its run's ``cost/*`` and ``critic/mc_*`` metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tempo_rl.backends.types import SamplingClient
from tempo_rl.critic.base import Critic, CriticEstimates, CriticQuery
from tempo_rl.critic.oracle import OracleUnavailableError
from tempo_rl.envs.snapshot import Snapshot
from tempo_rl.rollout.branches import BranchResult, RolloutSettings, RolloutStart, run_branches
from tempo_rl.rollout.renderer import PromptState
from tempo_rl.rollout.tool_call import ToolCallParser

__all__ = ["MonteCarloCritic", "rollout_return"]

#: ``restore_branches(snapshot, n) -> n live envs`` at the snapshot's state (the trainer's
#: ``TrainerComponents.restore_branches``, or :func:`tempo_rl.envs.restore_branches`).
BranchRestorer = Callable[[Snapshot, int], Sequence[Any]]


@dataclass(frozen=True)
class _SnapshotStart:
    """A :class:`~tempo_rl.rollout.branches.RolloutStart` at a snapshot with an empty prompt (rendered fresh
    from the restored state's current observation)."""

    snapshot: Snapshot
    history: tuple[tuple[str, str], ...]
    token_prefix: tuple[int, ...] = ()

    def prompt_state(self) -> PromptState:  # pragma: no cover - never called: the prefix is empty
        raise ValueError("a Monte Carlo rollout start has no token prefix: its opening prompt is rendered")


def rollout_return(branch: BranchResult) -> float:
    """``G = sum of the branch's rewards`` (penalties included); NaN for a branch that ended in an env error."""
    if branch.end_reason == "error":
        return math.nan
    return float(sum(branch.rewards))


def _default_restore(snapshot: Snapshot, n: int) -> Sequence[Any]:
    from tempo_rl.envs.restore import restore_branches

    return restore_branches(snapshot, n, verify=True)


class MonteCarloCritic(Critic):
    """``V_hat(s)`` = the mean return of ``rollouts`` policy rollouts from the restored state.

    Args:
        chat: the actor's :class:`~tempo_rl.rollout.ChatRenderer`.
        pool: the env worker pool (``await pool.call(env, "step", action)``).
        parser: the actor's tool-call parser.
        settings: the rollout settings (the actor's sampling parameters, T, token budget, tool name, invalid
            action penalty); ``segment_rounds`` is ignored (rollouts play to the episode's end) and the sampling
            seed is replaced by each query's seed.
        rollouts: M >= 1, rollouts per valued state.
        restore_branches: ``(snapshot, n) -> n live envs``; default :func:`tempo_rl.envs.restore_branches`
            (verified). Pass the trainer's own (``TrainerComponents.restore_branches``) so that restored envs
            match its pool (threads or Ray actors).

    Counters (cumulative, plain ints): ``queries``, ``rollouts_played``, ``env_steps`` (rollout steps),
    ``sample_requests``, ``sampled_tokens`` and ``prompt_tokens`` (the summed prompt length of every sampling
    request: the prefill the backend processes), ``fresh_prompts`` (queries whose rollouts started from a fresh
    prompt, not the actor's own prefix: no ``actor_start``, or one with no room left for a turn).
    """

    def __init__(
        self,
        chat: Any,
        pool: Any,
        parser: ToolCallParser,
        settings: RolloutSettings,
        *,
        rollouts: int = 4,
        restore_branches: BranchRestorer | None = None,
    ) -> None:
        if not isinstance(rollouts, int) or rollouts < 1:
            raise ValueError(f"rollouts (M) must be an int >= 1, got {rollouts!r}")
        self.chat = chat
        self.pool = pool
        self.parser = parser
        self.settings = dataclasses.replace(settings, segment_rounds=None)
        self.rollouts = rollouts
        self._restore = restore_branches or _default_restore
        self.queries = 0
        self.rollouts_played = 0
        self.env_steps = 0
        self.sample_requests = 0
        self.sampled_tokens = 0
        self.prompt_tokens = 0
        self.fresh_prompts = 0

    def counters(self) -> dict[str, float]:
        """The cumulative cost counters as ``critic/mc_<name>`` metrics (over this critic object's life; a
        trainer's own ``critic/mc_*`` metrics are cumulative over the run, resumes included)."""
        names = (
            "queries",
            "rollouts_played",
            "env_steps",
            "sample_requests",
            "sampled_tokens",
            "prompt_tokens",
            "fresh_prompts",
        )
        return {f"critic/mc_{name}": float(getattr(self, name)) for name in names}

    def cost_counters(self) -> dict[str, int]:
        """The work of the rollouts so far, for the trainer's ``cost/*`` accounting
        (:class:`tempo_rl.training.cost.CostLedger`): ``prefill_tokens`` (prompt tokens of every sample
        request), ``sampled_tokens``, ``env_steps``, ``queries`` and ``rollouts``; cumulative."""
        return {
            "prefill_tokens": self.prompt_tokens,
            "sampled_tokens": self.sampled_tokens,
            "env_steps": self.env_steps,
            "queries": self.queries,
            "rollouts": self.rollouts_played,
        }

    def rollout_start(self, query: CriticQuery, snapshot: Snapshot) -> RolloutStart:
        """Where the rollouts start: ``query.actor_start`` (its token prefix continued) when it has room for one
        more turn of ``max_tokens`` within the trajectory's token budget, else a fresh prompt at ``snapshot``."""
        start = query.actor_start
        budget = self.settings.max_trajectory_tokens - self.settings.sampling.max_tokens
        if start is not None and (not start.token_prefix or len(start.token_prefix) <= budget):
            return start
        self.fresh_prompts += 1
        return _SnapshotStart(snapshot=snapshot, history=tuple((str(a), str(o)) for a, o in query.history))

    async def returns(
        self, query: CriticQuery, sampler: SamplingClient, *, seed: int | None = None
    ) -> np.ndarray:
        """The M rollout returns ``G_m`` from the query's state (NaN for a rollout that ended in an error).

        Raises:
            OracleUnavailableError: the query has no snapshot.
        """
        snapshot = query.snapshot
        if snapshot is None:
            raise OracleUnavailableError(
                "MonteCarloCritic needs CriticQuery.snapshot (the state to restore); the trainer's critic_query "
                "fills it in; build queries with snapshot=... when calling the critic yourself"
            )
        envs = list(await asyncio.to_thread(self._restore, snapshot, self.rollouts))
        settings = self.settings
        if seed is not None:
            settings = dataclasses.replace(
                settings, sampling=dataclasses.replace(settings.sampling, seed=seed)
            )
        start = self.rollout_start(query, snapshot)
        try:
            results, stats = await run_branches(
                [start],
                [envs],
                sampler=sampler,
                chat=self.chat,
                settings=settings,
                pool=self.pool,
                parser=self.parser,
            )
        finally:
            for env in envs:
                with contextlib.suppress(Exception):  # closing is best effort
                    env.close()
        branches = results[0]
        self.queries += 1
        self.rollouts_played += len(branches)
        self.env_steps += sum(b.rounds for b in branches)
        self.sample_requests += stats.sample_requests
        self.sampled_tokens += stats.sampled_tokens
        self.prompt_tokens += stats.prompt_tokens  # round 1 is one request for all M branches (shared prompt)
        return np.asarray([rollout_return(b) for b in branches], dtype=np.float64)

    async def estimate(
        self, query: CriticQuery, k: int, sampler: SamplingClient, *, seed: int | None = None
    ) -> CriticEstimates:
        """K copies of ``V_hat = clip(mean_m G_m, 0, R_max)`` (NaN when every rollout failed)."""
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        returns = await self.returns(query, sampler, seed=seed)
        finite = returns[np.isfinite(returns)]
        value = float(np.clip(finite.mean(), 0.0, query.r_max)) if finite.size else math.nan
        return CriticEstimates(values=np.full(k, value, dtype=np.float64), samples=())
