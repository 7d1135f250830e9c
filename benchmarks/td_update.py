"""Benchmark: where the time of one TEMPO TD update goes, with no model cost.

One TD update of :class:`tempo_rl.training.tempo.TempoTrainer` on generated ALFWorld games (the offline generator
of :mod:`tempo_rl.envs.alfworld.generator`), driven by an instant scripted policy (a random admissible action per
turn) and an instant scripted critic (``<value>0.5</value>``), so that what remains is the env (steps and verified
restores) and everything else the trainer does (prompt rendering, tool-call parsing, critic prompts, signals,
Datum assembly, the store). A first TD update fills the store with endpoints; the measured update restores them
(every branch a verified replay) and mixes in fresh games, as in training.

Prints ONE JSON line::

    {"env_s": ..., "restore_s": ..., "env_total_s": ..., "other_s": ..., "other_share_of_env": ..., ...}

``other_share_of_env = other_s / env_total_s``, target <= 0.2. ``--quick``: fewer games, branches and rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tempo_rl.backends.types import ForwardBackwardOutput, SampledSequence, SampleResult, SamplingParams
from tempo_rl.testing.policies import ScriptedSamplerBase


class InstantPolicy(ScriptedSamplerBase):
    """A SamplingClient with no model: actor turns pick a random admissible action, critic turns say 0.5."""

    nominal_logprob = -0.5

    def __init__(self, tokenizer: Any) -> None:
        from tempo_rl.rollout.tool_call import format_tool_call

        self.tokenizer = tokenizer
        self.format = format_tool_call
        self.eos = tokenizer.eos_token_id
        self.value = (*tokenizer.encode("<value>0.5</value>", add_special_tokens=False), self.eos)
        self.seconds = 0.0

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleResult:
        t0 = time.perf_counter()
        tail = self.tokenizer.decode(list(prompt[-400:]), skip_special_tokens=False)
        rng = np.random.default_rng(params.seed)
        seqs = []
        for _ in range(num_samples):
            if "<value>" in tail or "value estimator" in tail:
                tokens = self.value
            else:
                found = re.findall(r"Actions: (.*)", tail)
                actions = found[-1].split(" | ") if found else ["look"]
                text = self.format(actions[int(rng.integers(len(actions)))])
                tokens = (*self.tokenizer.encode(text, add_special_tokens=False), self.eos)
            seqs.append(
                SampledSequence(
                    tokens=tokens,
                    logprobs=(-0.5,) * len(tokens),
                    text=self.tokenizer.decode(list(tokens), skip_special_tokens=False),
                )
            )
        self.seconds += time.perf_counter() - t0
        return SampleResult(sequences=tuple(seqs))


class NullTrainingClient:
    """Accepts Datums and optimiser steps instantly (no model)."""

    def __init__(self, sampler: InstantPolicy) -> None:
        self.sampler = sampler
        self.datums = 0

    def forward_backward(self, datums: Sequence[Any], loss_fn: str, loss_fn_config: Any = None) -> Any:
        self.datums += len(datums)
        return ForwardBackwardOutput(loss=0.0)

    def optim_step(self, adam_params: Any) -> None:
        pass

    def save_state(self, name: str) -> str:
        return f"memory://{name}"

    def load_state(self, path: str) -> None:
        pass

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> InstantPolicy:
        return self.sampler

    def get_tokenizer(self) -> Any:
        return self.sampler.tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    args = parser.parse_args(argv)

    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.critic.generative import GenerativeCritic
    from tempo_rl.envs import ForkCache
    from tempo_rl.envs.alfworld.generator import generate_games
    from tempo_rl.envs.workers import EnvWorkerPool
    from tempo_rl.rollout.renderer import ChatRenderer
    from tempo_rl.rollout.tool_call import ToolCallParser
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import env_corpus, locked_restore_branches, make_env_at_reset
    from tempo_rl.training.store import StateStore
    from tempo_rl.training.tempo import TempoTrainer
    from tempo_rl.training.types import TrainerComponents

    quick = args.quick
    per_type, types = (1, ("look_at_obj_in_light", "pick_and_place_simple")) if quick else (1, None)
    h, n, states, t_max = (3, 2, 2, 12) if quick else (5, 4, 4, 30)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        generate_games(tmp, per_type=per_type, seed=0, task_types=types)
        gen_s = time.perf_counter() - t0
        cfg = load_config(
            None,
            [
                "env.name=alfworld",
                f'env.games_dir="{Path(tmp) / "json_2.1.1" / "train"}"',
                f"env.kwargs={{max_steps={t_max}}}",
                f"tempo.max_rounds={t_max}",
                f"tempo.macro_rounds={h}",
                f"tempo.branches={n}",
                "tempo.critic_samples=4",
                "tempo.endpoint_samples=2",
                f"tempo.states_per_batch={states}",
                "tempo.fresh_share=0.25",
                "sampling.max_tokens=64",
                "sampling.critic_max_tokens=16",
                "sampling.max_trajectory_tokens=60000",
                "sampling.critic_max_prompt_tokens=60000",
                'tempo.prefix_correction="off"',
                'sampling.critic_answer="sampled"',  # its scripted critic samples answers
                "kl.coef=0.0",
            ],
        )
        tokenizer = build_tokenizer(env_corpus(cfg, games=1), vocab_size=2048)
        policy = InstantPolicy(tokenizer)
        chat = ChatRenderer(tokenizer)
        cache = ForkCache()
        components = TrainerComponents(
            training_client=NullTrainingClient(policy),  # type: ignore[arg-type]
            sampler=policy,
            chat=chat,
            critic=GenerativeCritic(
                chat, SamplingParams(max_tokens=16, stop=(tokenizer.eos_token_id,)), max_prompt_tokens=60000
            ),
            store=StateStore(None),
            pool=EnvWorkerPool(max_workers=8, step_timeout_s=600),
            parser=ToolCallParser(),
            make_env=make_env_at_reset,
            restore_branches=lambda snap, k: locked_restore_branches(snap, k, cache),
        )
        trainer = TempoTrainer(cfg, components)
        asyncio.run(trainer.td_update(0))  # fills the store with endpoints
        cache.clear()  # the measured update restores by verified replay, not from a warm fork cache
        policy.seconds = 0.0
        t1 = time.perf_counter()
        metrics = asyncio.run(trainer.td_update(1))
        total = time.perf_counter() - t1
        trainer.c.pool.close()
        trainer.c.store.close()
    env_s = metrics.get("time/env_s", 0.0)
    restore_s = metrics.get("time/restore_s", 0.0)
    env_total = env_s + restore_s
    scripted = policy.seconds
    other = max(0.0, total - env_total - scripted)
    print(
        json.dumps(
            {
                "benchmark": "td_update",
                "quick": quick,
                "games": per_type * (len(types) if types else 6),
                "states": states,
                "branches": n,
                "macro_rounds": h,
                "reused_states": metrics.get("td/reused_states"),
                "restore_depth_mean": metrics.get("td/start_round_mean"),
                "env_s": round(env_s, 4),
                "restore_s": round(restore_s, 4),
                "env_total_s": round(env_total, 4),
                "scripted_policy_s": round(scripted, 4),
                "other_s": round(other, 4),
                "other_share_of_env": round(other / env_total, 4) if env_total > 0 else None,
                "target_other_share_of_env": 0.2,
                "update_s": round(total, 4),
                "generate_games_s": round(gen_s, 2),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
