"""Test doubles for trainer tests: a scripted actor/critic sampler and a recording training client.

The scripted sampler plays KeyDoor like a noisy expert (it reads the sign in its own prompt, picks the right key
with probability ``p_right``) and, when prompted as the critic, answers like an oracle that reads the privileged
layout: 1.0 after the right key, 0.0 after a wrong one, ``undecided`` before the choice. Everything is a pure
function of (prompt, seed), so tests are deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tempo_rl.backends.types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    SampledSequence,
    SampleResult,
    SamplingParams,
)
from tempo_rl.critic.generative import GenerativeCritic
from tempo_rl.envs import ForkCache
from tempo_rl.envs.workers import EnvWorkerPool
from tempo_rl.rollout.renderer import ChatRenderer
from tempo_rl.rollout.tool_call import ToolCallParser, format_tool_call
from tempo_rl.testing.policies import ScriptedSamplerBase
from tempo_rl.training.config import TrainConfig, apply_overrides, config_from
from tempo_rl.training.run import env_corpus, locked_restore_branches, make_env_at_reset
from tempo_rl.training.store import StateStore
from tempo_rl.training.types import TrainerComponents

SIGN = re.compile(r"A sign shows a (\w+) key")
RIGHT = re.compile(r"the right key is (\w+)")
TAKEN = re.compile(r"Actor: take (\w+)")


class ScriptedSampler(ScriptedSamplerBase):
    """A SamplingClient whose actor answers are a noisy KeyDoor expert and critic answers an oracle."""

    nominal_logprob = -0.25

    def __init__(
        self, tokenizer: Any, *, p_right: float = 0.5, undecided: float = 0.5, garbage: bool = False
    ):
        self.tokenizer = tokenizer
        self.p_right = p_right
        self.undecided = undecided
        self.garbage = garbage
        self.requests: list[tuple[int, int]] = []  # (prompt length, num_samples)

    def _encode(self, text: str) -> tuple[int, ...]:
        return (*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id)

    def _answer(self, prompt_text: str, rng: np.random.Generator) -> str:
        if "value estimator" in prompt_text:
            if self.garbage:
                return "no idea"
            right = RIGHT.search(prompt_text)
            taken = TAKEN.findall(prompt_text)
            if not taken or right is None:
                return f"<value>{self.undecided}</value>"
            return "<value>1.0</value>" if taken[-1] == right.group(1) else "<value>0.0</value>"
        actions = re.findall(r"Actions: (.*)", prompt_text)[-1].split(" | ")
        takes = [a for a in actions if a.startswith("take ")]
        if takes:
            sign = SIGN.findall(prompt_text)
            good = f"take {sign[-1]}" if sign else takes[0]
            bad = [a for a in takes if a != good]
            action = good if (rng.random() < self.p_right or not bad) else bad[int(rng.integers(len(bad)))]
        elif "open door" in actions:
            action = "open door"
        else:
            action = "go on"
        return format_tool_call(action)

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleResult:
        self.requests.append((len(prompt), num_samples))
        text = self.tokenizer.decode(list(prompt), skip_special_tokens=False)
        rng = np.random.default_rng(params.seed)
        seqs = []
        for _ in range(num_samples):
            tokens = self._encode(self._answer(text, rng))[: params.max_tokens]
            seqs.append(
                SampledSequence(
                    tokens=tokens,
                    logprobs=tuple(-0.25 for _ in tokens),
                    text=self.tokenizer.decode(list(tokens), skip_special_tokens=False),
                    stop_reason="stop",
                )
            )
        return SampleResult(sequences=tuple(seqs))


class RecordingTrainingClient:
    """A TrainingClient that records every call (no model)."""

    def __init__(self, sampler: ScriptedSampler, reference: Any = None) -> None:
        self.sampler = sampler
        self.reference = reference  # what a snapshot named "kl-reference" samples from (default: sampler)
        self.calls: list[tuple[str, Any]] = []
        self.losses: list[str] = []  # the loss_fn of each forward_backward call

    def forward_backward(self, datums: Sequence[Datum], loss_fn: str, loss_fn_config: Any = None) -> Any:
        self.calls.append(("forward_backward", list(datums)))
        self.losses.append(loss_fn)
        return ForwardBackwardOutput(loss=0.0)

    def optim_step(self, adam_params: AdamParams) -> None:
        self.calls.append(("optim_step", adam_params))

    def save_state(self, name: str) -> str:
        self.calls.append(("save_state", name))
        return f"memory://{name}"

    def load_state(self, path: str) -> None:
        self.calls.append(("load_state", path))

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> ScriptedSampler:
        self.calls.append(("save_weights", name))
        if name == "kl-reference" and self.reference is not None:
            return self.reference
        return self.sampler

    def get_tokenizer(self) -> Any:
        return self.sampler.tokenizer


TINY = [
    "env.kwargs={horizon=16, keys=1, colours=2}",
    "tempo.max_rounds=16",
    "tempo.macro_rounds=4",
    "tempo.branches=4",
    "tempo.critic_samples=4",
    "tempo.endpoint_samples=2",
    "tempo.states_per_batch=2",
    "tempo.warmup_games_per_batch=2",
    "sampling.max_tokens=40",
    "sampling.critic_max_tokens=16",
    "sampling.max_trajectory_tokens=4000",
    "sampling.show_remaining_steps=false",
    # the scripted critic samples its answers, and these tests train without the KL anchor
    'sampling.critic_answer="sampled"',
    "kl.coef=0.0",
]

_TOKENIZERS: dict[str, Any] = {}


def tokenizer_for(config: TrainConfig) -> Any:
    """A cached offline tokenizer trained on the env corpus of ``config``."""
    from tempo_rl.backends.local.tokenizer import build_tokenizer

    key = config.env.spec().key()
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = build_tokenizer(env_corpus(config, games=8), vocab_size=1024)
    return _TOKENIZERS[key]


def scripted_components(
    config: TrainConfig, *, store_path: Path | None = None, **sampler_kwargs: Any
) -> tuple[TrainerComponents, ScriptedSampler, RecordingTrainingClient]:
    """Components with the scripted sampler, a recording training client and the real store/pool/critic."""
    tokenizer = tokenizer_for(config)
    sampler = ScriptedSampler(tokenizer, **sampler_kwargs)
    training = RecordingTrainingClient(sampler)
    chat = ChatRenderer(tokenizer)
    critic = GenerativeCritic(
        chat,
        SamplingParams(max_tokens=config.sampling.critic_max_tokens, stop=(tokenizer.eos_token_id,)),
        max_prompt_tokens=config.sampling.critic_max_prompt_tokens,
    )
    cache = ForkCache()
    components = TrainerComponents(
        training_client=training,  # type: ignore[arg-type]
        sampler=sampler,
        chat=chat,
        critic=critic,
        store=StateStore(store_path, capacity=config.store.capacity),
        pool=EnvWorkerPool(max_workers=4, step_timeout_s=30),
        parser=ToolCallParser(),
        make_env=make_env_at_reset,
        restore_branches=lambda snap, n: locked_restore_branches(snap, n, cache),
    )
    return components, sampler, training


def tiny_config(*overrides: str) -> TrainConfig:
    """The tiny KeyDoor config of these tests plus ``overrides``, as a config file and its ``--set`` overrides
    (an ``algorithm`` override leaves out the tiny config's TEMPO settings; see ``load_config``)."""
    return config_from(apply_overrides({}, TINY), overrides)
