"""GiGPO (Group-in-Group Policy Optimization, arXiv 2505.10978): GRPO's batch with a critic-free step level.

Each update plays GRPO's batch (``grpo.games_per_batch`` fresh games x ``grpo.group_size`` full episodes, up
to T rounds) and gives round t of trajectory n the advantage (:func:`tempo_rl.signals.gigpo_batch`)::

    A_{n,t} = A^E_n + w * A^S_{n,t}
    A^E_n   = R_n - mean_group(R)                              GRPO's episode advantage
    A^S_{n,t} = R_{n,t} - mean_{anchor(s_{n,t})}(R)            R_{n,t} = sum_{u >= t} gamma**(u - t) r_{n,u}

An anchor group holds the rounds of one game's group taken in the same state: equal
:meth:`~tempo_rl.rollout.branches.BranchResult.state_keys`, the env's ``state_fingerprint()`` where it
offers one (ALFWorld's PDDL facts, the built-in games), else the observation's digest. ``w`` =
``gigpo.step_weight`` and ``gamma`` = ``gigpo.gamma``; both levels are centred, not divided by their group's
standard deviation (the paper's default). Each turn's sampled tokens carry their round's advantage.

Metrics per update: ``gigpo/anchor_groups``, ``gigpo/anchor_group_size`` (steps per anchor group),
``gigpo/shared_step_share`` (steps in an anchor group of at least 2: the ones with a step-level signal) and
``gigpo/step_advantage_share`` (the share of the advantage magnitude that comes from the step level).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tempo_rl.rollout.branches import BranchResult
from tempo_rl.signals import gigpo_batch
from tempo_rl.training.grpo import GrpoTrainer
from tempo_rl.training.trainer import Advantage

__all__ = ["GigpoTrainer"]


class GigpoTrainer(GrpoTrainer):
    """GiGPO: GRPO's episodes and episode advantage, plus step advantages within anchor-state groups."""

    phase = 3.0
    name = "gigpo"

    def branch_advantages(
        self, results: Sequence[Sequence[BranchResult]], mask: np.ndarray, episode: np.ndarray
    ) -> tuple[list[list[Advantage]], dict[str, float]]:
        """One advantage per round of each branch (see the module docstring); errored branches get 0."""
        g = self.config.gigpo
        games, width = len(results), max((len(row) for row in results), default=0)
        steps = max((b.rounds for row in results for b in row), default=0)
        rewards = np.zeros((games, width, steps))
        keys = np.full((games, width, steps), "", dtype=object)
        step_mask = np.zeros((games, width, steps), dtype=bool)
        for i, row in enumerate(results):
            for j, b in enumerate(row):
                if mask[i, j] and b.rounds:
                    rewards[i, j, : b.rounds] = b.rewards
                    keys[i, j, : b.rounds] = b.state_keys()
                    step_mask[i, j, : b.rounds] = True
        batch = gigpo_batch(
            rewards,
            keys,
            mask=step_mask,
            gamma=g.gamma,
            step_weight=g.step_weight,
            normalize=None,
        )
        advantages: list[list[Advantage]] = [
            [batch.advantages[i, j, : b.rounds] if mask[i, j] else 0.0 for j, b in enumerate(row)]
            for i, row in enumerate(results)
        ]
        stats = batch.anchor_stats()
        return advantages, {
            "gigpo/anchor_groups": float(stats.groups),
            "gigpo/anchor_group_size": stats.mean_size,
            "gigpo/shared_step_share": stats.shared_share,
            "gigpo/step_advantage_share": batch.step_share,
        }
