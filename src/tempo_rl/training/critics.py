"""The critics that value the restored state itself, built from ``tempo.critic`` (see :mod:`tempo_rl.critic`).

``tempo.critic = "generative"`` (the default) is built in :func:`tempo_rl.training.run.build_trainer` as
before; :func:`state_critic` builds the other two from the config:

* ``"oracle"``: :class:`~tempo_rl.critic.OracleCritic`, T = ``tempo.max_rounds``, with the noise of
  :class:`~tempo_rl.training.options.TrainerOptions` (none by default);
* ``"monte_carlo"``: :class:`~tempo_rl.critic.MonteCarloCritic` with M = ``tempo.critic_rollouts`` rollouts
  at the actor's sampling settings (``sampling.max_tokens``, ``temperature``), T, the trajectory
  token budget and ``env.invalid_action_penalty``.

Neither is trained: they produce no critic Datum (``tempo.train_critic`` changes nothing), and the critic-only
warm-up (``tempo.warmup_updates``) has nothing to teach them (set it to 0 to save its episodes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tempo_rl.critic.base import Critic
from tempo_rl.critic.monte_carlo import MonteCarloCritic
from tempo_rl.critic.oracle import OracleCritic
from tempo_rl.envs.snapshot import Snapshot
from tempo_rl.rollout.branches import RolloutSettings
from tempo_rl.rollout.tool_call import ToolCallParser
from tempo_rl.training.config import TrainConfig
from tempo_rl.training.options import TrainerOptions

__all__ = ["state_critic"]


def state_critic(
    config: TrainConfig,
    chat: Any,
    *,
    pool: Any,
    restore_branches: Callable[[Snapshot, int], Sequence[Any]],
    parser: ToolCallParser | None = None,
    options: TrainerOptions | None = None,
) -> Critic:
    """The ``"oracle"`` or ``"monte_carlo"`` critic of ``config.tempo.critic``.

    Args:
        config: the run config.
        chat: the actor's renderer (Monte Carlo rollouts render the actor's prompts with it).
        pool: the trainer's env worker pool.
        restore_branches: the trainer's ``(snapshot, n) -> n live envs`` (its fork cache and workers).
        parser: the actor's tool-call parser (default: a new :class:`~tempo_rl.rollout.ToolCallParser`).
        options: the oracle's noise (:class:`~tempo_rl.training.options.TrainerOptions`; default: none).

    Raises:
        ValueError: ``tempo.critic`` is ``"generative"`` (built by ``build_trainer``) or unknown.
    """
    t = config.tempo
    if t.critic == "oracle":
        # with Ray workers the trainer's restores are remote proxies: the oracle restores in this process
        restore = None if config.workers.ray else (lambda snapshot: restore_branches(snapshot, 1)[0])
        noise = options or TrainerOptions()
        return OracleCritic(
            flip_prob=noise.oracle_flip_prob,
            sigma=noise.oracle_noise_sigma,
            max_rounds=t.max_rounds,
            restore=restore,
        )
    if t.critic == "monte_carlo":
        parser = parser or ToolCallParser()
        s = config.sampling
        tokenizer = getattr(chat, "tokenizer", None)
        eos = getattr(tokenizer, "eos_token_id", None)
        settings = RolloutSettings(
            sampling=s.actor_params((int(eos),) if eos is not None else None),
            max_rounds=t.max_rounds,
            max_trajectory_tokens=s.max_trajectory_tokens,
            show_remaining_steps=s.show_remaining_steps,
            tool_name=parser.tool_name,
            invalid_action_penalty=config.env.invalid_action_penalty,
        )
        return MonteCarloCritic(
            chat, pool, parser, settings, rollouts=t.critic_rollouts, restore_branches=restore_branches
        )
    raise ValueError(
        f"state_critic builds tempo.critic = 'oracle' or 'monte_carlo', got {t.critic!r}; the generative critic "
        "is built by build_trainer"
    )
