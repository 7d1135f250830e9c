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

Answer modes (``answer``):

* ``"sampled"`` (the blog's, and the only one for remote backends): K free completions, read by the strict
  parser; an answer the model garbles is a parse failure (NaN).
* ``"constrained"``: the answer can only be one of the L valid answers ``<value>{v_i}</value>`` of the level
  grid (:mod:`tempo_rl.critic.levels`, ``levels`` = L, the warm start's format grid). The model scores each
  complete answer after the prompt: with a sampler that has ``score_continuations_async`` (the local
  backend) the prompt is prefilled once and its keys and values are shared by the L answers; otherwise by
  ``compute_logprobs`` of ``prompt + answer_i``, L forward passes over the whole prompt. The scores are
  restricted to the valid answers and renormalised, ``q_i = p(answer_i) / sum_j p(answer_j)``, and the K
  samples are drawn from ``q`` (seeded); each sample's value is its level. Exact constrained decoding over
  the whole answer (not token by token), so every sample parses by construction, however much mass the model
  has moved elsewhere.
* ``"expected"``: the critic's estimate of the state is the exact expectation ``V = sum_i q_i v_i``
  (``CriticEstimates.expectation``), which :func:`~tempo_rl.critic.endpoint_value` bootstraps from instead of
  the mean of E noisy draws. The estimates also carry every scored answer (``CriticEstimates.answers``), and
  the trainer trains them by the log-loss ``-sum_i w_i(G) log p(answer_i)`` against the target's two-hot
  weights (:func:`~tempo_rl.critic.levels.two_hot`), not by rewards on the K draws: a reward centred over
  K draws has no gradient once they agree, and on the offline main job it drove every answer to ``0``
  within 20 warm-up updates (``docs/results.md``). The K draws are still made, for the metrics.

Logprobs of a constrained sample. Its sequence carries ``log p_theta(token | prefix)`` of the *unrestricted*
model (``log_softmax`` over the whole vocabulary, from the same full forward pass that the learner's loss
runs), not ``log q``: the learner computes the unrestricted logprob, so the importance ratio
``exp(lp_learner - lp_sampler)`` is exactly 1 on the weights that sampled (reporting ``log q`` would make it
``sum_j p(answer_j)``, a format-mass factor, not a policy change). The gradient is then
``A_k grad log p(answer_k)``, while the restricted policy's is ``A_k (grad log p(answer_k) - grad log Z)``,
``Z = sum_j p(answer_j)``. ``Z`` is the same for the K samples of one prompt, so with advantages centred
over the K samples (as the trainer centres them, in the warm-up and in TD) the extra term
``grad log Z * sum_k A_k`` is exactly 0 and the two gradients are equal.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from tempo_rl.backends.types import SampledSequence, SamplingClient, SamplingParams
from tempo_rl.critic.base import Critic, CriticEstimates, CriticQuery, CriticSample
from tempo_rl.critic.levels import format_level, level_values, restricted_probs
from tempo_rl.critic.parse import ValueStatus, classify_value
from tempo_rl.critic.prompt import DEFAULT_CRITIC_SYSTEM_PROMPT, Message, build_critic_messages, shown_turns

__all__ = ["ANSWER_MODES", "AnswerMode", "GenerativeCritic", "RenderFn", "as_render_fn", "status_counts"]

#: How the critic answers (see the module docstring).
AnswerMode = Literal["sampled", "constrained", "expected"]
ANSWER_MODES: tuple[str, ...] = ("sampled", "constrained", "expected")

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
        history_turns: show the critic only the last this many turns of the interaction (None: all); the
            prompt budget then omits middle turns of those.
        answer_prefix: text the assistant turn starts with, e.g. ``"<value>"`` (see the module docstring);
            needs a renderer that can encode text (a ChatRenderer or a tokenizer).
        answer: ``"sampled"``, ``"constrained"`` or ``"expected"`` (see the module docstring); the last two
            need a renderer that can encode text and a sampler with ``compute_logprobs_async``.
        levels: L, the number of answer levels of ``[0, R_max]`` for ``"constrained"`` / ``"expected"``.
    """

    def __init__(
        self,
        renderer: Any,
        sampling_params: SamplingParams,
        max_prompt_tokens: int,
        system_prompt: str = DEFAULT_CRITIC_SYSTEM_PROMPT,
        *,
        max_observation_chars: int | None = None,
        history_turns: int | None = None,
        answer_prefix: str = "",
        answer: AnswerMode = "sampled",
        levels: int = 11,
    ) -> None:
        if max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        if history_turns is not None and history_turns < 0:
            raise ValueError(f"history_turns must be >= 0 or None, got {history_turns}")
        if answer not in ANSWER_MODES:
            raise ValueError(f"answer must be one of {ANSWER_MODES}, got {answer!r}")
        self._render = as_render_fn(renderer)
        self.answer_prefix = answer_prefix
        self.answer: AnswerMode = answer
        self.levels = int(levels)
        self._prefix_tokens: tuple[int, ...] = ()
        encode = _text_encoder(renderer)
        if answer != "sampled":
            level_values(self.levels)  # validates levels
            if encode is None:
                raise TypeError(
                    f"answer={answer!r} needs a renderer that can encode text (a tempo_rl ChatRenderer or a "
                    f"tokenizer with encode()); got {type(renderer).__name__}. Pass one, or use answer='sampled'"
                )
        self._encode = encode
        self._answers: dict[float, tuple[tuple[float, str, tuple[int, ...]], ...]] = {}
        if answer_prefix:
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
        self.history_turns = history_turns

    def messages(self, query: CriticQuery, omitted: int = 0) -> list[Message]:
        """The critic chat for ``query`` with ``omitted`` middle turns left out."""
        return build_critic_messages(
            query,
            system_prompt=self.system_prompt,
            omitted=omitted,
            max_observation_chars=self.max_observation_chars,
            history_turns=self.history_turns,
        )

    def answer_set(self, r_max: float) -> tuple[tuple[float, str, tuple[int, ...]], ...]:
        """The L valid answers of the level grid: ``(v_i, completion text, its tokens)``, where the completion
        is ``<value>{v_i}</value>`` without the part that ``answer_prefix`` already wrote into the prompt, and
        ``v_i`` is the value the answer writes (the grid level rounded to the answer's decimals, at most 4).

        Raises:
            ValueError: a completion that the strict parser would not read back as its level (an
                ``answer_prefix`` that clashes with the answer format), or two answers with the same tokens.
        """
        cached = self._answers.get(r_max)
        if cached is not None:
            return cached
        assert self._encode is not None
        full_prefix = "<value>"
        out = []
        for v in level_values(self.levels, r_max):
            full = f"<value>{format_level(v, self.levels, r_max)}</value>"
            text = (
                full.removeprefix(self.answer_prefix) if full_prefix.startswith(self.answer_prefix) else full
            )
            read = classify_value(self.answer_prefix + text, r_max)
            # a level is worth what it says: 0.3333 for the level 1/3 of a 4-level grid (4 decimals at most)
            if read.status is not ValueStatus.OK or read.value is None or abs(read.value - v) > 5e-5 + 1e-12:
                raise ValueError(
                    f"the constrained answer {text!r} after answer_prefix={self.answer_prefix!r} reads as "
                    f"{read.status.value} ({read.value}), not {v}; use an answer_prefix that is empty or a prefix "
                    "of '<value>'"
                )
            out.append((read.value, text, tuple(self._encode(text))))
        if len({tokens for _, _, tokens in out}) != len(out):
            raise ValueError(f"two of the {self.levels} constrained answers encode to the same tokens")
        answers = tuple(out)
        self._answers[r_max] = answers
        return answers

    def _prompt(self, query: CriticQuery, omitted: int) -> tuple[int, ...]:
        return (*self._render(self.messages(query, omitted)), *self._prefix_tokens)

    def prompt_tokens(self, query: CriticQuery) -> tuple[tuple[int, ...] | None, int]:
        """The prompt tokens (ending with the answer prefix's) within budget and the number of omitted turns;
        ``(None, n)`` if nothing fits."""
        n = shown_turns(len(query.history), self.history_turns)
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
        if self.answer != "sampled":
            return await self._estimate_levels(query, k, sampler, prompt, omitted, seed)
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

    async def _estimate_levels(
        self,
        query: CriticQuery,
        k: int,
        sampler: SamplingClient,
        prompt: tuple[int, ...],
        omitted: int,
        seed: int | None,
    ) -> CriticEstimates:
        """``"constrained"`` / ``"expected"``: score the L answers, draw K from the restricted distribution."""
        answers = self.answer_set(query.r_max)
        shared = getattr(sampler, "score_continuations_async", None)
        if shared is not None:  # the local backend: the prompt prefilled once for the whole grid
            tails: Sequence[Sequence[float | None]] = await shared(
                list(prompt), [list(tokens) for _, _, tokens in answers]
            )
        else:
            scored = await asyncio.gather(
                *(sampler.compute_logprobs_async([*prompt, *tokens]) for _, _, tokens in answers)
            )
            tails = [list(lps)[len(prompt) :] for lps in scored]
        token_lps: list[tuple[float, ...]] = []
        for (_, text, tokens), tail in zip(answers, tails):
            if len(tail) != len(tokens) or any(lp is None for lp in tail):
                raise RuntimeError(
                    f"the sampler returned {len(tail)} logprobs for the answer {text!r} of {len(tokens)} tokens "
                    f"after a prompt of {len(prompt)} tokens, or None inside the answer"
                )
            token_lps.append(tuple(float(lp) for lp in tail if lp is not None))
        q = restricted_probs([sum(lps) for lps in token_lps])
        chosen = np.random.default_rng(seed if seed is not None else self.sampling_params.seed).choice(
            len(answers), size=k, p=q
        )
        every_answer = tuple(  # each answer of the grid as a sample: the K draws are some of these
            CriticSample(
                prompt_tokens=prompt,
                sequence=SampledSequence(tokens=tokens, logprobs=lps, text=text, stop_reason="stop"),
                value=v,
                status=ValueStatus.OK,
            )
            for (v, text, tokens), lps in zip(answers, token_lps)
        )
        samples = [every_answer[i] for i in chosen.tolist()]
        values = np.array([s.value for s in samples], dtype=np.float64)
        expected = self.answer == "expected"
        return CriticEstimates(
            values=values,
            samples=tuple(samples),
            prompt_too_long=omitted > 0,
            omitted_turns=omitted,
            expectation=float(np.dot(q, [v for v, _, _ in answers])) if expected else None,
            answers=every_answer if expected else (),
        )


def status_counts(estimates: CriticEstimates) -> dict[ValueStatus, int]:
    """How many samples were read with each :class:`ValueStatus` (for parse-failure metrics)."""
    counts = dict.fromkeys(ValueStatus, 0)
    for sample in estimates.samples:
        counts[sample.status] += 1
    return counts
