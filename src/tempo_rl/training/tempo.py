"""The TEMPO trainer: critic warm-up on Monte Carlo returns, then macro-step TD updates.

**Warm-up update** (``tempo.warmup_updates`` of them, critic only):

* ``warmup_games_per_batch`` fresh games x N branches play full episodes (up to T rounds);
* boundary states every H rounds (H, 2H, ... strictly before the episode's end) get the Monte Carlo target
  ``G_t = sum_{u >= t} r_u`` (:func:`tempo_rl.signals.monte_carlo_returns`); each episode contributes at most
  ``warmup_states_per_episode`` of them, drawn uniformly, so that long failed episodes do not out-weigh short
  successful ones (the reference's bias);
* each game's start state (round 0, the same state for its N branches) is one more boundary state, with the
  mean of its branches' returns ``G_0 = mean_n sum_u r_u^(n)`` as target: one Monte Carlo estimate of
  ``V(s_0)`` over N episodes instead of N copies of the state against single 0/1 outcomes;
* K critic samples on each boundary state, rewards ``-|V_k - G_t| / R_max`` (or Brier), centred over K;
  critic Datums only (plus, with the KL anchor ``kl.coef > 0``, the episodes' actor tokens trained by the
  anchor alone, see :class:`~tempo_rl.training.config.KLConfig`); one optimiser step (``optim.substeps``
  minibatch steps);
* every non-terminal boundary state (round > 0) also goes into the StateStore (the reference discarded them).

**TD update**:

* start states = ``round(fresh_share * states_per_batch)`` fresh games (at least one when the share is > 0)
  plus stored states sampled uniformly (topped up with fresh games while the store is small); each stored state
  is restored into N verified branches (a divergence quarantines it and drops it, counted);
* N branches x at most H rounds each (:mod:`tempo_rl.training.rollout`);
* endpoint values ``V_hat_n`` = mean of E critic samples for truncated branches, 0 for terminated (and
  token-budget) branches; an endpoint whose E samples all fail to parse is dropped or substituted (config);
* ``R_n = r_n + V_hat_n``, ``G = mean_n R_n``, ``A_n = R_n - G`` (:mod:`tempo_rl.signals`); degenerate groups
  (all ``|A_n| <= 1e-12``) and zero-advantage branches produce no Datum (with ``kl.coef > 0`` every kept
  branch does, its tokens' advantages ``A_n - coef * (log pi - log pi_ref)``);
* K critic samples on each start state, rewarded against its G and centred over K;
* actor + critic Datums through one chunked ``forward_backward`` pass and ONE ``optim_step`` (or, with
  ``optim.substeps = S``, S minibatches of mixed actor and critic Datums, one step each);
* the macro-boundary endpoints (within T and the token budget) go into the store with the policy version that
  sampled them; states older than ``store.max_age_versions`` are evicted.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tempo_rl.backends.types import Datum
from tempo_rl.critic.base import CriticEstimates, endpoint_value
from tempo_rl.envs.restore import snapshot_prefix
from tempo_rl.envs.snapshot import Snapshot
from tempo_rl.signals import (
    branch_returns,
    critic_rewards,
    degenerate_groups,
    group_advantages,
    monte_carlo_returns,
    td_targets,
)
from tempo_rl.training.prefix_correction import (
    PREFIX_SPANS_KEY,
    PrefixCorrection,
    endpoint_prefix_spans,
    sampled_spans,
)
from tempo_rl.training.rollout import PROMPT_KEY, BranchResult, RolloutStats, prompt_window
from tempo_rl.training.store import StoredState, make_state_id
from tempo_rl.training.trainer import MacroStepTrainer, StartState, UpdateTimer

__all__ = ["TempoTrainer", "critic_metrics", "rollout_metrics"]


def _nanmean(values: Sequence[float] | np.ndarray) -> float:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else math.nan


def _corr(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation over pairs where both are finite; NaN with < 2 pairs or zero variance."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 2 or a.std() == 0 or b.std() == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])


def critic_metrics(estimates: Sequence[CriticEstimates], targets: Sequence[float]) -> dict[str, float]:
    """Critic metrics over start/boundary states, each with K samples and its target G.

    * ``critic/abs_error_mean``: mean ``|V_k - G|`` over parsed samples (R_max units as the values);
    * ``critic/parse_failure_rate``: unparsed samples / samples (a fraction of samples);
    * ``critic/prompt_too_long_rate``: states whose prompt had to be shortened / states (a fraction of states);
    * ``critic/mean_estimate_mean``: mean over states of the mean parsed estimate;
    * ``critic/value_corr``: Pearson correlation between the per-state mean estimate and G across states.
    """
    errors: list[float] = []
    means: list[float] = []
    samples = failures = too_long = 0
    for est, g in zip(estimates, targets):
        parsed = est.values[np.isfinite(est.values)]
        errors.extend(np.abs(parsed - g).tolist())
        means.append(float(parsed.mean()) if parsed.size else math.nan)
        samples += est.k
        failures += est.parse_failures
        too_long += int(est.prompt_too_long)
    n = len(estimates)
    return {
        "critic/abs_error_mean": _nanmean(errors),
        "critic/parse_failure_rate": failures / samples if samples else math.nan,
        "critic/prompt_too_long_rate": too_long / n if n else math.nan,
        "critic/mean_estimate_mean": _nanmean(means),
        "critic/value_corr": _corr(means, list(targets)),
        "critic/states": float(n),
    }


def rollout_metrics(stats: RolloutStats, prefix: str = "rollout") -> dict[str, float]:
    """Tool-call and action validity rates, each a fraction of the turns named in its definition.

    * ``valid_tool_call_rate`` = turns with a readable tool call / turns;
    * ``admissible_action_rate`` = admissible actions / turns with a readable call and a known admissible list;
    * ``valid_action_rate`` = turns with a readable call whose action was admissible / turns with a known list;
    * ``template_restarts`` = chat-template history rewrites (each starts a new training sequence of its branch).
    """
    turns = stats.turns
    return {
        f"{prefix}/turns": float(turns),
        f"{prefix}/valid_tool_call_rate": stats.valid_tool_calls / turns if turns else math.nan,
        f"{prefix}/admissible_action_rate": (
            stats.admissible_actions / stats.admissible_known_valid
            if stats.admissible_known_valid
            else math.nan
        ),
        f"{prefix}/valid_action_rate": (
            stats.admissible_actions / stats.admissible_known if stats.admissible_known else math.nan
        ),
        f"{prefix}/env_errors": float(stats.env_errors),
        f"{prefix}/sampled_tokens": float(stats.sampled_tokens),
        f"{prefix}/template_restarts": float(stats.template_restarts),
    }


class TempoTrainer(MacroStepTrainer):
    """TEMPO: ``tempo.warmup_updates`` critic warm-up updates, then ``tempo.td_updates`` TD updates."""

    def total_updates(self) -> int:
        t = self.config.tempo
        return t.warmup_updates + t.td_updates

    async def update(self, index: int) -> dict[str, float]:
        if index < self.config.tempo.warmup_updates:
            metrics = await self.warmup_update(index)
            metrics["train/phase"] = 0.0
        else:
            metrics = await self.td_update(index)
            metrics["train/phase"] = 1.0
        metrics.update(self.store_metrics())
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

    # --------------------------------------------------------------------------------------------- helpers

    def _state_at(self, start: StoredState, branch: BranchResult, rounds: int) -> StoredState | None:
        """The state of ``branch`` after ``rounds`` rounds of its segment, or None when it cannot be continued
        (at T, or its prefix leaves no room for one more turn within the token budget)."""
        depth = start.snapshot.round_index + rounds
        if depth >= self.config.tempo.max_rounds:
            return None
        # the token sequence the state's prompt lives in: after a chat-template restart, the restarted one
        seq_index = branch.turn_seq[rounds] if rounds < len(branch.turn_seq) else branch.restarts
        sequence = branch.sequence(seq_index)
        end = branch.turn_starts[rounds] if rounds < len(branch.turn_starts) else len(sequence.tokens)
        if end + self.config.sampling.max_tokens > self.config.sampling.max_trajectory_tokens:
            return None
        prefix = list(sequence.tokens[:end])
        lp = float(sum(x for x, m in zip(sequence.logprobs[:end], sequence.sampled_mask[:end]) if m))
        if seq_index == 0:  # the sequence begins with the start's prefix: its spans and logprobs carry over
            spans = endpoint_prefix_spans(start, sequence, end, self.state.policy_version)
            prefix_lp = start.prefix_logprob_sum + lp
        else:  # a fresh render: earlier turns are context now; only this sequence's sampled tokens count
            spans = [
                span.to_json()
                for span in sampled_spans(
                    sequence.sampled_mask, sequence.logprobs, self.state.policy_version, end=end
                )
            ]
            prefix_lp = lp
        snapshot: Snapshot = branch.snapshot
        if rounds < branch.rounds:
            obs = branch.observations[rounds - 1]
            snapshot = snapshot_prefix(snapshot, depth).model_copy(
                update={"last_observation": obs.text, "last_admissible": obs.admissible_actions}
            )
        window = branch.windows[rounds] if rounds < len(branch.windows) else prompt_window(branch.prompt)
        return StoredState(
            id=make_state_id(snapshot, prefix),
            snapshot=snapshot,
            game_id=start.game_id,
            task=start.task,
            initial_observation=start.initial_observation,
            history=tuple(tuple(t) for t in branch.history[: len(start.history) + rounds]),  # type: ignore[misc]
            token_prefix=tuple(prefix),
            prefix_logprob_sum=prefix_lp,
            policy_version=self.state.policy_version,
            macro_index=start.macro_index + max(1, rounds // self.config.tempo.macro_rounds),
            parent_id=start.id,
            privileged_info=start.privileged_info,
            extra={
                PROMPT_KEY: window,
                PREFIX_SPANS_KEY: spans,
            },
        )

    def _critic_signals(
        self,
        estimates: Sequence[CriticEstimates],
        targets: Sequence[float],
        *,
        centred: bool = True,
        weight: float = 1.0,
    ) -> tuple[list[Datum], float]:
        """Critic rewards against the targets, centred over K (or, with ``centred=False``, the rewards
        themselves), times ``weight`` on the Datums; returns the Datums and the degenerate rate."""
        t = self.config.tempo
        if not estimates or not t.train_critic:
            return [], math.nan
        k = max(e.k for e in estimates)
        values = np.full((len(estimates), k), np.nan)
        mask = np.zeros((len(estimates), k), dtype=bool)
        for i, est in enumerate(estimates):
            values[i, : est.k] = est.values
            mask[i, : est.k] = True
        rewards = critic_rewards(
            values,
            np.asarray(targets, dtype=np.float64),
            r_max=t.r_max,
            error=t.error,
            failure_reward=t.critic_failure_reward,
        )
        if centred:
            adv = group_advantages(rewards, mask=mask)
        else:  # the rewards themselves: samples that agree on a wrong value still learn
            adv = np.where(mask, rewards, 0.0)
        degenerate = np.asarray(degenerate_groups(adv, mask=mask), dtype=bool)
        datums: list[Datum] = []
        for i, est in enumerate(estimates):
            if degenerate[i] or not est.samples:
                continue
            datums.extend(self.critic_datums(est, (weight * adv[i, : est.k]).tolist()))
        return datums, float(np.mean(degenerate))

    # --------------------------------------------------------------------------------------------- warm-up

    async def warmup_update(self, index: int) -> dict[str, float]:
        """One critic-only warm-up update on full episodes (see the module docstring)."""
        t = self.config.tempo
        timer = UpdateTimer()
        t0 = time.perf_counter()
        games = [self.next_fresh_game() for _ in range(t.warmup_games_per_batch)]
        starts, _failed = await self.fresh_starts(t.branches, games)
        timer.add("restore", time.perf_counter() - t0)
        results, rstats = await self.play(starts, segment_rounds=None, timer=timer)

        boundary: list[tuple[StoredState, float]] = []
        stored = 0
        episodes_won: list[float] = []
        steps: list[float] = []
        trajectories = []
        for start, row in zip(starts, results):
            start_returns: list[float] = []
            for branch in row:
                if branch.end_reason == "error":
                    continue
                episodes_won.append(float(branch.won))
                steps.append(float(branch.rounds))
                returns = monte_carlo_returns(np.asarray(branch.rewards, dtype=np.float64))
                start_returns.append(float(returns[0]) if branch.rounds else 0.0)
                candidates = list(range(t.macro_rounds, branch.rounds, t.macro_rounds))
                for r in candidates:  # every non-terminal boundary state goes into the store
                    state = self._state_at(start.state, branch, r)
                    if state is not None and self.c.store.add(state):
                        stored += 1
                m = t.warmup_states_per_episode
                chosen = (
                    candidates
                    if m is None or m >= len(candidates)
                    else sorted(self.rng.choice(candidates, size=m, replace=False).tolist())
                )
                for r in chosen:
                    maybe = self._state_at(start.state, branch, r)
                    if maybe is None:
                        continue
                    history = branch.history[: len(start.state.history) + r]
                    boundary.append((self._with_history(maybe, history), float(returns[r])))
                trajectories.append(
                    self._trajectory_record(
                        index, "warmup", start, branch, float(returns[0]) if branch.rounds else 0.0
                    )
                )
            if start_returns:  # the start state once, against the mean of its branches' returns
                boundary.append((start.state, float(np.mean(start_returns))))
        t1 = time.perf_counter()
        queries = [self.critic_query(s, s.history, s.snapshot.round_index) for s, _ in boundary]
        estimates = await self.estimate_many(queries, t.critic_samples)
        timer.add("sampling", time.perf_counter() - t1)
        targets = [g for _, g in boundary]
        datums, critic_degenerate = self._critic_signals(estimates, targets)
        metrics = critic_metrics(estimates, targets)  # before the step: the error of the policy that sampled
        if t.train_actor:  # advantage 0: the episodes' actor tokens are trained by the KL anchor alone, if on
            played = [b for row in results for b in row if b.end_reason != "error"]
            anchored, kl_metrics = await self.anchored_actor_datums(played, [0.0] * len(played), timer)
            datums.extend(anchored)
            metrics.update(kl_metrics)
        metrics.update(self.train_step(datums, timer, substeps=t.warmup_substeps))
        metrics.update(
            {
                "warmup/success_rate": _nanmean(episodes_won),
                "warmup/steps_mean": _nanmean(steps),
                "warmup/boundary_states": float(len(boundary)),
                "warmup/stored_states": float(stored),
                "target/mc_return_mean": _nanmean(targets),
                "critic/degenerate_group_rate": critic_degenerate,
            }
        )
        metrics.update(rollout_metrics(rstats))
        metrics.update({f"time/{k}_s": v for k, v in timer.parts.items()})
        self.write_trajectories(trajectories)
        return metrics

    @staticmethod
    def _with_history(state: StoredState, history: Sequence[tuple[str, str]]) -> StoredState:
        if tuple(state.history) == tuple(tuple(h) for h in history):
            return state
        import dataclasses

        return dataclasses.replace(state, history=tuple(tuple(h) for h in history))  # type: ignore[misc]

    def _trajectory_record(
        self, index: int, phase: str, start: StartState, branch: BranchResult, ret: float, **extra: Any
    ) -> dict[str, Any]:
        return {
            "update": index,
            "phase": phase,
            "game_id": start.state.game_id,
            "start_id": start.state.id,
            "start_round": start.state.snapshot.round_index,
            "fresh": start.fresh,
            "actions": list(branch.actions),
            "rewards": list(branch.rewards),
            "invalid_actions": branch.invalid_actions,
            "end_reason": branch.end_reason,
            "won": branch.won,
            "return": ret,
            "error": branch.error,
            **extra,
        }

    # --------------------------------------------------------------------------------------------- TD

    def _choose_starts(self) -> tuple[int, list[StoredState]]:
        """How many fresh games, and which stored states, start this update's branches."""
        t = self.config.tempo
        n = t.states_per_batch
        n_fresh = round(t.fresh_share * n)
        if t.fresh_share > 0:
            n_fresh = max(1, n_fresh)
        n_stored = min(n - n_fresh, len(self.c.store))
        stored = self.c.store.sample(n_stored, self.rng) if n_stored > 0 else []
        return n - len(stored), list(stored)

    async def td_update(self, index: int) -> dict[str, float]:
        """One TEMPO TD update (see the module docstring)."""
        t = self.config.tempo
        timer = UpdateTimer()
        t0 = time.perf_counter()
        n_fresh, stored = self._choose_starts()
        games = [self.next_fresh_game() for _ in range(n_fresh)]
        crashed = self.restore_failures
        restored = await asyncio.gather(*(self.restore_start(s, t.branches) for s in stored))
        crashed = self.restore_failures - crashed  # restores that crashed are not divergences
        fresh, _failed = await self.fresh_starts(t.branches, games)
        divergences = sum(1 for r in restored if r is None) - crashed
        starts: list[StartState] = [r for r in restored if r is not None] + list(fresh)
        timer.add("restore", time.perf_counter() - t0)
        reused = sum(1 for s in starts if not s.fresh)
        self.state.states_reused_total += reused
        results, rstats = await self.play(starts, segment_rounds=t.macro_rounds, timer=timer)

        # endpoint values: E critic samples on every truncated endpoint
        n_s, n_b = len(starts), t.branches

        def bootstrapped(b: BranchResult) -> bool:
            # macro boundary: V_hat; episode step limit: V_hat only if configured (else the budget is spent: 0)
            return b.end_reason == "macro_boundary" or (
                b.end_reason == "max_rounds" and t.bootstrap_episode_limit
            )

        need = [(i, j) for i, row in enumerate(results) for j, b in enumerate(row) if bootstrapped(b)]
        t1 = time.perf_counter()
        endpoint_estimates = await self.estimate_many(
            [
                self.critic_query(starts[i].state, results[i][j].history, results[i][j].round_index)
                for i, j in need
            ],
            t.endpoint_samples,
        )
        timer.add("sampling", time.perf_counter() - t1)
        seg = np.zeros((n_s, n_b))
        values = np.zeros((n_s, n_b))
        terminal = np.ones((n_s, n_b), dtype=bool)
        mask = np.zeros((n_s, n_b), dtype=bool)
        unparsed = 0
        for i, row in enumerate(results):
            for j, b in enumerate(row):
                seg[i, j] = b.segment_reward
                mask[i, j] = b.end_reason != "error"
                terminal[i, j] = not bootstrapped(b)
        for (i, j), est in zip(need, endpoint_estimates):
            v = endpoint_value(est)
            if math.isnan(v):
                unparsed += 1
                if t.unparsed_endpoint == "drop":
                    mask[i, j] = False
                    continue
                v = t.unparsed_endpoint_value
            values[i, j] = v
        returns = branch_returns(seg, values, terminal)
        returns = np.where(mask, returns, 0.0)
        has_branch: np.ndarray = np.asarray(mask.any(axis=1), dtype=bool)
        targets = td_targets(returns, mask=mask)
        adv = group_advantages(returns, mask=mask)
        degenerate = np.asarray(degenerate_groups(adv, mask=mask), dtype=bool)
        # prefix importance correction (+ optional segment scaling) of the actor advantages
        correction = PrefixCorrection.from_config(t)
        prefix_w = await correction.compute(
            self.c.sampler, [s.state for s in starts], self.state.policy_version
        )
        timer.add("prefix", prefix_w.seconds)
        actor_adv = correction.apply(adv, prefix_w)

        # critic: K samples on each start state with at least one kept branch
        t2 = time.perf_counter()
        critic_idx = [i for i in range(n_s) if has_branch[i]]
        start_estimates = await self.estimate_many(
            [
                self.critic_query(
                    starts[i].state, starts[i].state.history, starts[i].state.snapshot.round_index
                )
                for i in critic_idx
            ],
            t.critic_samples,
        )
        timer.add("sampling", time.perf_counter() - t2)
        g_list = [float(targets[i]) for i in critic_idx]
        metrics = critic_metrics(start_estimates, g_list)

        datums: list[Datum] = []
        if t.train_actor:
            # degenerate groups carry A_n = 0: no Datum, unless the KL anchor trains them
            kept = [
                (b, float(actor_adv[i, j]))
                for i, row in enumerate(results)
                for j, b in enumerate(row)
                if mask[i, j]
            ]
            actor, kl_metrics = await self.anchored_actor_datums(
                [b for b, _ in kept], [a for _, a in kept], timer
            )
            datums.extend(actor)
            metrics.update(kl_metrics)
        metrics.update(prefix_w.metrics())
        critic_datums, critic_degenerate = self._critic_signals(
            start_estimates, g_list, centred=t.td_critic_baseline == "group_mean", weight=t.td_critic_weight
        )
        datums.extend(critic_datums)

        # endpoints (sampled by the current version) go into the store after the step
        endpoints: list[StoredState] = []
        for i, row in enumerate(results):
            for j, b in enumerate(row):
                if b.end_reason == "macro_boundary" and mask[i, j]:
                    state = self._state_at(starts[i].state, b, b.rounds)
                    if state is not None:
                        endpoints.append(state)
        metrics.update(self.train_step(datums, timer))
        t3 = time.perf_counter()
        added = sum(1 for s in endpoints if self.c.store.add(s))
        evict = getattr(self.c.store, "evict_stale", None)
        if callable(evict):
            evict(self.state.policy_version)
        timer.add("store", time.perf_counter() - t3)

        # metrics
        branches = [b for row in results for b in row]
        kept_mask = mask.ravel()
        eligible_groups = [
            (i, [j for j in range(n_b) if mask[i, j] and not terminal[i, j] and seg[i, j] == 0.0])
            for i in range(n_s)
        ]
        gaps = [float(np.ptp(values[i, js])) for i, js in eligible_groups if len(js) >= 2]
        valid_groups = [i for i in range(n_s) if has_branch[i]]
        metrics.update(
            {
                "td/store_size": float(len(self.c.store)),
                "td/new_endpoints": float(added),
                "td/fresh_states": float(sum(1 for s in starts if s.fresh)),
                "td/fresh_share": float(sum(1 for s in starts if s.fresh)) / len(starts)
                if starts
                else math.nan,
                "td/reused_states": float(reused),
                "td/reused_states_total": float(self.state.states_reused_total),
                "td/replay_divergences": float(divergences),
                "td/macro_index_mean": _nanmean([s.state.macro_index for s in starts]),
                "td/start_round_mean": _nanmean([s.state.snapshot.round_index for s in starts]),
                "actor/segment_reward_mean": _nanmean(seg[mask]),
                "actor/terminal_won_rate": float(np.mean([b.won for b in branches]))
                if branches
                else math.nan,
                "actor/terminated_rate": _nanmean([b.terminated for b in branches]),
                "actor/macro_boundary_rate": _nanmean([b.end_reason == "macro_boundary" for b in branches]),
                "actor/max_rounds_rate": _nanmean([b.end_reason == "max_rounds" for b in branches]),
                "actor/token_budget_rate": _nanmean([b.end_reason == "token_budget" for b in branches]),
                "actor/dropped_branches": float(np.sum(~kept_mask)),
                "actor/env_errors": float(sum(b.end_reason == "error" for b in branches)),
                "actor/degenerate_group_rate": (
                    float(np.mean(degenerate[valid_groups])) if valid_groups else math.nan
                ),
                "actor/value_target_mean": _nanmean([targets[i] for i in valid_groups]),
                "actor/value_target_std": (
                    float(np.std([targets[i] for i in valid_groups])) if valid_groups else math.nan
                ),
                "actor/value_gap_zero_reward": _nanmean(gaps),
                "actor/return_mean": _nanmean(returns[mask]),
                "critic/endpoint_value_mean": _nanmean([values[i, j] for i, j in need if mask[i, j]]),
                "critic/endpoint_parse_failures": float(unparsed),
                "critic/endpoint_parse_failure_rate": unparsed / len(need) if need else math.nan,
                "critic/degenerate_group_rate": critic_degenerate,
            }
        )
        metrics.update(rollout_metrics(rstats))
        metrics.update({f"time/{k}_s": v for k, v in timer.parts.items()})
        self.write_trajectories(
            [
                self._trajectory_record(
                    index,
                    "td",
                    starts[i],
                    b,
                    float(returns[i, j]),
                    endpoint_value=float(values[i, j]),
                    advantage=float(adv[i, j]),
                    kept=bool(mask[i, j]),
                )
                for i, row in enumerate(results)
                for j, b in enumerate(row)
            ]
        )
        return metrics
