"""Optional supervised warm start of the actor on expert walkthroughs (cross-entropy), before RL.

Small local models start from random weights and would never produce a valid tool call, so RL would see no
signal. The warm start behaviour-clones the env's expert (:meth:`ReplayableEnv.walkthrough`) on
``warmstart.episodes`` training games (with ``warmstart.env_kwargs`` merged over ``env.kwargs``: e.g. demos from
a variant whose expert's choices carry no preference the RL task rewards):

* a demonstration is the actor's own conversation format (:func:`~tempo_rl.rollout.build_actor_messages`,
  observation turns, one tool call per turn), rendered token-exactly with the actor's renderer;
* with probability ``warmstart.noise`` a step executes a random admissible action instead of the expert's (as
  context only: weight 0, so the model sees off-expert states but does not learn to act randomly). With
  ``warmstart.expert = "walkthrough"`` the expert is the reset-state walkthrough: the demo goes on with it while
  its next action is admissible, and stops otherwise. With ``"recovering"`` the expert is
  :meth:`ReplayableEnv.expert_action <tempo_rl.envs.ReplayableEnv.expert_action>`, asked at every step: after
  a noisy step the demo shows the expert's recovery (weight 1), and it stops only when the episode ends, the
  step limit is reached or the episode can no longer be won (DART-style noise injection: the actor also
  learns the states its own slips lead to);
* every distinct expert action gets the same total weight (:func:`balance_actions`): the decisive rare actions
  are not drowned by the frequent ones;
* every demo also yields one critic *format* example: the critic prompt of a random state of the demo answered
  with ``<value>v</value>`` (less the critic's answer prefix, which its prompt already ends with), where ``v`` is
  drawn uniformly from the critic's answer grid (:data:`~tempo_rl.training.config.CRITIC_LEVELS` evenly spaced
  levels of [0, R_max]: the binary answers 0 and R_max). It teaches only the answer format, no value information
  (the value is independent of the state): what the critic knows about values it must learn in the RL warm-up.

Loss: ``cross_entropy`` with weight 1 on the expert's tool-call tokens (and the EOS that ends the turn) and on the
critic's answer tokens, 0 elsewhere; Adam with ``warmstart.learning_rate``, one ``optim_step`` per batch of
``warmstart.batch_size`` Datums, ``warmstart.epochs`` passes; with a cool-down
(:class:`~tempo_rl.training.options.TrainerOptions`) the step size falls linearly over its last share of the steps
(:func:`cooldown_learning_rate`).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from tempo_rl.backends.types import Datum
from tempo_rl.critic.base import CriticQuery
from tempo_rl.critic.levels import format_level
from tempo_rl.envs.snapshot import EnvSpec
from tempo_rl.envs.workers import EnvWorkerError
from tempo_rl.rollout.datums import SequenceBuilder, sft_datum
from tempo_rl.rollout.prompts import OBSERVATION_ROLE, build_actor_messages, format_observation
from tempo_rl.rollout.tool_call import format_tool_call
from tempo_rl.training.config import CRITIC_LEVELS
from tempo_rl.training.env_calls import GuardedEnvCalls

if TYPE_CHECKING:  # pragma: no cover
    from tempo_rl.training.trainer import MacroStepTrainer

__all__ = ["cooldown_learning_rate", "demonstration_datums", "warm_start"]


def demonstration_datums(
    trainer: MacroStepTrainer,
    game: tuple[EnvSpec, int],
    rng: np.random.Generator,
    calls: GuardedEnvCalls | None = None,
) -> list[Datum]:
    """The actor Datum of one (noisy) expert demonstration on ``game = (spec, seed)``, plus (sometimes) one
    critic format Datum.

    Every env call goes through the trainer's worker pool (``calls``, default: a new
    :meth:`GuardedEnvCalls.beside <tempo_rl.training.env_calls.GuardedEnvCalls.beside>` ``trainer.c.pool``),
    with its step deadline.

    Raises:
        ValueError: the env offers no expert: no walkthrough, or (``expert = "recovering"``) no
            ``expert_action()`` at its reset state.
        tempo_rl.envs.workers.EnvWorkerError: an env call raised or timed out (:func:`warm_start` drops
            the demo and counts it).
    """
    if calls is None:
        with GuardedEnvCalls.beside(trainer.c.pool) as own:
            return demonstration_datums(trainer, game, rng, own)
    cfg = trainer.config
    chat = trainer.c.chat
    tokenizer = chat.tokenizer
    eos = tokenizer.eos_token_id
    tool = trainer.c.parser.tool_name
    show = cfg.sampling.show_remaining_steps
    T = cfg.tempo.max_rounds
    spec, seed = game
    env = calls.make(trainer.c.make_env, spec, seed)
    try:
        recovering = cfg.warmstart.expert == "recovering"
        plan = [] if recovering else list(calls.call(env, "walkthrough") or ())
        if not recovering and not plan:
            raise ValueError(
                f"env {cfg.env.name!r} (seed {seed}) has no walkthrough(); set warmstart.episodes = 0 or use an "
                "env with an expert"
            )
        obs = calls.call(env, "last_observation")
        initial = obs.text
        task = str(obs.info.get("task", "")) if obs.info else ""
        privileged = calls.call(env, "privileged_info")
        state = chat.start(build_actor_messages(obs, tool_name=tool, remaining_steps=T if show else None))
        seq = SequenceBuilder()
        seq.add_context(state.tokens)
        weights: list[float] = [0.0] * len(state.tokens)
        labels: list[str | None] = [None] * len(state.tokens)
        history: list[tuple[str, str]] = []
        rounds = 0
        while rounds < T:
            expert = calls.call(env, "expert_action") if recovering else (plan[0] if plan else None)
            if expert is None and recovering and rounds == 0:
                raise ValueError(
                    f"env {cfg.env.name!r} (seed {seed}) has no expert_action() at its reset state; set "
                    "warmstart.expert = 'walkthrough' or implement ReplayableEnv.expert_action()"
                )
            if expert is None:
                break  # the walkthrough is done, or (recovering) the episode can no longer be won
            admissible = list(obs.admissible_actions or ())
            noisy = bool(admissible) and rng.random() < cfg.warmstart.noise
            if noisy:
                action = admissible[int(rng.integers(len(admissible)))]
            else:
                action = expert
                if not recovering:
                    plan.pop(0)
            completion = list(tokenizer.encode(format_tool_call(action, tool), add_special_tokens=False))
            if eos is not None:
                completion.append(int(eos))
            seq.add_sampled(completion, [0.0] * len(completion))
            weights.extend([0.0 if noisy else 1.0] * len(completion))
            labels.extend([None if noisy else action] * len(completion))
            result = calls.call(env, "step", action)
            rounds += 1
            obs = result.observation
            history.append((action, obs.text))
            if result.terminated or result.truncated or rounds >= T:
                break
            if plan and obs.admissible_actions is not None and plan[0] not in obs.admissible_actions:
                break  # (walkthrough) the noise broke the plan: the expert's next action no longer applies
            text = format_observation(obs, remaining_steps=T - rounds if show else None)
            ext = chat.extend(state, completion, [{"role": OBSERVATION_ROLE, "content": text}])
            if ext.restarted:
                break
            if len(seq) + len(ext.appended) + cfg.sampling.max_tokens > cfg.sampling.max_trajectory_tokens:
                break
            seq.add_context(ext.appended)
            weights.extend([0.0] * len(ext.appended))
            labels.extend([None] * len(ext.appended))
            state = ext.state
        datums = [_weighted_sft(seq, weights, trainer.vocab_size(), labels)]
        t = int(rng.integers(0, len(history) + 1))
        query = CriticQuery(
            task=task,
            history=history[:t],
            initial_observation=initial,
            privileged_info=privileged,
            remaining_steps=T - t if show else None,
            r_max=cfg.tempo.r_max,
        )
        prompt_fn = getattr(trainer.c.critic, "prompt_tokens", None)
        prompt = prompt_fn(query)[0] if callable(prompt_fn) else None
        if prompt is not None:
            rng.random()  # one uniform draw per demo before its level: the stream docs/results.md was measured on
            levels = CRITIC_LEVELS
            value = int(rng.integers(0, levels)) / (levels - 1) * cfg.tempo.r_max
            text = f"<value>{_format_value(value, levels, cfg.tempo.r_max)}</value>"
            text = text.removeprefix(getattr(trainer.c.critic, "answer_prefix", ""))  # the prompt holds it
            answer = list(tokenizer.encode(text, add_special_tokens=False))
            if eos is not None:
                answer.append(int(eos))
            datums.append(sft_datum(prompt, answer, vocab_size=trainer.vocab_size(), role="critic"))
        return datums
    finally:
        calls.close_env(env)


def _format_value(value: float, levels: int, r_max: float = 1.0) -> str:
    """A format example's value as the critic writes it (:func:`tempo_rl.critic.levels.format_level`: ``0``/``1``
    times R_max for 2 levels, one digit token each; otherwise the fewest decimals that write every level)."""
    return format_level(value, levels, r_max)


def _weighted_sft(
    seq: SequenceBuilder, weights: list[float], vocab_size: int | None, labels: list[str | None]
) -> Datum:
    """The demo's cross-entropy Datum with per-token weights; the expert action of each target token is kept
    in ``tags["labels"]`` (JSON) for :func:`balance_actions`, which removes it."""
    datum = seq.to_sft_datum(1.0, vocab_size=vocab_size, role="actor")
    w = np.asarray(weights, dtype=np.float32)[1:]
    return Datum(
        model_input=datum.model_input,
        loss_fn_inputs={"target_tokens": datum.loss_fn_inputs["target_tokens"], "weights": w},
        tags={**datum.tags, "labels": json.dumps(labels[1:])},
    )


def _strip_labels(datum: Datum) -> Datum:
    if "labels" not in datum.tags:
        return datum
    return Datum(
        datum.model_input, datum.loss_fn_inputs, {k: v for k, v in datum.tags.items() if k != "labels"}
    )


def balance_actions(datums: list[Datum]) -> list[Datum]:
    """Re-weight the expert's action tokens so that every distinct action carries the same total weight.

    Expert turns are dominated by a few frequent actions (``go on``); the decisive rare ones (``take red``,
    ``open door``) would be drowned. With ``n_a`` expert turns of action ``a`` among ``n`` turns and ``C``
    distinct actions, the tokens of each turn of ``a`` get weight ``w_a = n / (C * n_a)`` (mean weight per turn
    stays 1), clipped to [0.1, 10]. Datums without labels (critic format examples) are unchanged.
    """
    counts: Counter[str] = Counter()
    parsed: list[list[str | None] | None] = []
    for d in datums:
        labels = json.loads(d.tags["labels"]) if "labels" in d.tags else None
        parsed.append(labels)
        if labels is not None:
            previous = None
            for label in labels:  # count turns (runs of one label), not tokens
                if label is not None and label != previous:
                    counts[label] += 1
                previous = label
    total = sum(counts.values())
    out = []
    for d, labels in zip(datums, parsed):
        if labels is None or not counts:
            out.append(_strip_labels(d))
            continue
        w = np.asarray(d.loss_fn_inputs["weights"], dtype=np.float32).copy()
        for i, label in enumerate(labels):
            if label is not None and w[i] > 0:
                w[i] = float(np.clip(total / (len(counts) * counts[label]), 0.1, 10.0))
        out.append(
            Datum(
                d.model_input,
                {"target_tokens": d.loss_fn_inputs["target_tokens"], "weights": w},
                {k: v for k, v in d.tags.items() if k != "labels"},
            )
        )
    return out


def cooldown_learning_rate(step: int, total: int, learning_rate: float, cooldown: float) -> float:
    """The warm start's step size at optimiser step ``step`` (0-based) of ``total``: constant, then a linear
    cool-down over the last ``c = ceil(cooldown * total)`` steps::

        lr_k = learning_rate                                  for k <  total - c
        lr_k = learning_rate * (total - k) / (c + 1)          for k >= total - c

    so the last step takes ``learning_rate / (c + 1)`` and none takes 0. ``cooldown = 0``: constant.

    Why: for a token the demonstrations leave undecided (KeyDoor's key colour, when the locks are drawn apart
    from the signs) the loss is flat near an even split, so at a constant Adam step size its probability ends
    where the last steps' noise left it. The cool-down shrinks those last steps. Measured on the mechanism
    benchmark's ``keydoor_rule`` (``docs/results.md``): of two warm starts that took the rewarded key in 26 % and
    31 % of their key choices, cooling the last epoch balanced one (55 %) and not the other (36 %)."""
    if not 0 <= step < total:
        raise ValueError(f"step {step} outside 0..{total - 1}")
    c = math.ceil(cooldown * total)
    if step < total - c:
        return learning_rate
    return learning_rate * (total - step) / (c + 1)


def warm_start(trainer: MacroStepTrainer) -> dict[str, float]:
    """Run the supervised warm start (see the module docstring); returns ``warmstart/*`` metrics.

    With ``trainer.options.warmstart_cooldown`` = c > 0 the step size falls linearly from
    ``warmstart.learning_rate`` towards 0 over the last share c of the optimiser steps
    (:func:`cooldown_learning_rate`).

    Uses training seeds ``0 .. episodes-1`` of the env config (the RL data cursor is not moved) and the
    trainer's RNG (so a resumed run never repeats it: the run records ``warmstart_done``).
    """
    cfg = trainer.config
    ws = cfg.warmstart
    t0 = time.perf_counter()
    datums: list[Datum] = []
    with GuardedEnvCalls.beside(trainer.c.pool) as calls:
        for i in range(ws.episodes):
            try:
                spec, seed = cfg.env.train_game(i)
                if ws.env_kwargs:
                    spec = EnvSpec(name=spec.name, kwargs={**spec.kwargs, **ws.env_kwargs})
                datums.extend(demonstration_datums(trainer, (spec, seed), trainer.rng, calls))
            except EnvWorkerError:
                calls.failures += 1  # the demo is dropped, as a failed branch is in a rollout
    failures = calls.failures
    if failures == ws.episodes and ws.episodes > 0:
        raise RuntimeError(
            f"every one of the {ws.episodes} warm-start demonstrations failed in the env (see workers.* and the "
            f"env's errors); fix env {cfg.env.name!r} or set warmstart.episodes = 0"
        )
    datums = balance_actions(datums)
    build_s = time.perf_counter() - t0
    adam = cfg.optim.adam(ws.learning_rate)
    losses: list[float] = []
    steps = 0
    total = ws.epochs * math.ceil(len(datums) / ws.batch_size)  # the optimiser steps the loops below take
    for _ in range(ws.epochs):
        order = trainer.rng.permutation(len(datums))
        for b in range(0, len(order), ws.batch_size):
            batch = [datums[int(k)] for k in order[b : b + ws.batch_size]]
            out = trainer.c.training_client.forward_backward(batch, "cross_entropy", None)
            tokens = sum(float(np.sum(d.loss_fn_inputs["weights"])) for d in batch)
            losses.append(float(out.loss) / max(tokens, 1.0))
            lr = cooldown_learning_rate(steps, total, ws.learning_rate, trainer.options.warmstart_cooldown)
            trainer.c.training_client.optim_step(replace(adam, learning_rate=lr))
            steps += 1
    trainer.state.policy_version += 1
    trainer.c.sampler = trainer.c.training_client.save_weights_and_get_sampling_client(
        f"policy-{trainer.state.policy_version:06d}"
    )
    metrics: dict[str, float] = {
        "warmstart/datums": float(len(datums)),
        "warmstart/optim_steps": float(steps),
        "warmstart/loss_first": losses[0] if losses else float("nan"),
        "warmstart/loss_last": losses[-1] if losses else float("nan"),
        "warmstart/build_seconds": build_s,
        "warmstart/seconds": time.perf_counter() - t0,
    }
    if failures:  # only when it happened: a normal run's metrics keep their names
        metrics["warmstart/env_failures"] = float(failures)
    return metrics
