"""Scripted policies for tests and benchmarks: a sampling client that plays any env with listed actions.

A tiny model trained from scratch for a few updates never writes a valid tool call, so every group would be
degenerate and no optimizer step would run. :class:`ScriptedPolicy` answers *meaningfully* instead: as the
actor, a uniformly random action from the last ``Actions: a | b | ...`` line of its prompt, as a tool call; as
the critic, a random ``<value>`` in {0, 0.1, ..., 1}. :func:`use_scripted_policy` swaps it in under a trainer's
retry layer while the training client stays the real one, so the backend still trains on every update.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from tempo_rl.backends.types import SampledSequence, SampleResult, SamplingParams
from tempo_rl.rollout.tool_call import format_tool_call

__all__ = [
    "PolicyTrainingClient",
    "ScriptedPolicy",
    "ScriptedSamplerBase",
    "innermost_client",
    "use_scripted_policy",
]

_ACTIONS = re.compile(r"Actions: ([^<\n]*)")


class ScriptedSamplerBase:
    """The SamplingClient boilerplate shared by scripted (model-free) samplers.

    Subclasses implement :meth:`sample`; every sampled token is given the nominal logprob
    :attr:`nominal_logprob`, and :meth:`compute_logprobs` reports the same value for every token after the first,
    so importance ratios against a scripted sampler are exactly 1.
    """

    nominal_logprob: float = -0.5

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleResult:
        raise NotImplementedError

    async def sample_async(
        self, prompt: Sequence[int], num_samples: int, params: SamplingParams
    ) -> SampleResult:
        """Same as :meth:`sample`."""
        return self.sample(prompt, num_samples, params)

    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        """:attr:`nominal_logprob` for every token after the first."""
        return [None] + [self.nominal_logprob] * (len(tokens) - 1)

    async def compute_logprobs_async(self, tokens: Sequence[int]) -> list[float | None]:
        """Same as :meth:`compute_logprobs`."""
        return self.compute_logprobs(tokens)


class ScriptedPolicy(ScriptedSamplerBase):
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
        """``num_samples`` scripted answers to ``prompt`` (decoded to text to find the listed actions)."""
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
                    logprobs=tuple(self.nominal_logprob for _ in tokens),
                    text=self.tokenizer.decode(list(tokens), skip_special_tokens=False),
                )
            )
        return SampleResult(sequences=tuple(seqs))


class PolicyTrainingClient:
    """Forwards everything to the real local training client, except that its samplers are the policy."""

    def __init__(self, inner: Any, policy: ScriptedPolicy) -> None:
        self.inner = inner
        self.policy = policy

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> ScriptedPolicy:
        """The scripted policy (the weights are still trained, just not sampled from)."""
        return self.policy

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "policy"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def use_scripted_policy(trainer: Any, policy: ScriptedPolicy | None = None) -> None:
    """Swap a scripted policy (default: :class:`ScriptedPolicy` over the trainer's tokenizer) in under the
    trainer's retry layer (the training client stays the real one)."""
    from tempo_rl.backends.retry import RetryingTrainingClient

    client = trainer.c.training_client
    if not isinstance(client, RetryingTrainingClient):
        raise TypeError(
            f"use_scripted_policy needs a trainer built by tempo_rl.training.run.build_trainer on the local "
            f"backend (a RetryingTrainingClient); got {type(client).__name__}"
        )
    policy = policy or ScriptedPolicy(trainer.c.chat.tokenizer)
    client.inner = PolicyTrainingClient(client.inner, policy)
    trainer.c.sampler = client.wrap_sampler(policy)


def innermost_client(trainer: Any) -> Any:
    """The training client under every wrapper (``.inner`` chain), e.g. the real LocalTrainingClient."""
    client = trainer.c.training_client
    while getattr(client, "inner", None) is not None:
        client = client.inner
    return client
