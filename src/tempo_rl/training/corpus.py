"""The texts the local backend's offline tokenizer is trained on (:func:`env_corpus`)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from tempo_rl.critic.base import CriticQuery
from tempo_rl.critic.prompt import build_critic_messages
from tempo_rl.envs.workers import EnvWorkerError, EnvWorkerPool
from tempo_rl.rollout.prompts import build_actor_messages, format_observation
from tempo_rl.rollout.tool_call import ToolCallParser, format_tool_call
from tempo_rl.training.config import TrainConfig
from tempo_rl.training.env_calls import GuardedEnvCalls, make_env_at_reset

__all__ = ["env_corpus"]


def _play(
    calls: GuardedEnvCalls, config: TrainConfig, g: int, rng: np.random.Generator, parser_tool: str
) -> list[str]:
    """The texts of training game ``g``; an env failure raises :class:`EnvWorkerError` (the game is dropped)."""
    env: Any = calls.make(make_env_at_reset, *config.env.train_game(g))
    try:
        texts: list[str] = []
        obs = calls.call(env, "last_observation")
        initial = obs.text
        task = str(obs.info.get("task", "")) if obs.info else ""
        texts.extend(m["content"] for m in build_actor_messages(obs, tool_name=parser_tool))
        plan = list(calls.call(env, "walkthrough") or ())
        history: list[tuple[str, str]] = []
        for step in range(config.tempo.max_rounds):
            admissible = list(obs.admissible_actions or ())
            if plan and (rng.random() > 0.3 or not admissible):
                action = plan.pop(0)
            elif admissible:
                action = admissible[int(rng.integers(len(admissible)))]
            else:
                break
            texts.append(format_tool_call(action, parser_tool))
            texts.extend(format_tool_call(a, parser_tool) for a in admissible)
            result = calls.call(env, "step", action)
            obs = result.observation
            history.append((action, obs.text))
            texts.append(format_observation(obs, remaining_steps=config.tempo.max_rounds - step - 1))
            if result.terminated or result.truncated:
                break
        query = CriticQuery(
            task=task,
            history=history,
            initial_observation=initial,
            privileged_info=calls.call(env, "privileged_info"),
            privileged_state=obs.privileged_state,
            remaining_steps=3,
            r_max=config.tempo.r_max,
        )
        texts.extend(m["content"] for m in build_critic_messages(query))
        return texts
    finally:
        calls.close_env(env)


def env_corpus(config: TrainConfig, games: int = 24, seed: int = 0) -> list[str]:
    """Texts the local tokenizer is trained on: what the actor and the critic will read and write.

    Plays ``games`` training games (the walkthrough, with random admissible actions mixed in) and collects the
    actor prompts, observation turns, tool calls of every admissible action, critic prompts (with the env's
    privileged information) and every value string ``<value>0.0</value>`` ... ``<value>1.0</value>``.

    Every env call goes through an :class:`~tempo_rl.envs.workers.EnvWorkerPool` with the run's
    ``workers.step_timeout_s``: a game whose env raises or hangs is dropped (its texts so far discarded) and
    counted in a warning on stderr. When every game fails the env is unusable:

    Raises:
        EnvWorkerError: no game could be played (the last failure).
    """
    rng = np.random.default_rng(seed)
    parser_tool = ToolCallParser().tool_name
    texts: list[str] = []
    last: EnvWorkerError | None = None
    pool = EnvWorkerPool(max_workers=1, step_timeout_s=config.workers.step_timeout_s)
    with pool, GuardedEnvCalls(pool) as calls:
        for g in range(games):
            try:
                texts.extend(_play(calls, config, g, rng, parser_tool))
            except EnvWorkerError as exc:
                calls.failures += 1
                last = exc
    if calls.failures:
        if calls.failures == games and last is not None:
            raise last
        print(
            f"tempo-rl: {calls.failures} of {games} tokenizer-corpus games were dropped after env failures "
            f"(last: {last})",
            file=sys.stderr,
            flush=True,
        )
    texts.extend(f"<value>{v / 10:.1f}</value>" for v in range(11))
    return texts
