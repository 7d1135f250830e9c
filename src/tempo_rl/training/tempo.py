"""The TEMPO trainer: critic warm-up on Monte Carlo returns, then macro-step TD updates.

**Warm-up update** (until the hand-over, at most ``tempo.warmup_updates``):

* ``warmup_games_per_batch`` fresh games x N branches play full episodes (up to T rounds);
* the macro-step boundaries (H, 2H, ... strictly before the episode's end) get the Monte Carlo target
  ``G_t = sum_{u >= t} r_u`` (:func:`tempo_rl.signals.monte_carlo_returns`); each episode contributes at most
  ``warmup_states_per_episode`` of them, drawn uniformly, so that long failed episodes do not out-weigh short
  successful ones (the reference's bias); ``"every_round"`` takes every round's state instead;
* each game's start state (round 0, the same state for its N branches) is one more boundary state, with the
  mean of its branches' returns ``G_0 = mean_n sum_u r_u^(n)`` as target: one Monte Carlo estimate of
  ``V(s_0)`` over N episodes instead of N copies of the state against single 0/1 outcomes;
* K critic samples on each boundary state, rewards ``-|V_k - G_t| / R_max`` (or Brier), centred over K;
* the actor trains on the same episodes as GRPO would: each game's N branches are a group and branch n gets
  ``A_n = R_n - mean_n R`` (``tempo.warmup_trains_actor``; with the KL anchor ``kl.coef > 0`` its tokens'
  advantages are penalised as in TD, see :class:`~tempo_rl.training.config.KLConfig`); critic and actor Datums
  in one optimiser step (``tempo.warmup_substeps`` minibatch steps);
* with ``tempo.warmup_replay`` the critic's examples are kept, and its step also rehearses as many earlier ones
  (drawn without replacement) as this batch brings;
* the hand-over gate: the critic's correlation with this batch's Monte Carlo targets, read *before* it trains
  on them (``critic/value_corr``), averaged over the last ``tempo.handover_window`` warm-up updates; TD begins
  once it reaches ``tempo.handover_corr``, or after ``tempo.warmup_updates`` (:func:`handover_reason`);
* every non-terminal macro-step boundary (rounds H, 2H, ...) also goes into the StateStore (the reference
  discarded them).

**TD update**:

* start states = ``round(fresh_share * states_per_batch)`` fresh games (at least one when the share is > 0)
  plus stored states sampled uniformly (topped up with fresh games while the store is small); each stored state
  is restored into N verified branches (a divergence quarantines it and drops it, counted);
* N branches x at most H rounds each (:func:`tempo_rl.rollout.run_branches`);
* endpoint values ``V_hat_n`` = mean of E critic samples for truncated branches, 0 for terminated (and
  token-budget) branches; an endpoint whose E samples all fail to parse is dropped or substituted (config);
* ``R_n = r_n + V_hat_n``, ``G = mean_n R_n``, ``A_n = R_n - G`` (:func:`tempo_rl.signals.td_batch`); degenerate groups
  (all ``|A_n| <= 1e-12``) and zero-advantage branches produce no Datum (with ``kl.coef > 0`` every kept
  branch does, its tokens' advantages ``A_n - coef * (log pi - log pi_ref)``);
* K critic samples on each start state, rewarded against its G and centred over K; with ``tempo.warmup_replay``
  the critic also rehearses as many of the warm-up's Monte Carlo examples (drawn without replacement) as it has
  bootstrapped ones, so that its values stay tied to observed returns while it fits its own targets;
* actor + critic Datums through one chunked ``forward_backward`` pass and ONE ``optim_step`` (or, with
  ``optim.substeps = S``, S minibatches of mixed actor and critic Datums, one step each);
* the macro-boundary endpoints (within T and the token budget) go into the store with the policy version that
  sampled them; states older than ``store.max_age_versions`` are evicted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tempo_rl.backends.types import Datum
from tempo_rl.critic.base import CriticEstimates, CriticQuery, endpoint_value
from tempo_rl.critic.levels import two_hot
from tempo_rl.envs.restore import snapshot_prefix
from tempo_rl.rollout.branches import BranchResult
from tempo_rl.rollout.datums import sft_datum
from tempo_rl.rollout.renderer import PromptWindow
from tempo_rl.signals import (
    TDBatch,
    critic_rewards,
    degenerate_groups,
    group_advantages,
    monte_carlo_returns,
    td_batch,
)
from tempo_rl.training.config import TempoConfig
from tempo_rl.training.metrics import critic_metrics, nanmean, rollout_metrics, td_metrics
from tempo_rl.training.prefix_correction import (
    PrefixCorrection,
    PrefixWeights,
    endpoint_spans,
    sampled_spans,
)
from tempo_rl.training.trainer import MacroStepTrainer, UpdateTimer
from tempo_rl.training.types import EndpointValues, StartState, StoredState

__all__ = ["TempoTrainer", "choose_starts", "endpoint_state"]


def warmup_actor_advantages(
    results: Sequence[Sequence[BranchResult]], trains_actor: bool
) -> tuple[list[BranchResult], list[float], float]:
    """The warm-up's played branches (errors dropped), their actor advantages and the degenerate-group rate.

    A warm-up game's N branches are full episodes from one start: GRPO's group. With ``trains_actor`` each
    branch gets its group's GRPO advantage ``A_n = R_n - mean_n R`` (``R_n`` its episode return; exactly what
    ``algorithm = "grpo"`` computes on the same batch); otherwise 0 (the KL anchor alone trains, if on)."""
    played: list[BranchResult] = []
    advantages: list[float] = []
    degenerate: list[bool] = []
    for row in results:
        kept = [b for b in row if b.end_reason != "error"]
        if not kept:
            continue
        returns = np.array([b.segment_reward for b in kept], dtype=np.float64)
        adv = np.asarray(group_advantages(returns)) if trains_actor else np.zeros(len(kept))
        degenerate.append(bool(np.all(np.abs(adv) <= 1e-12)))
        played.extend(kept)
        advantages.extend(float(a) for a in adv)
    return played, advantages, float(np.mean(degenerate)) if degenerate else math.nan


def bootstraps(branch: BranchResult, tempo: TempoConfig) -> bool:
    """Whether a branch's endpoint is valued by the critic: at a macro boundary only. At the episode step limit
    the task's step budget is spent, so nothing follows (value 0), as in the Monte Carlo warm-up targets and
    evaluation."""
    return branch.end_reason == "macro_boundary"


def endpoint_values(
    results: Sequence[Sequence[BranchResult]],
    queried: list[tuple[int, int]],
    estimates: Sequence[CriticEstimates],
    tempo: TempoConfig,
) -> EndpointValues:
    """Assemble :class:`EndpointValues` from the branches and the E critic samples of each queried endpoint
    (``V_hat = mean of the parsed samples``; an endpoint with none is dropped or valued
    ``tempo.unparsed_endpoint`` when that is a number)."""
    shape = (len(results), max((len(row) for row in results), default=0))
    seg, values = np.zeros(shape), np.zeros(shape)
    bootstrap, mask = np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool)
    for i, row in enumerate(results):
        for j, b in enumerate(row):
            seg[i, j], mask[i, j], bootstrap[i, j] = (
                b.segment_reward,
                b.end_reason != "error",
                bootstraps(b, tempo),
            )
    unparsed = 0
    for (i, j), est in zip(queried, estimates):
        v = endpoint_value(est)
        if math.isnan(v):
            unparsed += 1
            if tempo.unparsed_endpoint == "drop":
                mask[i, j] = False
                continue
            v = float(tempo.unparsed_endpoint)
        values[i, j] = v
    return EndpointValues(seg, values, bootstrap, mask, queried, unparsed)


def choose_starts(tempo: TempoConfig, store_size: int) -> tuple[int, int]:
    """``(fresh games, stored states)`` for one TD update: ``round(fresh_share * states_per_batch)`` fresh
    (at least one when the share is > 0), the rest from the store while it has them, topped up with fresh."""
    n = tempo.states_per_batch
    n_fresh = round(tempo.fresh_share * n)
    if tempo.fresh_share > 0:
        n_fresh = max(1, n_fresh)
    n_stored = max(0, min(n - n_fresh, store_size))
    return n - n_stored, n_stored


def endpoint_state(
    start: StoredState,
    branch: BranchResult,
    rounds: int,
    *,
    tempo: TempoConfig,
    max_tokens: int,
    max_trajectory_tokens: int,
    policy_version: int,
) -> StoredState | None:
    """The state of ``branch`` after ``rounds`` rounds of its segment, as a child of ``start``; None when it
    cannot be continued (at T, or its prefix leaves no room for one more turn of ``max_tokens`` within the
    token budget)."""
    depth = start.snapshot.round_index + rounds
    if depth >= tempo.max_rounds:
        return None
    # the token sequence the state's prompt lives in: after a chat-template restart, the restarted one
    seq_index = branch.turn_seq[rounds] if rounds < len(branch.turn_seq) else branch.restarts
    sequence = branch.sequence(seq_index)
    end = branch.turn_starts[rounds] if rounds < len(branch.turn_starts) else len(sequence.tokens)
    if end + max_tokens > max_trajectory_tokens:
        return None
    if seq_index == 0:  # the sequence begins with the start's prefix: its spans carry over
        spans = endpoint_spans(start, sequence, end, policy_version)
    else:  # a fresh render: earlier turns are context now; only this sequence's sampled tokens count
        spans = sampled_spans(sequence.sampled_mask, sequence.logprobs, policy_version, end=end)
    snapshot = branch.snapshot
    if rounds < branch.rounds:
        snapshot = snapshot_prefix(
            snapshot, depth, last_admissible=branch.observations[rounds - 1].admissible_actions
        )
    window = branch.windows[rounds] if rounds < len(branch.windows) else PromptWindow.of(branch.prompt)
    return start.child(
        snapshot,
        token_prefix=sequence.tokens[:end],
        prompt=window,
        spans=spans,
        policy_version=policy_version,
        macro_steps=max(1, rounds // tempo.macro_rounds),
        privileged_state=branch.privileged_state_at(rounds, start.privileged_state),
    )


def window_reading(readings: Sequence[float | None], window: int) -> float:
    """The mean of the last ``window`` readings; NaN while fewer exist or any of them is undefined (None)."""
    last = list(readings[-window:])
    if len(last) < window or any(r is None for r in last):
        return math.nan
    return float(np.mean([float(r) for r in last if r is not None]))


def handover_reason(done: int, reading: float, tempo: TempoConfig) -> str | None:
    """Whether TEMPO hands over to TD after ``done`` warm-up updates: ``"gate"`` when ``tempo.handover_corr``
    is set and the window's reading (:func:`window_reading`) reaches it, ``"cap"`` at ``tempo.warmup_updates``,
    else None."""
    if tempo.handover_corr is not None and math.isfinite(reading) and reading >= tempo.handover_corr:
        return "gate"
    return "cap" if done >= tempo.warmup_updates else None


def critic_signals(
    estimates: Sequence[CriticEstimates],
    targets: Sequence[float],
    tempo: TempoConfig,
    *,
    centred: bool = True,
) -> tuple[list[tuple[CriticEstimates, list[float]]], float]:
    """Critic rewards ``-|V_k - G| / R_max`` (or Brier) against each state's target, centred over its K samples
    (or, with ``centred=False``, the rewards themselves, so samples that agree on a wrong value still learn).

    Returns each non-degenerate state's estimates with its K advantages, and the degenerate-group rate.
    """
    if not estimates:
        return [], math.nan
    _rewards, adv, degenerate = _critic_signal_arrays(estimates, targets, tempo, centred)
    kept = [
        (est, adv[i, : est.k].tolist())
        for i, est in enumerate(estimates)
        if not degenerate[i] and est.samples
    ]
    return kept, float(np.mean(degenerate))


def _critic_signal_arrays(
    estimates: Sequence[CriticEstimates], targets: Sequence[float], tempo: TempoConfig, centred: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rewards, advantages, degenerate)``: ``(S, K)`` rewards and advantages (0 past a state's own K) and
    the ``(S,)`` degenerate-group flags of :func:`critic_signals`."""
    k = max(e.k for e in estimates)
    values = np.full((len(estimates), k), np.nan)
    mask = np.zeros((len(estimates), k), dtype=bool)
    for i, est in enumerate(estimates):
        values[i, : est.k] = est.values
        mask[i, : est.k] = True
    rewards = critic_rewards(
        values,
        np.asarray(targets, dtype=np.float64),
        r_max=tempo.r_max,
        error=tempo.error,
        failure_reward=-1.0,  # an unparsable answer scores as the worst parsed one (error R_max)
    )
    adv = group_advantages(rewards, mask=mask) if centred else np.where(mask, rewards, 0.0)
    degenerate = np.asarray(degenerate_groups(adv, mask=mask), dtype=bool)
    return rewards, adv, degenerate


