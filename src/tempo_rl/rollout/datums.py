"""Datum builders: token sequences with per-token logprobs and advantages -> PyTRIO-format Datums.

A training sequence ``s_0 .. s_{L-1}`` mixes *context* tokens (prompts, environment turns, closing tokens) and
*sampled* tokens (the policy's completions). Per token we keep ``lp_i`` (the sampler's logprob for sampled
tokens, 0 for context) and ``a_i`` (the advantage for sampled tokens, 0 for context). The Datum is the
one-token shift::

    model_input = s[:-1]          target_tokens = s[1:]
    logprobs    = lp[1:]          advantages    = a[1:]

so position ``t`` predicts ``s_{t+1}`` and is weighted by that token's advantage. Everything is validated
(lengths, finite values, ids < vocab size) before a Datum is returned, so nothing malformed reaches a backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tempo_rl.backends.types import Datum
from tempo_rl.backends.validation import validate_datum

__all__ = ["SequenceBuilder", "completion_datum", "make_datum", "sft_datum"]


def make_datum(
    tokens: Sequence[int],
    logprobs: Sequence[float],
    advantages: Sequence[float],
    *,
    vocab_size: int | None = None,
    role: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> Datum:
    """Shift per-token arrays (each of length ``len(tokens)``) into a validated importance-sampling/PPO Datum.

    Args:
        tokens: the full sequence ``s`` (>= 2 tokens).
        logprobs: ``lp_i`` per token (0 for context tokens).
        advantages: ``a_i`` per token (0 for context tokens).
        vocab_size: when given, every id must be below it (``len(tokenizer)``).
        role: stored as ``tags["role"]`` (e.g. ``"actor"`` / ``"critic"``); tags are never sent to a service.
        tags: further tags.
    """
    n = len(tokens)
    if n < 2:
        raise ValueError(f"a datum needs at least 2 tokens (one prediction), got {n}")
    if len(logprobs) != n or len(advantages) != n:
        raise ValueError(
            f"tokens, logprobs and advantages must have the same length, got {n}, {len(logprobs)}, "
            f"{len(advantages)}"
        )
    toks = np.asarray(tokens, dtype=np.int64)
    all_tags = dict(tags or {})
    if role is not None:
        all_tags["role"] = role
    datum = Datum(
        model_input=tuple(int(t) for t in toks[:-1]),
        loss_fn_inputs={
            "target_tokens": toks[1:].copy(),
            "logprobs": np.asarray(logprobs, dtype=np.float32)[1:].copy(),
            "advantages": np.asarray(advantages, dtype=np.float32)[1:].copy(),
        },
        tags=all_tags,
    )
    validate_datum(
        datum, vocab_size if vocab_size is not None else int(toks.max()) + 1, "importance_sampling"
    )
    return datum


def completion_datum(
    prompt: Sequence[int],
    completion: Sequence[int],
    completion_logprobs: Sequence[float],
    advantage: float,
    *,
    vocab_size: int | None = None,
    role: str | None = None,
) -> Datum:
    """One prompt + one sampled completion (e.g. a critic sample): context zeros, completion carries ``A``."""
    if len(completion) != len(completion_logprobs):
        raise ValueError(
            f"completion has {len(completion)} tokens but {len(completion_logprobs)} logprobs; pass the "
            "sampler's per-token logprobs unchanged"
        )
    b = SequenceBuilder()
    b.add_context(prompt)
    b.add_sampled(completion, completion_logprobs)
    return b.to_datum(advantage, vocab_size=vocab_size, role=role)


def sft_datum(
    prompt: Sequence[int],
    completion: Sequence[int],
    *,
    weight: float = 1.0,
    vocab_size: int | None = None,
    role: str | None = None,
) -> Datum:
    """A cross-entropy Datum: ``weights`` = ``weight`` on completion targets, 0 on the prompt."""
    b = SequenceBuilder()
    b.add_context(prompt)
    b.add_sampled(completion, [0.0] * len(completion))
    return b.to_sft_datum(weight, vocab_size=vocab_size, role=role)


class SequenceBuilder:
    """Accumulates one training sequence turn by turn: context spans and sampled spans.

    Typical use with :class:`~tempo_rl.rollout.renderer.ChatRenderer`::

        seq = SequenceBuilder(); seq.add_context(state.tokens)
        # each turn: sample from state.tokens, then
        seq.add_sampled(completion.tokens, completion.logprobs)
        ext = renderer.extend(state, completion.tokens, [tool_msg])
        if ext.restarted:  # the template rewrote history: close this sequence, start another
            datums.append(seq.to_datum(adv)); seq = SequenceBuilder(); seq.add_context(ext.state.tokens)
        else:
            seq.add_context(ext.appended)
    """

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.sampled: list[bool] = []

    def __len__(self) -> int:
        return len(self.tokens)

    def add_context(self, tokens: Sequence[int]) -> None:
        """Append context tokens (logprob 0, advantage 0)."""
        self.tokens.extend(int(t) for t in tokens)
        self.logprobs.extend([0.0] * len(tokens))
        self.sampled.extend([False] * len(tokens))

    def add_sampled(self, tokens: Sequence[int], logprobs: Sequence[float]) -> None:
        """Append sampled tokens with the sampler's logprobs (they will carry the advantage)."""
        if len(tokens) != len(logprobs):
            raise ValueError(f"{len(tokens)} sampled tokens but {len(logprobs)} logprobs")
        if not self.tokens and tokens:
            raise ValueError("a sequence must start with context (the prompt) before sampled tokens")
        lp = [float(x) for x in logprobs]
        if not all(np.isfinite(lp)):
            raise ValueError("sampled logprobs must be finite")
        self.tokens.extend(int(t) for t in tokens)
        self.logprobs.extend(lp)
        self.sampled.extend([True] * len(tokens))

    def extend_context_to(self, tokens: Sequence[int]) -> None:
        """Append the context suffix that turns this sequence into ``tokens`` (which must extend it)."""
        n = len(self.tokens)
        if len(tokens) < n or list(tokens[:n]) != self.tokens:
            raise ValueError(
                "the new prompt does not extend the current sequence; start a new SequenceBuilder "
                "(the renderer reports this as a restart)"
            )
        self.add_context(tokens[n:])

    @property
    def num_sampled(self) -> int:
        """How many tokens carry the advantage."""
        return sum(self.sampled)

    def to_datum(
        self,
        advantage: float | Sequence[float],
        *,
        vocab_size: int | None = None,
        role: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> Datum:
        """The IS/PPO Datum; ``advantage`` is one number for all sampled tokens or one per token."""
        if isinstance(advantage, (int, float)):
            adv = [float(advantage) if s else 0.0 for s in self.sampled]
        else:
            if len(advantage) != len(self.tokens):
                raise ValueError(
                    f"per-token advantages have length {len(advantage)}, expected {len(self.tokens)}"
                )
            adv = [float(a) if s else 0.0 for a, s in zip(advantage, self.sampled)]
        if not np.isfinite(adv).all():
            raise ValueError("advantage must be finite")
        return make_datum(self.tokens, self.logprobs, adv, vocab_size=vocab_size, role=role, tags=tags)

    def to_sft_datum(
        self,
        weight: float | Sequence[float] = 1.0,
        *,
        vocab_size: int | None = None,
        role: str | None = None,
    ) -> Datum:
        """A cross-entropy Datum: target weight ``weight`` (one number, or one per token) on sampled tokens,
        0 on context."""
        n = len(self.tokens)
        if n < 2:
            raise ValueError(f"a datum needs at least 2 tokens, got {n}")
        toks = np.asarray(self.tokens, dtype=np.int64)
        if isinstance(weight, (int, float)):
            per_token = [float(weight)] * n
        else:
            if len(weight) != n:
                raise ValueError(f"per-token weights have length {len(weight)}, expected {n}")
            per_token = [float(x) for x in weight]
        if not np.isfinite(per_token).all():
            raise ValueError("weights must be finite")
        w = np.asarray([x if s else 0.0 for x, s in zip(per_token, self.sampled)], dtype=np.float32)
        datum = Datum(
            model_input=tuple(self.tokens[:-1]),
            loss_fn_inputs={"target_tokens": toks[1:].copy(), "weights": w[1:].copy()},
            tags={} if role is None else {"role": role},
        )
        validate_datum(datum, vocab_size if vocab_size is not None else int(toks.max()) + 1, "cross_entropy")
        return datum
