"""Shared pieces of the reliability tests: a tiny local-backend config and a scripted policy.

The local backend's tiny transformer, trained from scratch for a few updates, never writes a valid tool call,
so every group would be degenerate and no optimizer step would ever run. The scripted policy below samples
*meaningful* answers (a uniformly random admissible action as a tool call; a random ``<value>`` as the critic)
with reproducible seeds, while the real :class:`~tempo_rl.backends.local.LocalTrainingClient` trains on the
resulting Datums: real ``forward_backward`` / ``optim_step`` calls on a real torch model, every update.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tempo_rl.backends.types import SampledSequence, SampleResult, SamplingParams
from tempo_rl.rollout.tool_call import format_tool_call
from tempo_rl.training.config import TrainConfig, validate_config

REPO = Path(__file__).resolve().parents[2]

TINY = """
algorithm = "tempo"

[env]
name = "keydoor"
kwargs = { horizon = 12, keys = 1, colours = 2 }

[backend]
kind = "local"
hidden_size = 16
num_layers = 1
num_heads = 2
vocab_size = 1024
max_positions = 2048

[tempo]
max_rounds = 12
macro_rounds = 4
branches = 2
critic_samples = 2
endpoint_samples = 1
states_per_batch = 2
warmup_updates = 1
warmup_games_per_batch = 1
td_updates = 2
prefix_correction = "off"

[sampling]
max_tokens = 48
critic_max_tokens = 16
critic_max_prompt_tokens = 1500
max_trajectory_tokens = 1600
show_remaining_steps = false

[optim]
learning_rate = 1e-3

[workers]
step_timeout_s = 5.0

[run]
console = false
checkpoint_every = 1
min_free_disk_mb = 1
"""


def tiny_config(**sections: dict[str, Any]) -> TrainConfig:
    """The tiny config with ``section={field: value}`` overrides merged in."""
    data = tomllib.loads(TINY)
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return validate_config(data)


_ACTIONS = re.compile(r"Actions: ([^<\n]*)")


class ScriptedPolicy:
    """A SamplingClient: the actor calls a uniformly random listed action, the critic answers a random value.

    Every answer is a pure function of ``(prompt, params.seed, sample index)``. Tokens are the tokenizer's
    encoding of the answer plus EOS; each sampled token gets logprob ``-0.5``.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.requests = 0

    def _answer(self, prompt_text: str, rng: np.random.Generator) -> str:
        if "value estimator" in prompt_text:
            return f"<value>{int(rng.integers(0, 11)) / 10}</value>"
        lists = _ACTIONS.findall(prompt_text)
        actions = lists[-1].split(" | ") if lists else ["look"]
        return format_tool_call(actions[int(rng.integers(len(actions)))].strip())

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleResult:
        self.requests += 1
        text = self.tokenizer.decode(list(prompt), skip_special_tokens=False)
        digest = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big")
        rng = np.random.default_rng([digest, params.seed or 0])
        seqs = []
        for _ in range(num_samples):
            ids = self.tokenizer.encode(self._answer(text, rng), add_special_tokens=False)
            tokens = (*ids[: params.max_tokens - 1], self.tokenizer.eos_token_id)
            seqs.append(
                SampledSequence(
                    tokens=tuple(int(t) for t in tokens),
                    logprobs=tuple(-0.5 for _ in tokens),
                    text=self.tokenizer.decode(list(tokens), skip_special_tokens=False),
                )
            )
        return SampleResult(sequences=tuple(seqs))

    async def sample_async(
        self, prompt: Sequence[int], num_samples: int, params: SamplingParams
    ) -> SampleResult:
        return self.sample(prompt, num_samples, params)

    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        return [None] + [-0.5] * (len(tokens) - 1)

    async def compute_logprobs_async(self, tokens: Sequence[int]) -> list[float | None]:
        return self.compute_logprobs(tokens)


class PolicyTrainingClient:
    """Forwards everything to the real local training client, except that its samplers are the policy."""

    def __init__(self, inner: Any, policy: ScriptedPolicy) -> None:
        self.inner = inner
        self.policy = policy

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> ScriptedPolicy:
        return self.policy

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "policy"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def use_scripted_policy(trainer: Any) -> None:
    """Swap the scripted policy in under the trainer's retry layer (the training client stays the real one)."""
    from tempo_rl.backends.retry import RetryingTrainingClient

    client = trainer.c.training_client
    assert isinstance(client, RetryingTrainingClient), "the local backend must be wrapped for retries"
    policy = ScriptedPolicy(trainer.c.chat.tokenizer)
    client.inner = PolicyTrainingClient(client.inner, policy)
    trainer.c.sampler = client.wrap_sampler(policy)


def local_client(trainer: Any) -> Any:
    """The real LocalTrainingClient under every wrapper."""
    client = trainer.c.training_client
    while hasattr(client, "inner") and type(client).__name__ != "LocalTrainingClient":
        client = client.inner
    return client