def log_loss_critic(estimates: Sequence[CriticEstimates]) -> bool:
    """True when the states' estimates carry their scored answers (a critic that reads its value from its
    answers' probabilities, ``sampling.critic_answer = "expected"``; a state whose prompt did not fit has
    none, and no samples either): the critic is then trained by the log-loss of its answer distribution
    (:meth:`TempoTrainer.critic_level_datums`), not by rewards on its K samples."""
    return any(e.answers for e in estimates)


def answer_weights(estimates: CriticEstimates, target: float, r_max: float) -> list[float]:
    """``w(G)``: the target as weights on the grid's answers, :func:`~tempo_rl.critic.levels.two_hot`."""
    return two_hot(target, len(estimates.answers), r_max).tolist()


def critic_examples(
    estimates: Sequence[CriticEstimates], targets: Sequence[float], weight: float, tempo: TempoConfig
) -> list[dict[str, Any]]:
    """What the log-loss critic trains on: for each state with a finite target ``G`` and each answer level ``i``
    with ``weight * w_i(G) > 0``, ``{"prompt": prompt tokens, "completion": answer tokens, "weight": weight *
    w_i(G)}`` (``w`` = :func:`answer_weights`); JSON-serialisable, so a warm-up replay can keep them."""
    examples: list[dict[str, Any]] = []
    for est, g in zip(estimates, targets):
        if not math.isfinite(g) or not est.answers:
            continue
        for answer, w in zip(est.answers, answer_weights(est, g, tempo.r_max)):
            if w * weight > 0.0:
                examples.append(
                    {
                        "prompt": [int(x) for x in answer.prompt_tokens],
                        "completion": [int(x) for x in answer.sequence.tokens],
                        "weight": weight * w,
                    }
                )
    return examples


