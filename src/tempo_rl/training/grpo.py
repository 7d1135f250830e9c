"""The trajectory-level GRPO baseline, on the same machinery as TEMPO.

Each update: ``grpo.games_per_batch`` fresh games x ``grpo.group_size`` branches play full episodes (up to T
rounds, no macro boundary, no critic); the episode return ``R_n = sum_t r_t`` of each branch is centred within
its group, ``A_n = R_n - mean(R)`` (:func:`tempo_rl.signals.group_advantages`, no std division, as in the
reference's chapter 8, whose reward ``1[won] - 0.1 * invalid actions`` is ``env.invalid_action_penalty = 0.1``;
the default 0 gives GRPO and TEMPO the same binary reward); degenerate groups (all returns equal: every branch
failed or every branch succeeded) give no Datum (unless the KL anchor ``kl.coef > 0`` trains them by the anchor
alone); one chunked ``forward_backward`` + one ``optim_step``.

This is what TEMPO is compared with: on long-horizon tasks where every branch of a group fails, GRPO gets no
gradient at all, while TEMPO's bootstrapped endpoint values can still separate branches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tempo_rl.rollout.branches import BranchResult
from tempo_rl.signals import degenerate_groups, group_advantages
from tempo_rl.training.metrics import rollout_metrics
from tempo_rl.training.trainer import Advantage, MacroStepTrainer, UpdateTimer

__all__ = ["GrpoTrainer"]


class GrpoTrainer(MacroStepTrainer):
    """Trajectory-level GRPO: full episodes, group-centred episode returns, actor Datums only."""

    phase = 2.0  #: ``train/phase`` of its updates
    name = "grpo"  #: its trajectory records' ``phase``

    def total_updates(self) -> int:
        return self.config.grpo.updates

    async def update(self, index: int) -> dict[str, float]:
        g = self.config.grpo
        timer = UpdateTimer()
        with timer.part("restore"):
            games = [self.next_fresh_game() for _ in range(g.games_per_batch)]
            starts, _failed = await self.fresh_starts(g.group_size, games)
        results, rstats = await self.play(starts, segment_rounds=None, timer=timer)
        returns = np.array([[b.segment_reward for b in row] for row in results], dtype=np.float64)
        mask = np.array([[b.end_reason != "error" for b in row] for row in results], dtype=bool)
        returns = np.where(mask, returns, 0.0)
        adv = group_advantages(returns, mask=mask)
        degenerate = np.asarray(degenerate_groups(adv, mask=mask), dtype=bool)
        advantages, extra = self.branch_advantages(results, mask, adv)
        # degenerate groups carry A_n = 0: no Datum, unless the KL anchor trains them
        kept = [
            (b, advantages[i][j]) for i, row in enumerate(results) for j, b in enumerate(row) if mask[i, j]
        ]
        datums, kl_metrics = await self.anchored_actor_datums(
            [b for b, _ in kept], [a for _, a in kept], timer
        )
        metrics = self.train_step(datums, timer)
        metrics.update(kl_metrics)
        metrics.update(extra)
        branches = [b for row in results for b in row]
        metrics.update(
            {
                "train/phase": self.phase,
                "grpo/success_rate": float(np.mean([b.won for b in branches])) if branches else math.nan,
                "grpo/return_mean": float(returns[mask].mean()) if mask.any() else math.nan,
                "grpo/steps_mean": float(np.mean([b.rounds for b in branches])) if branches else math.nan,
                "actor/degenerate_group_rate": float(np.mean(degenerate)) if len(degenerate) else math.nan,
                "actor/terminal_won_rate": float(np.mean([b.won for b in branches]))
                if branches
                else math.nan,
                "actor/dropped_branches": float(np.sum(~mask)),
                "actor/token_budget_rate": float(np.mean([b.end_reason == "token_budget" for b in branches])),
            }
        )
        metrics.update(rollout_metrics(rstats))
        metrics.update(timer.metrics())
        self.write_trajectories(
            [
                {
                    "update": index,
                    "phase": self.name,
                    "game_id": starts[i].state.game_id,
                    "actions": list(b.actions),
                    "rewards": list(b.rewards),
                    "invalid_actions": b.invalid_actions,
                    "end_reason": b.end_reason,
                    "won": b.won,
                    "return": float(returns[i, j]),
                    "advantage": _record(advantages[i][j]),
                }
                for i, row in enumerate(results)
                for j, b in enumerate(row)
            ]
        )
        return metrics

    def branch_advantages(
        self, results: Sequence[Sequence[BranchResult]], mask: np.ndarray, episode: np.ndarray
    ) -> tuple[list[list[Advantage]], dict[str, float]]:
        """Each branch's advantage (``[i][j]``: game i, branch j) and the metrics of computing it; GRPO's is
        the group-centred episode return ``episode[i, j]``, one number per branch."""
        return [[float(a) for a in row] for row in episode], {}


def _record(advantage: Advantage) -> float | list[float]:
    return float(advantage) if isinstance(advantage, (int, float)) else [float(a) for a in advantage]
