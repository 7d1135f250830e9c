"""The oracle critic: the env's exact optimal value of the restored state, optionally made noisy on purpose.

"Does my setup learn with a perfect critic?" is the first question to ask when TEMPO does not learn: with
:class:`OracleCritic` the values are right by construction, so a run that still does not beat GRPO has its
problem on the actor's side (advantages, Datums, the optimiser step, the store's sampling), not the critic's.
Its noise settings chart how TEMPO degrades as its critic worsens.

For a query it restores ``query.snapshot`` (verified, :func:`tempo_rl.envs.restore`), asks the env for
``V* = oracle_value(n)`` with ``n`` the steps left before the trainer's episode limit T (``query.remaining_steps``,
else ``max_rounds - snapshot.round_index``), and returns K estimates. Each estimate k gets its own noise:

1. flip: with probability ``flip_prob``, ``V_k = R_max - V`` (for binary values, the wrong answer);
2. Gaussian: ``V_k <- clip(V_k + sigma * z_k, 0, R_max)`` with ``z_k ~ N(0, 1)``.

The draws come from ``numpy.random.default_rng(seed)`` (``seed`` is the trainer's per-query seed, drawn from its
checkpointed RNG, so a resumed run reproduces the same noise): ``u = rng.random(K)`` then
``z = rng.standard_normal(K)``, always both, so the values of one setting never depend on the other. With
``flip_prob = 0`` and ``sigma = 0`` every estimate is exactly ``V*``.

An oracle estimate has no tokens: ``CriticEstimates.samples`` is empty, so the trainer builds no critic Datum
from it (nothing to train) and its parse-failure rate is 0.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import numpy as np

from tempo_rl.backends.types import SamplingClient
from tempo_rl.critic.base import Critic, CriticEstimates, CriticQuery
from tempo_rl.envs.core import ReplayableEnv
from tempo_rl.envs.snapshot import Snapshot

__all__ = ["OracleCritic", "OracleUnavailableError", "apply_value_noise", "steps_left_of"]

#: Restores a snapshot to a live env (owned by the caller, who closes it).
Restorer = Callable[[Snapshot], ReplayableEnv]


class OracleUnavailableError(RuntimeError):
    """The env of a query has no oracle (``oracle_value`` returned None), or the query has no snapshot."""


def apply_value_noise(
    value: float, k: int, *, r_max: float, flip_prob: float, sigma: float, rng: np.random.Generator
) -> np.ndarray:
    """K noisy copies of ``value`` (see the module docstring): flip with probability ``flip_prob``
    (``V -> r_max - V``), then add ``sigma * N(0, 1)`` and clip to ``[0, r_max]``.

    Always draws ``k`` uniforms then ``k`` normals from ``rng``. Returns a float64 array of shape ``(k,)``.
    """
    u = rng.random(k)
    z = rng.standard_normal(k)
    values = np.full(k, float(value), dtype=np.float64)
    values = np.where(u < flip_prob, r_max - values, values)
    if sigma > 0:
        values = np.clip(values + sigma * z, 0.0, r_max)
    return values


def steps_left_of(query: CriticQuery, max_rounds: int | None) -> int:
    """The steps before the episode limit T at the query's state: ``query.remaining_steps`` when the trainer
    shows it, else ``max(0, max_rounds - snapshot.round_index)``.

    Raises:
        OracleUnavailableError: neither is known (no remaining steps, no ``max_rounds``, or no snapshot).
    """
    if query.remaining_steps is not None:
        return query.remaining_steps
    if max_rounds is None or query.snapshot is None:
        raise OracleUnavailableError(
            "the query carries no remaining_steps (sampling.show_remaining_steps = false) and the critic was "
            "built without max_rounds; pass max_rounds=T (tempo.max_rounds) to the critic"
        )
    return max(0, max_rounds - query.snapshot.round_index)


def _default_restore(snapshot: Snapshot) -> ReplayableEnv:
    from tempo_rl.envs.restore import restore

    return restore(snapshot, verify=True)


class OracleCritic(Critic):
    """K estimates of ``V*`` read from the env's :meth:`~tempo_rl.envs.ReplayableEnv.oracle_value`.

    Args:
        flip_prob: p in [0, 1], the probability that one estimate is replaced by ``R_max - V*``.
        sigma: s >= 0, the standard deviation of the Gaussian noise added to each estimate (then clipped to
            ``[0, R_max]``), in R_max units as the values.
        max_rounds: T, the trainer's episode limit, used when a query carries no ``remaining_steps``.
        restore: builds a live env from a snapshot (default: :func:`tempo_rl.envs.restore`, verified replay
            or fork); it runs in a worker thread.

    The ``sampler`` argument of :meth:`estimate` is not used (no model is asked).
    """

    def __init__(
        self,
        *,
        flip_prob: float = 0.0,
        sigma: float = 0.0,
        max_rounds: int | None = None,
        restore: Restorer | None = None,
    ) -> None:
        if not (isinstance(flip_prob, (int, float)) and 0.0 <= flip_prob <= 1.0):
            raise ValueError(f"flip_prob must be a probability in [0, 1], got {flip_prob!r}")
        if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma >= 0.0):
            raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
        if max_rounds is not None and (not isinstance(max_rounds, int) or max_rounds < 1):
            raise ValueError(f"max_rounds must be None or an int >= 1, got {max_rounds!r}")
        self.flip_prob = float(flip_prob)
        self.sigma = float(sigma)
        self.max_rounds = max_rounds
        self._restore = restore or _default_restore
        self._rng = np.random.default_rng()
        self.queries = 0  # states valued so far
        self.replayed_steps = 0  # env steps replayed to restore them (len(snapshot.actions) each)

    def exact_value(self, query: CriticQuery) -> float:
        """``V*`` of the query's state (no noise): restore the snapshot, ask the env, close it.

        Raises:
            OracleUnavailableError: the query has no snapshot, or the env has no oracle.
            ValueError: the env's value lies outside ``[0, r_max]``.
        """
        snapshot = query.snapshot
        if snapshot is None:
            raise OracleUnavailableError(
                "OracleCritic needs CriticQuery.snapshot (the state to restore); the trainer's critic_query "
                "fills it in; build queries with snapshot=... when calling the critic yourself"
            )
        steps = steps_left_of(query, self.max_rounds)
        env = self._restore(snapshot)
        try:
            value = env.oracle_value(steps)
        finally:
            env.close()
        self.queries += 1
        self.replayed_steps += len(snapshot.actions)
        if value is None:
            raise OracleUnavailableError(
                f"env {snapshot.env.name!r} has no oracle: its oracle_value() returned None. Implement "
                "ReplayableEnv.oracle_value(steps_left) for it, or use tempo.critic = 'generative' or "
                "'monte_carlo'"
            )
        value = float(value)
        if not (math.isfinite(value) and 0.0 <= value <= query.r_max + 1e-12):
            raise ValueError(
                f"env {snapshot.env.name!r} returned oracle value {value}, outside [0, r_max = {query.r_max}]; "
                "check tempo.r_max against the env's largest return"
            )
        return min(value, query.r_max)

    async def estimate(
        self, query: CriticQuery, k: int, sampler: SamplingClient, *, seed: int | None = None
    ) -> CriticEstimates:
        """K estimates of ``V*`` with the configured noise, drawn from ``default_rng(seed)`` (see the module
        docstring); no samples (nothing to train)."""
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an int >= 1, got {k!r}")
        value = await asyncio.to_thread(self.exact_value, query)
        rng = np.random.default_rng(seed) if seed is not None else self._rng
        values = apply_value_noise(
            value, k, r_max=query.r_max, flip_prob=self.flip_prob, sigma=self.sigma, rng=rng
        )
        return CriticEstimates(values=values, samples=())