def critic_records(
    estimates: Sequence[CriticEstimates],
    targets: Sequence[float],
    tempo: TempoConfig,
    *,
    centred: bool = True,
    weight: float = 1.0,
) -> list[dict[str, Any]]:
    """What ``trajectories.jsonl`` keeps of each state's K critic samples (read by ``tempo-rl report``).

    Per state: ``target`` (its G), ``degenerate`` (all K advantages ~0), ``trained`` (``tempo.train_critic`` on
    and not degenerate), ``prompt_too_long``, ``omitted_turns``, and per sample its completion ``text``, the
    parsed ``value`` (NaN when unparsed), the parse ``status``, the ``reward`` ``-|V_k - G| / R_max`` (or
    Brier, or the failure reward) and the ``advantage`` the critic Datum carries (``weight`` x the reward
    centred over K, as in :func:`critic_signals`). A log-loss critic (:func:`log_loss_critic`) trains its
    answers, not its samples: its samples' advantages are 0, it is never degenerate, and ``answers`` lists
    each answer of the grid with its ``weight``, ``weight`` x :func:`answer_weights` (its cross-entropy weight).
    """
    if not estimates:
        return []
    rewards, adv, degenerate = _critic_signal_arrays(estimates, targets, tempo, centred)
    records = []
    for i, (est, target) in enumerate(zip(estimates, targets)):
        log_loss = bool(est.answers)
        record: dict[str, Any] = {
            "target": float(target),
            "degenerate": bool(degenerate[i]) and not log_loss,
            "trained": bool(tempo.train_critic and (log_loss or not degenerate[i]) and est.samples),
            "prompt_too_long": bool(est.prompt_too_long),
            "omitted_turns": int(est.omitted_turns),
            "samples": [
                {
                    "text": sample.sequence.text,
                    "value": float(est.values[k]),
                    "status": sample.status.value,
                    "reward": float(rewards[i, k]),
                    "advantage": 0.0 if log_loss else float(weight * adv[i, k]),
                }
                for k, sample in enumerate(est.samples)
            ],
        }
        if log_loss:
            w = (
                answer_weights(est, target, tempo.r_max)
                if math.isfinite(target)
                else [0.0] * len(est.answers)
            )
            record["answers"] = [
                {"text": a.sequence.text, "value": a.value, "weight": weight * x}
                for a, x in zip(est.answers, w)
            ]
        records.append(record)
    return records


