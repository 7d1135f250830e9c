"""Token budgets that a tokenizer makes impossible: warn before training, not after every action failed.

A real tokenizer splits the tool-call tags and ``<value>`` into several tokens (SmolLM2: ``<tool_call>`` alone is
3 tokens, a whole ``env_step`` call ~30), where tempo-rl's offline tokenizer has one token per tag. A turn
budget below the shortest possible answer makes *every* answer invalid, silently: each is cut off, counted as an
invalid tool call or a critic parse failure, and nothing trains. :func:`token_budget_problems` names such
budgets, with the token counts in this tokenizer; the trainer warns with :class:`TokenBudgetWarning`.

The counts are lower bounds: the actor's shortest call (``look``, with no reasoning) plus its end-of-turn token,
and the critic's shortest answer (``0`` and the closing tag, after the answer prefix; the whole
``<value>0</value>`` without one).
"""

from __future__ import annotations

from typing import Any

from tempo_rl.rollout.tool_call import format_tool_call

__all__ = ["TokenBudgetWarning", "token_budget_problems"]


class TokenBudgetWarning(UserWarning):
    """A sampling budget cannot hold the shortest valid answer in this tokenizer."""


def _count(tokenizer: Any, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False))


def token_budget_problems(
    tokenizer: Any,
    *,
    max_tokens: int,
    critic_max_tokens: int | None = None,
    critic_answer_prefix: str = "",
    tool_name: str = "env_step",
    generative_critic: bool = True,
) -> list[str]:
    """What cannot fit: one message per budget below the shortest valid answer (empty when all fit).

    Args:
        tokenizer: the model's tokenizer (``encode(text, add_special_tokens=False)``).
        max_tokens: ``sampling.max_tokens``, the actor's tokens per turn.
        critic_max_tokens: ``sampling.critic_max_tokens`` (None: not checked).
        critic_answer_prefix: the critic's answer prefix (:class:`~tempo_rl.training.options.TrainerOptions`);
            its tokens belong to the prompt.
        tool_name: the tool the actor calls.
        generative_critic: whether the critic samples answers (``tempo.critic = "generative"``).
    """
    problems = []
    eos = 1 if getattr(tokenizer, "eos_token_id", None) is not None else 0
    call = _count(tokenizer, format_tool_call("look", tool_name)) + eos
    if max_tokens < call:
        problems.append(
            f"sampling.max_tokens = {max_tokens} cannot hold one tool call: the shortest, "
            f"{format_tool_call('look', tool_name)!r} and the end of turn, is {call} tokens in this model's "
            f"tokenizer, so every action would be cut off and invalid; raise sampling.max_tokens above {call} "
            "(plus room for reasoning)"
        )
    if generative_critic and critic_max_tokens is not None:
        answer = "<value>0</value>"
        if critic_answer_prefix and answer.startswith(critic_answer_prefix):
            answer = answer[len(critic_answer_prefix) :]
        need = _count(tokenizer, answer)
        if critic_max_tokens < need:
            problems.append(
                f"sampling.critic_max_tokens = {critic_max_tokens} cannot hold the critic's shortest answer "
                f"{answer!r} ({need} tokens in this model's tokenizer): every value would be unclosed and "
                f"count as a parse failure; raise sampling.critic_max_tokens to {need} or more"
            )
    return problems
