"""The generative critic: the policy model itself, prompted as a value estimator.

One state -> one prompt (:mod:`tempo_rl.critic.prompt`) -> K samples in a single
``sample_async(prompt, num_samples=K)`` -> K values read by the strict parser (:mod:`tempo_rl.critic.parse`).

Prompt budget: when the rendered prompt is longer than ``max_prompt_tokens``, the smallest number of middle
history turns is omitted that makes it fit (found by bisection over the omitted count, each probe one render),
and the estimates report ``prompt_too_long=True`` with ``omitted_turns``. When even omitting the whole history
does not fit, nothing is sampled: all K values are NaN. An over-long prompt is never silently worth 0.

Answer prefix (prefill): with ``answer_prefix="<value>"`` the prompt ends with the opening tag already written
in the assistant turn, so the model samples only the number and the closing tag, and each answer is read as
``answer_prefix + completion``. The prefix's tokens belong to the prompt, so the critic is never trained on the
first token of its turn, the token where the actor's tool calls start too. It also removes the critic's
reasoning: leave it empty for a model that should think before it answers (``docs/results.md`` measures it on
the offline main job's tiny model).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tempo_rl.backends.types import SamplingClient, SamplingParams
from tempo_rl.critic.base import Critic, CriticEstimates, CriticQuery, CriticSample
from tempo_rl.critic.parse import ValueStatus, classify_value
from tempo_rl.critic.prompt import DEFAULT_CRITIC_SYSTEM_PROMPT, Message, build_critic_messages

__all__ = ["GenerativeCritic", "RenderFn", "as_render_fn", "status_counts"]

#: Renders a chat (ending with a user turn) into the token ids of a generation prompt.
RenderFn = Callable[[Sequence[Message]], Sequence[int]]


def _text_encoder(renderer: Any) -> Callable[[str], Sequence[int]] | None:
    """Plain-text encoding (no special tokens added) through the tokenizer of a ChatRenderer, or a tokenizer
    itself; None when ``renderer`` offers neither."""
    tokenizer = getattr(renderer, "tokenizer", renderer)
    encode = getattr(tokenizer, "encode", None)
    if not callable(encode):
        return None
    return lambda text: [int(t) for t in encode(text, add_special_tokens=False)]


def as_render_fn(renderer: Any) -> RenderFn:
    """Turn a renderer into a :data:`RenderFn`.

    Accepted, in this order: an object with ``render_generation_prompt(messages)``; tempo-rl's
    :class:`~tempo_rl.rollout.renderer.ChatRenderer` (``start(messages).tokens``); a Hugging Face tokenizer
    (``apply_chat_template(messages, add_generation_prompt=True, tokenize=True)``); a plain callable
    ``messages -> token ids``.
    """
    method = getattr(renderer, "render_generation_prompt", None)
    if callable(method):
        return lambda messages: list(method(list(messages)))
    start = getattr(renderer, "start", None)
    if callable(start):  # tempo_rl.rollout.renderer.ChatRenderer: start(messages) -> PromptState

        def render_start(messages: Sequence[Message]) -> Sequence[int]:
            return list(start(list(messages)).tokens)

        return render_start
    apply = getattr(renderer, "apply_chat_template", None)
    if callable(apply):

        def render_hf(messages: Sequence[Message]) -> Sequence[int]:
            out = apply(list(messages), add_generation_prompt=True, tokenize=True)
            if isinstance(out, dict) or hasattr(out, "keys"):  # BatchEncoding in recent transformers
                out = out["input_ids"]
            return [int(t) for t in out]

        return render_hf
    if callable(renderer):
        return lambda messages: list(renderer(list(messages)))
    raise TypeError(
        f"renderer must be a tempo_rl ChatRenderer, have render_generation_prompt(messages), be a Hugging "
        f"Face tokenizer with a chat template, or be a callable messages -> token ids; got "
        f"{type(renderer).__name__}"
    )


class GenerativeCritic(Critic):
    """K value estimates of a state from K samples of the policy model prompted as a value estimator.

    Args:
        renderer: turns ``[system, user]`` messages into prompt tokens (see :func:`as_render_fn`).
        sampling_params: the critic's sampling settings (``max_tokens`` bounds its reasoning).
        max_prompt_tokens: the prompt token budget; longer prompts omit middle history turns.
        system_prompt: the system prompt; ``{r_max}`` is replaced by the query's R_max.
        max_observation_chars: cut each observation in the condensed history to this many characters.
        answer_prefix: text the assistant turn starts with, e.g. ``"<value>"`` (see the module docstring);
            needs a renderer that can encode text (a ChatRenderer or a tokenizer).
    """

    def __init__(
        self,
        renderer: Any,
        sampling_params: SamplingParams,
        max_prompt_tokens: int,
        system_prompt: str = DEFAULT_CRITIC_SYSTEM_PROMPT,
        *,
        max_observation_chars: int | None = None,
        answer_prefix: str = "",
    ) -> None:
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        self._render = as_render_fn(renderer)
        self.answer_prefix = answer_prefix
        self._prefix_tokens: tuple[int, ...] = ()
        if answer_prefix:
            encode = _text_encoder(renderer)
            if encode is None:
                raise TypeError(
                    f"answer_prefix={answer_prefix!r} needs a renderer that can encode text (a tempo_rl "
                    f"ChatRenderer or a tokenizer with encode()); got {type(renderer).__name__}. Pass one, or "
                    "leave answer_prefix empty"
                )
            self._prefix_tokens = tuple(encode(answer_prefix))
        self.sampling_params = sampling_params
        self.max_prompt_tokens = int(max_prompt_tokens)
        self.system_prompt = system_prompt
        self.max_observation_chars = max_observation_chars

    def messages(self, query: CriticQuery, omitted: int = 0) -> list[Message]:
        """The critic chat for ``query`` with ``omitted`` middle turns left out."""
        return build_critic_messages(
            query,
            system_prompt=self.system_prompt,
            omitted=omitted,
            max_observation_chars=self.max_observation_chars,
        )

    def _prompt(self, query: CriticQuery, omitted: int) -> tuple[int, ...]:
        return (*self._render(self.messages(query, omitted)), *self._prefix_tokens)

    def prompt_tokens(self, query: CriticQuery) -> tuple[tuple[int, ...] | None, int]:
        """The prompt tokens (ending with the answer prefix's) within budget and the number of omitted turns;
        ``(None, n)`` if nothing fits."""
        n = len(query.history)
        full = self._prompt(query, 0)
        if len(full) <= self.max_prompt_tokens:
            return full, 0
        emptiest = self._prompt(query, n)
        if len(emptiest) > self.max_prompt_tokens:
            return None, n
        lo, hi, best = 1, n, emptiest  # invariant: omitting hi turns fits
        while lo < hi:
            mid = (lo + hi) // 2
            tokens = self._prompt(query, mid)
            if len(tokens) <= self.max_prompt_tokens:
                hi, best = mid, tokens
            else:
                lo = mid + 1
        return best, hi

    async def estimate(
        self, query: CriticQuery, k: int, sampler: SamplingClient, *, seed: int | None = None
    ) -> CriticEstimates:
        """Sample K answers in one request (seeded with ``seed`` when given, else with ``sampling_params.seed``)
        and parse each; see the module docstring for the budget rule."""
        if k < 1:
            raise ValueError(f"k (the number of critic samples) must be >= 1, got {k}")
        prompt, omitted = self.prompt_tokens(query)
        if prompt is None:
            return CriticEstimates(
                values=np.full(k, np.nan), samples=(), prompt_too_long=True, omitted_turns=omitted
            )
        params = (
            self.sampling_params if seed is None else dataclasses.replace(self.sampling_params, seed=seed)
        )
        result = await sampler.sample_async(list(prompt), k, params)
        if len(result.sequences) != k:
            raise RuntimeError(f"the sampler returned {len(result.sequences)} sequences for num_samples={k}")
        samples = []
        for seq in result.sequences:
            read = classify_value(self.answer_prefix + seq.text, query.r_max)
            value = read.value if read.value is not None else float("nan")
            samples.append(CriticSample(prompt_tokens=prompt, sequence=seq, value=value, status=read.status))
        values = np.array([s.value for s in samples], dtype=np.float64)
        return CriticEstimates(
            values=values, samples=tuple(samples), prompt_too_long=omitted > 0, omitted_turns=omitted
        )


def status_counts(estimates: CriticEstimates) -> dict[ValueStatus, int]:
    """How many samples were read with each :class:`ValueStatus` (for parse-failure metrics)."""
    counts = dict.fromkeys(ValueStatus, 0)
    for sample in estimates.samples:
        counts[sample.status] += 1
    return counts
