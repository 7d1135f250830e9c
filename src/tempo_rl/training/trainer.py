"""The abstract :class:`MacroStepTrainer`: the update loop and the steps every trainer shares.

A trainer owns the clients, the critic, the state store, the env worker pool and a small JSON-serialisable
:class:`TrainerState` (update counter, policy version, fresh-game cursor, RNG state). Its loop is::

    while state.update < total_updates:
        metrics = update(state.update)          # subclass: one warm-up / TD / GRPO update
        state.update += 1
        log(metrics); maybe checkpoint()

Subclasses implement :meth:`MacroStepTrainer.update` with the overridable steps defined here: fresh starts and
restores (:meth:`fresh_starts`, :meth:`restore_starts`), rollouts (:meth:`rollout`), critic estimates
(:meth:`estimate_many`), Datum assembly (:meth:`actor_datums`, :meth:`critic_datums`) and the optimiser step
(:meth:`train_step`: every Datum of the update through chunked ``forward_backward`` calls, then ONE
``optim_step`` (or ``optim.substeps`` minibatch steps), then a fresh sampling client = the next policy version).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import math
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from tempo_rl.backends.types import AdamParams, Datum, LossFn, SamplingClient, SamplingParams, TrainingClient
from tempo_rl.critic.base import CriticEstimates, CriticQuery
from tempo_rl.critic.privileged import PrivilegedInfoTally
from tempo_rl.envs.core import task_of
from tempo_rl.envs.games import GAME_KWARG
from tempo_rl.envs.snapshot import EnvSpec
from tempo_rl.rollout.branches import BranchResult, RolloutSettings, RolloutStats, run_branches
from tempo_rl.rollout.datums import completion_datum, make_datum
from tempo_rl.signals import kl_penalized_advantages
from tempo_rl.training.config import TrainConfig
from tempo_rl.training.cost import CostLedger, critic_cost_counters
from tempo_rl.training.options import TrainerOptions
from tempo_rl.training.types import StartState, StoredState, TrainerComponents

__all__ = ["MacroStepTrainer", "TrainerState", "UpdateTimer"]

T = TypeVar("T")

#: A branch's advantage: one number for all its sampled tokens, or one per round (GiGPO's step level).
Advantage = float | Sequence[float] | np.ndarray

#: Advantages at or below this magnitude carry no gradient: such Datums are not sent.
ADV_ATOL = 1e-12
#: Mixed into the evaluation seed (see :meth:`MacroStepTrainer.eval_seed`): a stream of its own, apart from run.seed.
_EVAL_STREAM = 0x4556414C


@dataclass
class TrainerState:
    """Everything the loop needs to resume exactly (checkpointed as JSON).

    Attributes:
        update: updates completed (the next update has this index).
        policy_version: optimiser steps applied to the policy (the version that samples the next update).
        fresh_cursor: index of the next fresh training game (``EnvConfig.train_game(fresh_cursor)``).
        rng_state: the numpy ``PCG64`` bit-generator state.
        states_reused_total: stored states restored and trained from so far.
        warmstart_done: the supervised warm start has run (it is never repeated on resume).
        kl_reference: the backend state (``training_client.save_state``) of the KL anchor's reference policy,
            saved when RL began; None until then or with ``kl.coef = 0``.
        kl_reference_version: the policy version the reference was saved at; while ``policy_version`` still
            equals it, pi is pi_ref exactly (None: unknown, in a state saved before this field existed).
        cost: the run's cumulative tokens processed and env steps (``cost/*``, :mod:`tempo_rl.training.cost`).
        critic_replay: with ``tempo.warmup_replay``, the warm-up's critic examples so far, each
            ``{"prompt": [...], "completion": [...], "weight": w}`` (a cross-entropy Datum's makings); kept in
            TD, whose critic steps rehearse them.
        critic_readings: the hand-over gate's reading of each warm-up update (the critic's correlation with
            its fresh episodes' Monte Carlo returns, before training on them; NaN where undefined).
        handover_update: the updates done when TEMPO handed over from the warm-up to TD (None: not yet).
    """

    update: int = 0
    policy_version: int = 0
    fresh_cursor: int = 0
    rng_state: dict[str, Any] = field(default_factory=dict)
    states_reused_total: int = 0
    warmstart_done: bool = False
    kl_reference: str | None = None
    kl_reference_version: int | None = None
    cost: CostLedger = field(default_factory=CostLedger)
    critic_replay: list[dict[str, Any]] = field(default_factory=list)
    critic_readings: list[float | None] = field(default_factory=list)
    handover_update: int | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {
            "update": self.update,
            "policy_version": self.policy_version,
            "fresh_cursor": self.fresh_cursor,
            "rng_state": self.rng_state,
            "states_reused_total": self.states_reused_total,
            "warmstart_done": self.warmstart_done,
            "kl_reference": self.kl_reference,
            "kl_reference_version": self.kl_reference_version,
            "cost": self.cost.to_json(),
            "critic_replay": self.critic_replay,
            "critic_readings": self.critic_readings,
            "handover_update": self.handover_update,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainerState:
        """Inverse of :meth:`to_json`."""
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        values["cost"] = CostLedger.from_json(data.get("cost"))
        return cls(**values)


def _close_runner(runner: asyncio.Runner) -> None:
    """Close a trainer's event loop; from inside another running loop (a trainer collected there), in a thread
    of its own, since a thread runs one loop at a time."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        runner.close()
        return
    closer = threading.Thread(target=runner.close, name="tempo-rl-close-loop")
    closer.start()
    closer.join()


class UpdateTimer:
    """Wall-clock split of one update into named parts (seconds)."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self._t0 = time.perf_counter()

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to part ``name``."""
        self.parts[name] = self.parts.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time the ``with`` block into part ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def metrics(self) -> dict[str, float]:
        """``time/{part}_s`` for every part."""
        return {f"time/{k}_s": v for k, v in self.parts.items()}

    def total(self) -> float:
        """Seconds since the timer was created."""
        return time.perf_counter() - self._t0


class MacroStepTrainer(abc.ABC):
    """The update loop shared by TEMPO and the GRPO baseline; subclasses implement :meth:`update`.

    Args:
        config: the validated run config.
        components: clients, critic, store, pool (see :class:`TrainerComponents`).
        state: the loop state (a fresh one seeded from ``config.run.seed`` when None).
        log: ``(step, metrics) -> None``, called after every update.
        on_update_end: called after every update (the run checkpoints here).
        write_trajectories: ``(records) -> None`` for trajectory JSONL records.
    """

    #: settings beyond the config (:func:`~tempo_rl.training.run.build_trainer` sets them)
    options: TrainerOptions = TrainerOptions()

    def __init__(
        self,
        config: TrainConfig,
        components: TrainerComponents,
        *,
        state: TrainerState | None = None,
        log: Callable[[int, Mapping[str, float]], None] | None = None,
        on_update_end: Callable[[MacroStepTrainer], None] | None = None,
        write_trajectories: Callable[[Sequence[Mapping[str, Any]]], None] | None = None,
    ) -> None:
        self.config = config
        self.c = components
        if state is None:
            state = TrainerState()
        if not state.rng_state:
            state.rng_state = dict(np.random.Generator(np.random.PCG64(config.run.seed)).bit_generator.state)
        self.state = state
        self.rng = np.random.Generator(np.random.PCG64())
        self.rng.bit_generator.state = state.rng_state
        self._log = log
        self._on_update_end = on_update_end
        self._write_trajectories = write_trajectories
        self.fresh_start_failures = 0  # fresh games whose build/reset failed (dropped, counted)
        self.restore_failures = (
            0  # stored states whose restore crashed (dropped this update, not quarantined)
        )
        self._reference: SamplingClient | None = None  # the KL anchor's frozen policy (kl.coef > 0)
        self._runner: asyncio.Runner | None = None
        self.privileged = PrivilegedInfoTally()  # critic/privileged_info_rate over each update's starts

    # ---------------------------------------------------------------------------------------------- loop

    @abc.abstractmethod
    def total_updates(self) -> int:
        """How many updates the whole run has."""

    @abc.abstractmethod
    async def update(self, index: int) -> dict[str, float]:
        """Run update ``index`` (0-based) and return its metrics (slash-namespaced keys)."""

    def train(self, max_updates: int | None = None) -> None:
        """Run updates until :meth:`total_updates` (or ``max_updates`` more) are done; resumable."""
        done = 0
        if self.config.kl.coef > 0 and self.state.update < self.total_updates():
            self.reference_sampler()  # before the first RL step: the reference is the policy RL starts from
        while self.state.update < self.total_updates():
            if max_updates is not None and done >= max_updates:
                return
            t0 = time.perf_counter()
            self.privileged.clear()  # an evaluation's starts do not count
            metrics = self.run_async(self.update(self.state.update))
            metrics.update(self.privileged.pop_metrics())
            metrics["time/update_seconds"] = time.perf_counter() - t0
            if self._should_eval(self.state.update + 1):
                t1 = time.perf_counter()
                metrics.update(
                    self.run_async(
                        self.evaluate(self.config.run.eval_episodes, updates_done=self.state.update + 1)
                    )
                )
                metrics["time/eval_seconds"] = time.perf_counter() - t1
            metrics["train/policy_version"] = float(self.state.policy_version)
            metrics.update(self.cost_metrics())  # an evaluation's tokens count apart (eval/cost_*)
            metrics.update(self.reliability_metrics())
            self.state.update += 1
            self.state.rng_state = dict(self.rng.bit_generator.state)
            if self._log is not None:
                self._log(self.state.update, metrics)
            if self._on_update_end is not None:
                self._on_update_end(self)
            done += 1

    def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the trainer's event loop: one loop for the trainer's life (created on first use,
        closed by :meth:`close`), so the pools' locks and the clients' futures are bound to one loop."""
        if self._runner is None:
            self._runner = asyncio.Runner()
            self._finalizer = weakref.finalize(self, _close_runner, self._runner)
        return self._runner.run(coro)

    def close(self) -> None:
        """Close the trainer's event loop (a later :meth:`run_async` opens a new one)."""
        if self._runner is not None:
            self._finalizer()
            self._runner = None

    @property
    def cost(self) -> CostLedger:
        """The run's cumulative cost counters (kept in :attr:`state`, so they survive a resume)."""
        return self.state.cost

    def cost_metrics(self) -> dict[str, float]:
        """``cost/*`` so far (see :mod:`tempo_rl.training.cost`), and ``critic/mc_*`` when the critic does
        rollouts of its own (it has ``cost_counters()``)."""
        return self.cost.metrics(critic=critic_cost_counters(self.c.critic) is not None)

    def reliability_metrics(self) -> dict[str, float]:
        """Failure counters since this process started: env worker calls, errors, timeouts and replaced workers
        (``workers/...``), backend retries (``backend/...``) and the local sampler's prompt prefill and prefix
        cache (``sampling/...``), from components that keep them; a critic with weights of its own adds its
        client's as ``critic/backend/...`` and ``critic/sampling/...``."""
        out: dict[str, float] = {"starts/fresh_start_failures": float(self.fresh_start_failures)}
        if self.restore_failures:  # only once it happened: a normal run's metrics keep their names
            out["starts/restore_failures"] = float(self.restore_failures)
        tc, critic = self.c.training_client, self.c.critic_training_client
        sources: list[tuple[str, Any]] = [
            ("", getattr(self.c.pool, "stats", None)),
            ("", getattr(tc, "stats", None)),
            ("", getattr(tc, "sampling_stats", None)),
        ]
        if critic is not None:
            sources += [
                ("critic/", getattr(critic, "stats", None)),
                ("critic/", getattr(critic, "sampling_stats", None)),
            ]
        for prefix, source in sources:
            as_metrics = getattr(source, "as_metrics", None)
            if callable(as_metrics):
                values = as_metrics()
                if isinstance(values, Mapping):
                    out.update({f"{prefix}{k}": float(v) for k, v in values.items()})
        return out

    def _should_eval(self, updates_done: int) -> bool:
        every = self.config.run.eval_every
        if every <= 0:
            return False
        return updates_done % every == 0 or updates_done == self.total_updates()

    def initial_eval(self) -> dict[str, float]:
        """Evaluation before the first update (logged at step 0), when evaluation is enabled."""
        if self.config.run.eval_every <= 0:
            return {}
        return self.run_async(self.evaluate(self.config.run.eval_episodes, updates_done=0))

    # ---------------------------------------------------------------------------------------------- starts

    def sampling_params(self, *, temperature: float | None = None, seed: int | None = None) -> SamplingParams:
        """The actor's sampling parameters; ``seed`` defaults to a fresh draw from the trainer RNG (reproducible
        runs)."""
        seed = int(self.rng.integers(0, 2**31 - 1)) if seed is None else seed
        return self.config.sampling.actor_params(self.stop_tokens(), temperature=temperature, seed=seed)

    def eval_seed(self, updates_done: int) -> int:
        """The sampling seed of the evaluation after ``updates_done`` updates: a function of ``run.seed`` and
        ``updates_done`` alone, so evaluating never draws from the trainer RNG. How often a run evaluates
        therefore leaves its training samples unchanged, and a resumed run evaluates as an uninterrupted one."""
        entropy = [self.config.run.seed, _EVAL_STREAM, updates_done]
        return int(np.random.SeedSequence(entropy).generate_state(1)[0] & 0x7FFFFFFF)

    def stop_tokens(self) -> tuple[int, ...] | None:
        """Stop token ids of one assistant turn (the tokenizer's EOS), when known."""
        tokenizer = getattr(self.c.chat, "tokenizer", None)
        eos = getattr(tokenizer, "eos_token_id", None)
        return (int(eos),) if eos is not None else None

    def next_fresh_game(self) -> tuple[EnvSpec, int]:
        """``(spec, seed)`` of the next fresh training game (advances the data cursor)."""
        game = self.config.env.train_game(self.state.fresh_cursor)
        self.state.fresh_cursor += 1
        return game

    async def env_call(self, steps: int, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (building, resetting or restoring envs) off the event loop, with a deadline of
        ``steps x workers.step_timeout_s`` seconds: ``steps`` env calls (a reset, or a replay's resets and
        steps). Past it ``TimeoutError`` is raised and the caller drops that game or state (counted); the
        thread is abandoned, as the worker pool abandons a hung worker."""
        return await asyncio.wait_for(
            asyncio.to_thread(fn, *args), self.config.workers.step_timeout_s * steps
        )

    async def fresh_start(self, n: int, game: tuple[EnvSpec, int] | None = None) -> StartState:
        """A fresh game (the next training game unless given) reset in ``n`` live branch envs."""
        spec, seed = game if game is not None else self.next_fresh_game()
        env = await self.env_call(1, self.c.make_env, spec, seed)
        snapshot = env.snapshot()
        obs = env.last_observation
        envs: list[Any] = [env]
        if n > 1:
            envs += await self.env_call(
                (n - 1) * (1 + snapshot.round_index), self.c.restore_branches, snapshot, n - 1
            )
        state = StoredState.at_reset(
            snapshot,
            game_id=str(spec.kwargs.get(GAME_KWARG) or f"{spec.name}:{seed}"),
            task=task_of(obs),
            policy_version=self.state.policy_version,
            privileged_info=env.privileged_info(),
            privileged_state=getattr(obs, "privileged_state", None),
        )
        self.privileged.observe(state.privileged_info)
        return StartState(state=state, envs=envs, fresh=True)

    async def fresh_starts(
        self, n: int, games: Sequence[tuple[EnvSpec, int]]
    ) -> tuple[list[StartState], int]:
        """:meth:`fresh_start` for every game concurrently; a game whose build or reset fails (env crash,
        time-out, a reset that does not reproduce) is dropped and counted instead of stopping the update.

        Returns the started games (in order) and how many failed; failures also accumulate in
        ``fresh_start_failures``, reported by :meth:`reliability_metrics`.
        """
        results = await asyncio.gather(*(self.fresh_start(n, game) for game in games), return_exceptions=True)
        starts: list[StartState] = []
        failed = 0
        for result in results:
            if isinstance(result, BaseException):
                if not isinstance(result, Exception):  # KeyboardInterrupt, SystemExit, cancellation
                    raise result
                failed += 1
            else:
                starts.append(result)
        self.fresh_start_failures += failed
        return starts, failed

    async def restore_start(self, state: StoredState, n: int) -> StartState | None:
        """Restore ``n`` verified branches of a stored state; None when it cannot be used this update.

        A replay divergence (or a snapshot of another env) quarantines the state for good, with the diff; a
        crash of the env during the restore only drops it for this update (counted in ``restore_failures``):
        the state itself is sound and may restore next time."""
        from tempo_rl.envs.restore import ReplayDivergenceError, SnapshotMismatchError

        try:
            steps = n * (1 + state.snapshot.round_index)
            envs = await self.env_call(steps, self.c.restore_branches, state.snapshot, n)
        except Exception as exc:  # ReplayDivergenceError or an env crash: drop this state, count it
            if not isinstance(exc, ReplayDivergenceError | SnapshotMismatchError):
                self.restore_failures += 1
                return None
            diff = None
            if hasattr(exc, "expected") and hasattr(exc, "actual"):  # ReplayDivergenceError: keep its diff
                from tempo_rl.envs.restore import text_diff

                diff = getattr(exc, "detail", "") or text_diff(str(exc.expected), str(exc.actual))
            self.c.store.quarantine(state.id, f"{type(exc).__name__}: {exc}", diff=diff)
            return None
        self.privileged.observe(state.privileged_info)
        return StartState(state=state, envs=list(envs), fresh=False)

    @staticmethod
    def close_envs(starts: Sequence[StartState]) -> None:
        """Close every live env of ``starts``."""
        for start in starts:
            for env in start.envs:
                with contextlib.suppress(Exception):  # closing is best effort
                    env.close()

    # ---------------------------------------------------------------------------------------------- rollout

    def rollout_settings(
        self, *, segment_rounds: int | None, temperature: float | None = None, seed: int | None = None
    ) -> RolloutSettings:
        """Rollout settings from the config; ``segment_rounds=None`` plays full episodes; ``seed`` as in
        :meth:`sampling_params`."""
        s = self.config.sampling
        return RolloutSettings(
            sampling=self.sampling_params(temperature=temperature, seed=seed),
            max_rounds=self.config.tempo.max_rounds,
            segment_rounds=segment_rounds,
            max_trajectory_tokens=s.max_trajectory_tokens,
            show_remaining_steps=s.show_remaining_steps,
            tool_name=self.c.parser.tool_name,
            invalid_action_penalty=self.config.env.invalid_action_penalty,
        )

    async def rollout(
        self, starts: Sequence[StartState], settings: RolloutSettings
    ) -> tuple[list[list[BranchResult]], RolloutStats]:
        """Play the branches of every start (see :func:`~tempo_rl.rollout.run_branches`)."""
        return await run_branches(
            [s.state for s in starts],
            [s.envs for s in starts],
            sampler=self.c.sampler,
            chat=self.c.chat,
            settings=settings,
            pool=self.c.pool,
            parser=self.c.parser,
        )

    async def play(
        self, starts: Sequence[StartState], *, segment_rounds: int | None, timer: UpdateTimer
    ) -> tuple[list[list[BranchResult]], RolloutStats]:
        """:meth:`rollout` with the configured settings, then close every env of ``starts`` (also on error);
        adds the sampling and env seconds to ``timer``. ``segment_rounds=None`` plays full episodes."""
        try:
            results, rstats = await self.rollout(starts, self.rollout_settings(segment_rounds=segment_rounds))
        finally:
            self.close_envs(starts)
        self.cost.add_rollout(rstats)
        timer.add("sampling", rstats.sampling_s)
        timer.add("env", rstats.env_s)
        return results, rstats

    # ---------------------------------------------------------------------------------------------- critic

    def critic_query(self, state: StoredState, branch: BranchResult | None = None) -> CriticQuery:
        """The critic's view of a state (or, given ``branch``, of that branch's endpoint from ``state``): task,
        initial observation, history, privileged info, step budget, the state's snapshot (for critics that
        restore it) and, for ``state`` itself, the state as the actor's start (for critics that play the policy
        on from its token prefix; a branch endpoint gets it from
        :meth:`~tempo_rl.training.tempo.TempoTrainer.endpoint_query`)."""
        history = branch.history if branch is not None else state.history
        round_index = branch.round_index if branch is not None else state.snapshot.round_index
        t = self.config.tempo
        remaining = max(0, t.max_rounds - round_index) if self.config.sampling.show_remaining_steps else None
        return CriticQuery(
            task=state.task,
            history=tuple((str(a), str(o)) for a, o in history),
            initial_observation=state.initial_observation,
            privileged_info=state.privileged_info,
            privileged_state=(
                branch.privileged_state_at(branch.rounds, state.privileged_state)
                if branch is not None
                else state.privileged_state
            ),
            remaining_steps=remaining,
            r_max=t.r_max,
            snapshot=branch.snapshot if branch is not None else state.snapshot,
            actor_start=state if branch is None else None,
        )

    async def estimate_many(self, queries: Sequence[CriticQuery], k: int) -> list[CriticEstimates]:
        """K critic estimates of every query, concurrently; each request is seeded from the trainer RNG (drawn
        in query order before any sampling starts), so a resumed run reproduces the critic samples too."""
        seeds = [int(self.rng.integers(0, 2**31 - 1)) for _ in queries]
        before = critic_cost_counters(self.c.critic)
        estimates = list(
            await asyncio.gather(
                *(self.c.critic.estimate(q, k, self.critic_sampler(), seed=s) for q, s in zip(queries, seeds))
            )
        )
        self.cost.add_estimates(estimates)
        if before is not None:
            after = critic_cost_counters(self.c.critic)
            assert after is not None
            self.cost.add_critic_work(before, after)
        return estimates

    # ---------------------------------------------------------------------------------------------- datums

    def vocab_size(self) -> int | None:
        """``len(tokenizer)`` of the actor's renderer, when known (Datums are validated against it)."""
        tokenizer = getattr(self.c.chat, "tokenizer", None)
        return len(tokenizer) if tokenizer is not None else None

    def actor_datums(
        self, branches: Sequence[BranchResult], advantages: Sequence[Advantage], *, role: str = "actor"
    ) -> list[Datum]:
        """One Datum per token sequence of each branch with a non-zero advantage (a branch has one sequence,
        plus one per chat-template restart, see :meth:`BranchResult.sequences`): context (prefix, observations)
        logprob 0 / advantage 0; the sampled tokens carry their sampled logprobs and the branch's advantage, one
        number for the whole branch or one per round (each turn's tokens carry their round's, see
        :meth:`BranchResult.turn_values`). Context after the last sampled token (the final observation turn) is
        cut: it carries no loss; a sequence without sampled tokens yields no Datum."""
        return [
            self._actor_datum(tokens, logprobs, np.where(mask, adv, 0.0), role=role)
            for tokens, logprobs, mask, adv in self._trained_sequences(branches, advantages)
            if np.any(np.abs(adv[mask]) > ADV_ATOL)
        ]

    @staticmethod
    def _trained_sequences(
        branches: Sequence[BranchResult], advantages: Sequence[Advantage]
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """``(tokens, sampled logprobs, sampled mask, per-token advantages)`` of every token sequence of each
        branch with finite advantages, cut after its last sampled token; sequences without a sampled token are
        skipped. A branch's advantage is one number or one per round (:meth:`BranchResult.turn_values`)."""
        for branch, adv in zip(branches, advantages):
            if isinstance(adv, (int, float)):
                if not math.isfinite(adv):
                    continue
                per_token = [np.full(len(q.tokens), float(adv)) for q in branch.sequences()]
            else:
                if not np.all(np.isfinite(adv)):
                    continue
                per_token = branch.turn_values([float(a) for a in adv])
            for sequence, values in zip(branch.sequences(), per_token):
                tokens, logprobs, mask = sequence.arrays()
                if mask.any():
                    end = int(np.flatnonzero(mask)[-1]) + 1
                    yield tokens[:end], logprobs[:end], mask[:end], values[:end]

    def _actor_datum(
        self, tokens: np.ndarray, logprobs: np.ndarray, advantages: np.ndarray, *, role: str = "actor"
    ) -> Datum:
        return make_datum(
            tokens.tolist(),
            logprobs.tolist(),
            advantages.astype(np.float32).tolist(),
            vocab_size=self.vocab_size(),
            role=role,
        )

    def reference_sampler(self) -> SamplingClient:
        """The KL anchor's reference policy (see :class:`~tempo_rl.training.config.KLConfig`).

        The first call (:meth:`train` makes it before the first update with ``kl.coef > 0``: after the warm
        start, or when a resumed run first switches the anchor on) saves the current weights as
        ``kl-reference`` and records the saved state in :attr:`TrainerState.kl_reference`. A resumed run loads
        that state, takes a sampling client over it and loads its current state back, through the
        ``TrainingClient`` protocol alone (the temporary local state file is removed).
        """
        if self._reference is None:
            tc = self.c.training_client
            if self.state.kl_reference is None:
                self.state.kl_reference = str(tc.save_state("kl-reference"))
                self.state.kl_reference_version = self.state.policy_version
                self._reference = tc.save_weights_and_get_sampling_client("kl-reference")
            else:
                current = str(tc.save_state("kl-resume-current"))
                tc.load_state(self.state.kl_reference)
                self._reference = tc.save_weights_and_get_sampling_client("kl-reference")
                tc.load_state(current)
                with contextlib.suppress(OSError):
                    Path(current).unlink(missing_ok=True)  # a local file; a remote URI is not a path here
        return self._reference

    async def anchored_actor_datums(
        self,
        branches: Sequence[BranchResult],
        advantages: Sequence[Advantage],
        timer: UpdateTimer | None = None,
    ) -> tuple[list[Datum], dict[str, float]]:
        """:meth:`actor_datums` with the KL anchor (``kl.coef > 0``), and the anchor's metrics.

        Every sampled token of every branch (zero advantage included) gets
        ``A'_t = A_n - coef * (log pi(a_t) - log pi_ref(a_t))``, with log pi the sampled logprob and log pi_ref
        from :meth:`reference_sampler`'s ``compute_logprobs``. Metrics: ``kl/ref_k1_mean``, the mean of
        ``log pi(a_t) - log pi_ref(a_t)`` over those tokens (nats per token; it estimates KL(pi || pi_ref)),
        and ``kl/anchored_tokens``. A sequence whose advantages all vanish (pi = pi_ref on a zero-advantage
        branch) yields no Datum. A sequence whose reference call fails (after the client's own retries) or
        returns no finite logprob for a sampled token is dropped and counted in ``kl/reference_failures``; the
        update goes on. With ``kl.coef = 0`` this is :meth:`actor_datums` and no metric.

        Before the first optimiser step after the reference was saved, pi *is* pi_ref: the log-ratio is 0
        exactly, so no reference call is made and ``kl/ref_k1_mean`` is 0. (Computed, it would be float
        rounding between two forward passes of the same weights, ~1e-9 nats, which on zero-advantage
        branches would become anchor-only Datums that Adam scales into full steps.)
        """
        coef = self.config.kl.coef
        if coef <= 0:
            return self.actor_datums(branches, advantages), {}
        if self.state.kl_reference_version == self.state.policy_version:
            datums = self.actor_datums(branches, advantages)
            n = sum(int(mask.sum()) for _, _, mask, _ in self._trained_sequences(branches, advantages))
            return datums, {
                "kl/ref_k1_mean": 0.0,
                "kl/anchored_tokens": float(n),
                "kl/reference_failures": 0.0,
            }
        t0 = time.perf_counter()
        reference = self.reference_sampler()
        items = list(self._trained_sequences(branches, advantages))
        self.cost.add_logprob_calls(len(tokens) for tokens, _, _, _ in items)
        ref_rows = await asyncio.gather(
            *(reference.compute_logprobs_async(tokens.tolist()) for tokens, _, _, _ in items),
            return_exceptions=True,
        )
        out: list[Datum] = []
        k1_sum, n_tokens, failures = 0.0, 0, 0
        for (tokens, logprobs, mask, adv), row in zip(items, ref_rows):
            if isinstance(row, BaseException):
                if not isinstance(row, Exception):  # cancellation, interrupts: not a fault of this sequence
                    raise row
                failures += 1
                continue
            ref = np.asarray([np.nan if x is None else x for x in row], dtype=np.float64)
            if ref.shape != (len(tokens),) or not np.all(np.isfinite(ref[mask])):
                failures += 1
                continue
            advs = kl_penalized_advantages(adv, logprobs.astype(np.float64), ref, coef=coef, mask=mask)
            k1_sum += float(np.sum(logprobs[mask] - ref[mask]))
            n_tokens += int(mask.sum())
            if np.any(np.abs(advs) > ADV_ATOL):  # none when pi = pi_ref on a zero-advantage branch
                out.append(self._actor_datum(tokens, logprobs, advs))
        if timer is not None:
            timer.add("reference", time.perf_counter() - t0)
        return out, {
            "kl/ref_k1_mean": k1_sum / n_tokens if n_tokens else math.nan,
            "kl/anchored_tokens": float(n_tokens),
            "kl/reference_failures": float(failures),
        }

    def critic_datums(self, estimates: CriticEstimates, advantages: Sequence[float]) -> list[Datum]:
        """One Datum per critic sample with a non-zero advantage (prompt = context, completion = trained)."""
        out = []
        for sample, adv in zip(estimates.samples, advantages):
            if not math.isfinite(adv) or abs(adv) <= ADV_ATOL or not sample.sequence.tokens:
                continue
            out.append(
                completion_datum(
                    sample.prompt_tokens,
                    sample.sequence.tokens,
                    sample.sequence.logprobs,
                    float(adv),
                    vocab_size=self.vocab_size(),
                    role="critic",
                )
            )
        return out

    # ---------------------------------------------------------------------------------------------- training

    def adam_params(self, critic: bool = False) -> AdamParams:
        """Adam settings from ``config.optim``; with ``critic`` (the critic's own weights) its step size is
        ``options.critic_learning_rate`` where set."""
        params = self.config.optim.adam()
        lr = self.options.critic_learning_rate
        return replace(params, learning_rate=lr) if critic and lr is not None else params

    def loss_config(self) -> dict[str, float] | None:
        """``loss_fn_config`` for PPO (ratio bounds); None for importance sampling."""
        o = self.config.optim
        if o.ppo_clip is not None:
            return {"clip_low_threshold": o.ppo_clip[0], "clip_high_threshold": o.ppo_clip[1]}
        return None

    def by_loss(self, datums: Sequence[Datum]) -> list[tuple[list[Datum], LossFn, dict[str, float] | None]]:
        """``datums`` split by their loss: policy-gradient Datums (``advantages``) under the policy loss (``optim.ppo_clip``), and
        cross-entropy Datums (``weights``: a log-loss critic's, :meth:`TempoTrainer.critic_level_datums`) under
        ``"cross_entropy"``; each non-empty part with its loss and loss config, in that order. Their
        ``forward_backward`` calls accumulate into one gradient before the optimiser step."""
        pg = [d for d in datums if "advantages" in d.loss_fn_inputs]
        ce = [d for d in datums if "advantages" not in d.loss_fn_inputs]
        parts: list[tuple[list[Datum], LossFn, dict[str, float] | None]] = []
        if pg:
            parts.append((pg, self.config.optim.loss_fn, self.loss_config()))
        if ce:
            parts.append((ce, "cross_entropy", None))
        return parts

    def train_step(
        self, datums: Sequence[Datum], timer: UpdateTimer | None = None, substeps: int | None = None
    ) -> dict[str, float]:
        """The update's Datums through ``forward_backward`` and ``optim_step``, then a new sampler.

        With ``optim.substeps = S`` (default 1) the Datums are dealt round-robin into ``min(S, len(datums))``
        minibatches (so actor and critic Datums mix in each), and every minibatch is its own chunked
        ``forward_backward`` calls followed by one ``optim_step``: S optimiser steps on one batch of samples.
        Minibatch ``s > 0`` is scored by weights that moved ``s`` steps since sampling; the losses' importance
        ratio ``exp(lp - lp_sampler)`` corrects for it (``optim.ppo_clip`` also clips it). The sampler is
        refreshed once, after the last step, so the policy version advances by one per update.

        With ``tempo.critic_weights = "own"`` the Datums tagged ``role = "critic"`` train the critic's own
        client and the rest the actor's, each in its own ``min(S, n)`` minibatch steps, and the sampler of
        each client that stepped is refreshed; ``train/optim_steps`` counts the steps of both. The policy
        version then counts the actor's steps only: a critic-only update leaves the policy, and so the store's
        ages, the prefix correction and the KL anchor's "pi is pi_ref" shortcut, where they were.

        ``substeps`` overrides ``optim.substeps`` for this update (TEMPO's warm-up: ``tempo.warmup_substeps``);
        with the critic's own weights it applies to the critic's Datums only, and the actor's keep
        ``optim.substeps`` (the warm-up's actor steps as GRPO's do).
        With no Datum (every group degenerate) no step is taken and the policy version does not change.
        Returns train metrics: datum counts, tokens, loss tokens (tokens with a non-zero advantage or
        cross-entropy weight), the summed loss over all minibatches and ``train/optim_steps``.
        """
        t0 = time.perf_counter()
        metrics: dict[str, float] = {
            "train/actor_datums": float(sum(1 for d in datums if d.tags.get("role") == "actor")),
            "train/critic_datums": float(sum(1 for d in datums if d.tags.get("role") == "critic")),
            "train/batch_size": float(len(datums)),
            "train/tokens": float(sum(len(d.model_input) for d in datums)),
            "train/loss_tokens": float(
                sum(
                    int(np.count_nonzero(d.loss_fn_inputs[key]))
                    for d in datums
                    for key in ("advantages", "weights")
                    if key in d.loss_fn_inputs
                )
            ),
            "train/optim_steps": 0.0,
        }
        self.cost.add_datums(datums)
        if datums:
            wanted = self.config.optim.substeps if substeps is None else substeps
            own = self.c.critic_training_client
            parts: list[tuple[TrainingClient, list[Datum]]] = [(self.c.training_client, list(datums))]
            if own is not None:  # tempo.critic_weights = "own": each set of weights gets its own Datums
                parts = [
                    (self.c.training_client, [d for d in datums if d.tags.get("role") != "critic"]),
                    (own, [d for d in datums if d.tags.get("role") == "critic"]),
                ]
            loss, steps = 0.0, 0
            stepped: list[TrainingClient] = []
            for client, part in parts:
                if part:
                    params = self.adam_params(critic=client is own)
                    n = wanted if own is None or client is own else self.config.optim.substeps
                    part_loss, part_steps = self.optimise(client, part, n, params)
                    loss, steps = loss + part_loss, steps + part_steps
                    stepped.append(client)
            if self.c.training_client in stepped:
                self.state.policy_version += 1
                self.c.sampler = self.c.training_client.save_weights_and_get_sampling_client(
                    f"policy-{self.state.policy_version:06d}"
                )
            if own is not None and own in stepped:
                self.c.critic_sampler = own.save_weights_and_get_sampling_client(
                    f"critic-{self.state.update:06d}"
                )
            metrics["train/loss"] = loss
            metrics["train/optim_steps"] = float(steps)
        if timer is not None:
            timer.add("training", time.perf_counter() - t0)
        return metrics

    def optimise(
        self, client: TrainingClient, datums: Sequence[Datum], substeps: int, params: AdamParams
    ) -> tuple[float, int]:
        """``min(substeps, len(datums))`` optimiser steps (Adam ``params``) of ``client`` on ``datums`` dealt
        round-robin into as many minibatches, each through chunked ``forward_backward`` calls; returns (summed
        loss, steps)."""
        chunk = self.config.optim.chunk_datums
        steps = min(substeps, len(datums))
        loss = 0.0
        for s in range(steps):
            minibatch = list(datums[s::steps])
            for batch, loss_fn, loss_config in self.by_loss(minibatch):
                for i in range(0, len(batch), chunk):
                    out = client.forward_backward(batch[i : i + chunk], loss_fn, loss_config)
                    loss += float(out.loss)
            client.optim_step(params)
        return loss, steps

    def copy_policy_to_critic(self) -> None:
        """With ``tempo.critic_weights = "own"``: the critic's weights (and optimiser state) become a copy of the
        policy's, and its sampler serves them; the run calls this once, after the supervised warm start, which
        also teaches the critic's answer format. Without a critic of its own it does nothing."""
        own = self.c.critic_training_client
        if own is None:
            return
        copied = Path(self.c.training_client.save_state("critic-init"))
        own.load_state(str(copied))
        copied.unlink(
            missing_ok=True
        )  # loaded: the local backend's file (the only backend "own" runs on) goes
        self.c.critic_sampler = own.save_weights_and_get_sampling_client("critic-init")

    def critic_sampler(self) -> SamplingClient:
        """The sampling client the critic answers with: its own weights' (``tempo.critic_weights = "own"``),
        else the policy's."""
        return self.c.critic_sampler if self.c.critic_sampler is not None else self.c.sampler

    def write_trajectories(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Append trajectory records to the run's JSONL (no-op without a writer)."""
        if self._write_trajectories is not None and records:
            self._write_trajectories(records)

    # ---------------------------------------------------------------------------------------------- eval

    async def evaluate(self, episodes: int, *, updates_done: int | None = None) -> dict[str, float]:
        """Success of the current policy on the first ``episodes`` evaluation games (full episodes, one branch
        each, at ``sampling.eval_temperature``, sampled with :meth:`eval_seed` of ``updates_done``, default
        ``state.update``). Moves neither the training data cursor nor the trainer RNG."""
        env_cfg = self.config.env
        games = [env_cfg.eval_game(j) for j in range(episodes)]
        starts, _failed = await self.fresh_starts(1, games)
        try:
            results, stats = await self.rollout(
                starts,
                self.rollout_settings(
                    segment_rounds=None,
                    temperature=self.config.sampling.eval_temperature,
                    seed=self.eval_seed(self.state.update if updates_done is None else updates_done),
                ),
            )
        finally:
            self.close_envs(starts)
        self.cost.add_rollout(stats, evaluation=True)
        branches = [row[0] for row in results]
        return {
            "eval/success_rate": float(np.mean([b.won for b in branches])) if branches else math.nan,
            "eval/return_mean": float(np.mean([b.segment_reward for b in branches]))
            if branches
            else math.nan,
            "eval/steps_mean": float(np.mean([b.rounds for b in branches])) if branches else math.nan,
            # steps an episode spent on unreadable or inadmissible actions (where the env lists its actions)
            "eval/invalid_actions_mean": float(np.mean([b.invalid_actions for b in branches]))
            if branches
            else math.nan,
            "eval/valid_tool_call_rate": stats.valid_tool_calls / stats.turns if stats.turns else math.nan,
            "eval/episodes": float(len(branches)),
        }