def start_record(start: StartState, critic: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``start`` field of the first record of each start state: its task, the actions that led to it, its
    current observation, its parent state, and its critic samples (:func:`critic_records`, or None)."""
    state = start.state
    return {
        "task": state.task,
        "history_actions": [str(a) for a, _ in state.history],
        "observation": state.snapshot.last_observation,
        "parent_id": state.parent_id,
        "critic": critic,
    }


def trajectory_record(
    index: int, phase: str, start: StartState, branch: BranchResult, ret: float, /, **extra: Any
) -> dict[str, Any]:
    """One ``trajectories.jsonl`` record of a played branch (each action with the observation it got and
    whether it was invalid; the start's depth ``start_round``, macro-steps and sampling policy version)."""
    return {
        "update": index,
        "phase": phase,
        "game_id": start.state.game_id,
        "start_id": start.state.id,
        "start_round": start.state.snapshot.round_index,
        "fresh": start.fresh,
        "start_policy_version": start.state.policy_version,
        "start_macro_index": start.state.macro_index,
        "actions": list(branch.actions),
        "observations": [o.text for o in branch.observations],
        "invalid_turns": list(branch.invalid_turns),
        "rewards": list(branch.rewards),
        "invalid_actions": branch.invalid_actions,
        "end_reason": branch.end_reason,
        "won": branch.won,
        "return": ret,
        "error": branch.error,
        **extra,
    }


def td_records(
    index: int,
    starts: Sequence[StartState],
    results: Sequence[Sequence[BranchResult]],
    batch: TDBatch,
    endpoints: EndpointValues,
    *,
    policy_version: int | None = None,
    start_critic: Mapping[int, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The trajectory records of a TD update: each branch with its return, endpoint value and advantage; the
    first branch of each start also carries :func:`start_record` (with ``start_critic[i]``, the critic
    samples on start ``i``, when given)."""
    critic = start_critic or {}
    return [
        trajectory_record(
            index,
            "td",
            starts[i],
            b,
            float(batch.returns[i, j]),
            branch=j,
            policy_version=policy_version,
            endpoint_value=float(endpoints.values[i, j]),
            advantage=float(batch.advantages[i, j]),
            kept=bool(batch.mask[i, j]),
            **({"start": start_record(starts[i], critic.get(i))} if j == 0 else {}),
        )
        for i, row in enumerate(results)
        for j, b in enumerate(row)
    ]


class TempoTrainer(MacroStepTrainer):
    """TEMPO: warm-up updates until the critic has earned the hand-over (:func:`handover_reason`, at most
    ``tempo.warmup_updates``), then ``tempo.td_updates`` TD updates."""

    def warmup_length(self) -> int:
        """Warm-up updates: where the gate handed over, else the cap ``tempo.warmup_updates``."""
        handed = self.state.handover_update
        return self.config.tempo.warmup_updates if handed is None else handed

    def total_updates(self) -> int:
        return self.warmup_length() + self.config.tempo.td_updates

    async def update(self, index: int) -> dict[str, float]:
        if index < self.warmup_length():
            metrics = await self.warmup_update(index)
            metrics["train/phase"] = 0.0
            metrics.update(self.gate(index, metrics.get("critic/value_corr", math.nan)))
        else:
            metrics = await self.td_update(index)
            metrics["train/phase"] = 1.0
        metrics.update(self.store_metrics())
        return metrics

    def gate(self, index: int, reading: float) -> dict[str, float]:
        """Record warm-up update ``index``'s critic reading and hand over to TD when :func:`handover_reason`
        says so; the metrics ``tempo/handover_reading`` (the window's mean) and, at the hand-over,
        ``tempo/handover`` = 1 with ``tempo/handover_at_cap`` (1: the cap, 0: the gate)."""
        t = self.config.tempo
        self.state.critic_readings.append(reading if math.isfinite(reading) else None)
        window = window_reading(self.state.critic_readings, t.handover_window)
        metrics = {"tempo/handover_reading": window}
        reason = handover_reason(index + 1, window, t)
        if reason is not None:
            self.state.handover_update = index + 1
            metrics.update({"tempo/handover": 1.0, "tempo/handover_at_cap": float(reason == "cap")})
        return metrics

    def store_metrics(self) -> dict[str, float]:
        """Store size and mean age (policy versions), from the store's own stats."""
        stats = self.c.store.stats(self.state.policy_version)
        return {
            "store/size": float(stats.get("size", len(self.c.store))),
            "store/mean_age": float(stats.get("mean_age", math.nan)),
            "store/games": float(stats.get("games", math.nan)),
            "store/bytes": float(stats.get("bytes", math.nan)),
        }

    def endpoint_state(self, start: StoredState, branch: BranchResult, rounds: int) -> StoredState | None:
        """:func:`endpoint_state` with this run's settings and the current policy version."""
        s = self.config.sampling
        return endpoint_state(
            start,
            branch,
            rounds,
            tempo=self.config.tempo,
            max_tokens=s.max_tokens,
            max_trajectory_tokens=s.max_trajectory_tokens,
            policy_version=self.state.policy_version,
        )

    def endpoint_states(
        self, starts: Sequence[StartState], results: Sequence[Sequence[BranchResult]]
    ) -> dict[tuple[int, int], StoredState]:
        """The endpoint of branch ``j`` of start ``i`` as a state, keyed ``(i, j)``, for every endpoint that can
        be continued (:meth:`endpoint_state`: a macro boundary before T with room for another turn). Built once
        per TD update: the critic's queries start from them and the store keeps them."""
        ends = (
            ((i, j), self.endpoint_state(starts[i].state, b, b.rounds))
            for i, row in enumerate(results)
            for j, b in enumerate(row)
            if b.end_reason == "macro_boundary"
        )
        return {key: state for key, state in ends if state is not None}

    def endpoint_query(
        self, start: StoredState, branch: BranchResult, end: StoredState | None
    ) -> CriticQuery:
        """The critic's view of ``branch``'s endpoint (:meth:`critic_query`), with ``end``, the endpoint as a
        state (:meth:`endpoint_states`; None where it cannot be continued), as the actor's start, so that a
        critic that plays the policy on continues the branch's own token prefix."""
        return dataclasses.replace(self.critic_query(start, branch), actor_start=end)

    def critic_datums_of(
        self, estimates: Sequence[CriticEstimates], targets: Sequence[float], *, td: bool
    ) -> tuple[list[Datum], float]:
        """The critic's Datums against ``targets`` and the degenerate-group rate (nothing when
        ``tempo.train_critic`` is off). The rewards are centred over the K samples of each state (TEMPO's group
        mean), at weight 1."""
        t = self.config.tempo
        if not t.train_critic:
            return [], math.nan
        centred, weight = self.critic_centring(td=td)
        if log_loss_critic(estimates):
            return self.critic_level_datums(estimates, targets, weight), 0.0
        kept, degenerate = critic_signals(estimates, targets, t, centred=centred)
        datums = [d for est, adv in kept for d in self.critic_datums(est, [weight * a for a in adv])]
        return datums, degenerate

    def critic_level_datums(
        self, estimates: Sequence[CriticEstimates], targets: Sequence[float], weight: float
    ) -> list[Datum]:
        """The log-loss Datums of a critic that reads its value from its answers' probabilities: for each state
        and each level ``i`` of the grid with ``w_i(G) > 0``, a cross-entropy Datum on its answer's tokens with
        weight ``weight * w_i(G)`` (``w`` = :func:`~tempo_rl.critic.levels.two_hot`), so that the step descends
        ``weight * (-sum_i w_i log p(answer_i))``, the cross-entropy against the target. Cross-entropy, not an
        importance-weighted surrogate: with every weight positive, the surrogate's ratio ``p / p_sampler``
        would grow without bound over an update's optimiser steps (measured on the main job: a warm-up update
        whose loss was 19 times the others', after which the critic's error went 0.04 -> 0.40)."""
        return [
            self.critic_example_datum(e)
            for e in critic_examples(estimates, targets, weight, self.config.tempo)
        ]

    def critic_example_datum(self, example: Mapping[str, Any]) -> Datum:
        """The cross-entropy Datum of one :func:`critic_examples` entry (its answer's tokens at its weight)."""
        return sft_datum(
            example["prompt"],
            example["completion"],
            weight=float(example["weight"]),
            vocab_size=self.vocab_size(),
            role="critic",
        )

    def critic_centring(self, *, td: bool) -> tuple[bool, float]:
        """``(centred, weight)`` of the critic's advantages: centred over the K samples of a state (TEMPO's
        group mean), at weight 1, in the warm-up and in TD alike."""
        return True, 1.0

    # --------------------------------------------------------------------------------------------- warm-up

    async def warmup_update(self, index: int) -> dict[str, float]:
        """One critic-only warm-up update on full episodes (see the module docstring)."""
        t = self.config.tempo
        timer = UpdateTimer()
        with timer.part("restore"):
            games = [self.next_fresh_game() for _ in range(t.warmup_games_per_batch)]
            starts, _failed = await self.fresh_starts(t.branches, games)
        results, rstats = await self.play(starts, segment_rounds=None, timer=timer)
        boundary, stored, trajectories, slots = self.warmup_boundaries(index, starts, results)
        with timer.part("sampling"):
            estimates = await self.estimate_many(
                [self.critic_query(s) for s, _ in boundary], t.critic_samples
            )
        targets = [g for _, g in boundary]
        for slot, record in zip(slots, critic_records(estimates, targets, t)):
            slot["critic"] = record
        metrics = critic_metrics(estimates, targets)  # before the step: the error of the policy that sampled
        if t.warmup_replay and t.train_critic:  # this update's examples and as many earlier ones
            fresh = critic_examples(estimates, targets, 1.0, t)
            rehearsed = self.rehearsal_examples(len(fresh))
            self.state.critic_replay.extend(fresh)
            datums = [self.critic_example_datum(e) for e in (*rehearsed, *fresh)]
            critic_degenerate = 0.0  # log-loss Datums (the config requires them): no group to degenerate
            metrics["warmup/replayed_datums"] = float(len(rehearsed))
        else:
            datums, critic_degenerate = self.critic_datums_of(estimates, targets, td=False)
        if t.train_actor:
            played, advantages, degenerate = warmup_actor_advantages(results, t.warmup_trains_actor)
            anchored, kl_metrics = await self.anchored_actor_datums(played, advantages, timer)
            datums.extend(anchored)
            metrics.update(kl_metrics)
            metrics["actor/degenerate_group_rate"] = degenerate
        metrics.update(self.train_step(datums, timer, substeps=t.warmup_substeps))
        episodes = [b for row in results for b in row if b.end_reason != "error"]
        metrics.update(
            {
                "warmup/success_rate": nanmean([b.won for b in episodes]),
                "warmup/steps_mean": nanmean([b.rounds for b in episodes]),
                "warmup/boundary_states": float(len(boundary)),
                "warmup/stored_states": float(stored),
                "target/mc_return_mean": nanmean(targets),
                "critic/degenerate_group_rate": critic_degenerate,
                **rollout_metrics(rstats),
                **timer.metrics(),
            }
        )
        self.write_trajectories(trajectories)
        return metrics

    def warmup_boundaries(
        self, index: int, starts: Sequence[StartState], results: Sequence[Sequence[BranchResult]]
    ) -> tuple[list[tuple[StoredState, float]], int, list[dict[str, Any]], list[dict[str, Any]]]:
        """The warm-up's boundary states with their Monte Carlo targets ``G_t = sum_{u >= t} r_u``, how many
        non-terminal boundary states went into the store, the trajectory records, and for each boundary state
        the dict (inside a record) that receives its critic samples: a branch's ``boundaries`` entry
        ``{"round", "target"}``, or the start's ``start`` field (:func:`start_record`) on its first record.

        With ``tempo.warmup_states_per_episode = m`` an episode contributes at most m of its macro-step
        boundaries (drawn uniformly) as critic targets; with ``"every_round"`` every round strictly before its
        end. Every H rounds strictly before its end is a macro-step boundary, and
        every one goes into the store. Each start state is one more critic state, against the mean of its
        episodes' returns.
        """
        t = self.config.tempo
        boundary: list[tuple[StoredState, float]] = []
        slots: list[dict[str, Any]] = []
        stored = 0
        trajectories = []
        version = self.state.policy_version
        for start, row in zip(starts, results):
            start_returns: list[float] = []
            first: dict[str, Any] | None = None
            for j, branch in enumerate(row):
                if branch.end_reason == "error":
                    continue
                returns = monte_carlo_returns(np.asarray(branch.rewards, dtype=np.float64))
                start_returns.append(float(returns[0]) if branch.rounds else 0.0)
                boundaries = range(t.macro_rounds, branch.rounds, t.macro_rounds)
                m = t.warmup_states_per_episode
                stride = 1 if m == "every_round" else t.macro_rounds
                candidates = list(range(stride, branch.rounds, stride))
                chosen = (
                    candidates
                    if not isinstance(m, int) or m >= len(candidates)
                    else sorted(self.rng.choice(candidates, size=m, replace=False).tolist())
                )
                # each round's state built once, for the store and for the critic
                states = {r: self.endpoint_state(start.state, branch, r) for r in {*boundaries, *chosen}}
                for r in boundaries:
                    state = states[r]
                    if state is not None and self.c.store.add(state):
                        stored += 1
                marks: list[dict[str, Any]] = []
                for r in chosen:
                    state = states[r]
                    if state is not None:
                        boundary.append((state, float(returns[r])))
                        marks.append({"round": r, "target": float(returns[r])})
                slots.extend(marks)
                record = trajectory_record(
                    index,
                    "warmup",
                    start,
                    branch,
                    start_returns[-1],
                    branch=j,
                    policy_version=version,
                    boundaries=marks,
                )
                if first is None:
                    first = record["start"] = start_record(start)
                trajectories.append(record)
            if (
                start_returns and first is not None
            ):  # the start once, against the mean of its branches' returns
                boundary.append((start.state, float(np.mean(start_returns))))
                slots.append(first)
        return boundary, stored, trajectories, slots

    # --------------------------------------------------------------------------------------------- TD

    async def td_update(self, index: int) -> dict[str, float]:
        """One TEMPO TD update (see the module docstring)."""
        t = self.config.tempo
        timer = UpdateTimer()
        version = self.state.policy_version  # the policy that samples this update
        with timer.part("restore"):
            starts, divergences = await self.td_starts()
        results, rstats = await self.play(starts, segment_rounds=t.macro_rounds, timer=timer)
        ends = self.endpoint_states(starts, results)  # sampled by the version before the step
        endpoints = await self.value_endpoints(starts, results, ends, timer)
        batch = td_batch(endpoints.segment_rewards, endpoints.values, endpoints.bootstrap, endpoints.mask)
        correction, prefix = await self.td_prefix_weights(starts, timer)
        critic_idx, start_estimates, targets = await self.value_starts(starts, batch, timer)
        actor_advantages = correction.apply(batch.advantages, prefix)
        actor, kl_metrics = await self.td_actor_datums(results, batch, actor_advantages, timer)
        critic, critic_degenerate = self.critic_datums_of(start_estimates, targets, td=True)
        rehearsed = [self.critic_example_datum(e) for e in self.rehearsal_examples(len(critic))]
        critic.extend(rehearsed)
        new_states = [state for (i, j), state in ends.items() if batch.mask[i, j]]
        metrics = {**critic_metrics(start_estimates, targets), **self.train_step([*actor, *critic], timer)}
        with timer.part("store"):
            added = sum(1 for s in new_states if self.c.store.add(s))
            self.c.store.evict_stale(self.state.policy_version)
        metrics.update(
            **kl_metrics,
            **prefix.metrics(),
            **td_metrics(starts, results, batch, endpoints),
            **self.td_store_metrics(starts, added, divergences),
            **{
                "critic/degenerate_group_rate": critic_degenerate,
                "td/rehearsed_datums": float(len(rehearsed)),
            },
            **rollout_metrics(rstats),
            **timer.metrics(),
        )
        critic_by_start = dict(zip(critic_idx, self.start_critic_records(start_estimates, targets)))
        self.write_trajectories(
            td_records(
                index, starts, results, batch, endpoints, policy_version=version, start_critic=critic_by_start
            )
        )
        return metrics

    def rehearsal_examples(self, n: int) -> list[dict[str, Any]]:
        """``n`` of the replay's Monte Carlo critic examples, drawn without replacement (all of them, in order,
        when it holds at most ``n``). A critic step fits as many of them as it has new examples: a warm-up step
        this update's Monte Carlo ones, a TD step its bootstrapped ones. So the critic's values stay tied to
        every observed return, and the trained tokens grow linearly with the updates, not with their square."""
        replay = self.state.critic_replay
        if n <= 0 or not replay:
            return []
        if n >= len(replay):
            return list(replay)
        return [replay[int(i)] for i in self.rng.choice(len(replay), size=n, replace=False)]

    async def value_starts(
        self, starts: Sequence[StartState], batch: TDBatch, timer: UpdateTimer
    ) -> tuple[list[int], list[CriticEstimates], list[float]]:
        """K critic samples on each start state with a kept branch: ``(their indices, estimates, TD targets G)``."""
        critic_idx = np.flatnonzero(batch.mask.any(axis=1)).tolist()
        with timer.part("sampling"):
            queries = [self.critic_query(starts[i].state) for i in critic_idx]
            estimates = await self.estimate_many(queries, self.config.tempo.critic_samples)
        return critic_idx, list(estimates), [float(batch.targets[i]) for i in critic_idx]

    async def td_prefix_weights(
        self, starts: Sequence[StartState], timer: UpdateTimer
    ) -> tuple[PrefixCorrection, PrefixWeights]:
        """The configured prefix correction and its weights for ``starts`` under the current policy."""
        correction = PrefixCorrection.from_config(self.config.tempo)
        prefix = await correction.compute(
            self.c.sampler, [s.state for s in starts], self.state.policy_version
        )
        timer.add("prefix", prefix.seconds)
        self.cost.add_logprob_calls([prefix.processed_tokens])
        return correction, prefix

    def start_critic_records(
        self, estimates: Sequence[CriticEstimates], targets: Sequence[float]
    ) -> list[dict[str, Any]]:
        """The trajectory records of the critic's K samples on each TD start state (see :func:`critic_records`)."""
        centred, weight = self.critic_centring(td=True)
        return critic_records(estimates, targets, self.config.tempo, centred=centred, weight=weight)

    async def value_endpoints(
        self,
        starts: Sequence[StartState],
        results: Sequence[Sequence[BranchResult]],
        ends: Mapping[tuple[int, int], StoredState],
        timer: UpdateTimer,
    ) -> EndpointValues:
        """E critic samples on every bootstrapped endpoint (see :func:`bootstraps`), as :class:`EndpointValues`;
        ``ends`` are the endpoints as states (:meth:`endpoint_states`)."""
        t = self.config.tempo
        queried = [(i, j) for i, row in enumerate(results) for j, b in enumerate(row) if bootstraps(b, t)]
        with timer.part("sampling"):
            queries = [
                self.endpoint_query(starts[i].state, results[i][j], ends.get((i, j))) for i, j in queried
            ]
            estimates = await self.estimate_many(queries, t.endpoint_samples)
        return endpoint_values(results, queried, estimates, t)

    def td_store_metrics(
        self, starts: Sequence[StartState], added: int, divergences: int
    ) -> dict[str, float]:
        """The store's side of a TD update (``td/*``)."""
        return {
            "td/store_size": float(len(self.c.store)),
            "td/new_endpoints": float(added),
            "td/reused_states": float(sum(1 for s in starts if not s.fresh)),
            "td/reused_states_total": float(self.state.states_reused_total),
            "td/replay_divergences": float(divergences),
        }

    async def td_starts(self) -> tuple[list[StartState], int]:
        """This update's starts (restored stored states, then fresh games; see :func:`choose_starts`) and how
        many stored states diverged on replay (quarantined, dropped; a restore that crashed is dropped and
        counted in ``starts/restore_failures`` instead); the restored ones count into
        ``state.states_reused_total``."""
        t = self.config.tempo
        n_fresh, n_stored = choose_starts(t, len(self.c.store))
        stored = self.c.store.sample(n_stored, self.rng) if n_stored > 0 else []
        n_fresh = t.states_per_batch - len(stored)
        games = [self.next_fresh_game() for _ in range(n_fresh)]
        crashed = self.restore_failures
        restored = await asyncio.gather(*(self.restore_start(s, t.branches) for s in stored))
        crashed = self.restore_failures - crashed  # restores that crashed are not divergences
        fresh, _failed = await self.fresh_starts(t.branches, games)
        diverged = sum(1 for r in restored if r is None) - crashed
        reused = [r for r in restored if r is not None]
        self.state.states_reused_total += len(reused)
        return reused + list(fresh), diverged

    async def td_actor_datums(
        self,
        results: Sequence[Sequence[BranchResult]],
        batch: TDBatch,
        advantages: np.ndarray,
        timer: UpdateTimer,
    ) -> tuple[list[Datum], dict[str, float]]:
        """The kept branches' actor Datums with their (prefix-corrected) advantages; a degenerate group carries
        ``A_n = 0`` and yields no Datum unless the KL anchor trains it. Nothing with ``tempo.train_actor`` off."""
        if not self.config.tempo.train_actor:
            return [], {}
        kept = [
            (b, float(advantages[i, j]))
            for i, row in enumerate(results)
            for j, b in enumerate(row)
            if batch.mask[i, j]
        ]
        return await self.anchored_actor_datums([b for b, _ in kept], [a for _, a in kept], timer)
