"""Budgets a tokenizer makes impossible are named before training (a real tokenizer splits the tags)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tempo_rl.rollout.budgets import TokenBudgetWarning, token_budget_problems
from tempo_rl.rollout.tool_call import format_tool_call


@pytest.fixture(scope="module")
def offline_tokenizer() -> Any:
    from tempo_rl.backends.local import build_tokenizer

    return build_tokenizer(["look", "go to desk 1"] * 20, vocab_size=300)


def test_offline_tokenizer_one_token_per_tag(offline_tokenizer: Any) -> None:
    tok = offline_tokenizer
    call = len(tok.encode(format_tool_call("look"), add_special_tokens=False)) + 1
    assert call <= 10  # 7 tag tokens + "look" + EOS
    assert (
        token_budget_problems(tok, max_tokens=call, critic_max_tokens=2, critic_answer_prefix="<value>") == []
    )
    (problem,) = token_budget_problems(tok, max_tokens=call - 1)
    assert problem.startswith(f"sampling.max_tokens = {call - 1} cannot hold one tool call")
    assert f"is {call} tokens" in problem


def test_real_tokenizer_budgets_are_named_with_their_token_counts(real_model_dir: Path) -> None:
    from tempo_rl.backends.local import load_tokenizer

    tok = load_tokenizer(real_model_dir)
    # the call for "look" is 25 tokens + EOS here (7 + 2 with the offline tokenizer); "0</value>" is 4
    prefix = "<value>"
    problems = token_budget_problems(tok, max_tokens=24, critic_max_tokens=3, critic_answer_prefix=prefix)
    assert len(problems) == 2
    assert (
        "sampling.max_tokens = 24 cannot hold one tool call" in problems[0] and "is 26 tokens" in problems[0]
    )
    assert "'0</value>' (4 tokens" in problems[1] and "critic_max_tokens to 4" in problems[1]
    assert token_budget_problems(tok, max_tokens=26, critic_max_tokens=4, critic_answer_prefix=prefix) == []
    # without the prefix the whole answer is sampled; a non-generative critic samples nothing
    (p,) = token_budget_problems(tok, max_tokens=32, critic_max_tokens=4)
    assert "'<value>0</value>' (7 tokens" in p
    assert token_budget_problems(tok, max_tokens=32, critic_max_tokens=4, generative_critic=False) == []


def test_the_trainer_warns(offline_tokenizer: Any, tmp_path: Path) -> None:
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import _warn_token_budgets

    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[env]\nname = "keydoor"\n\n[sampling]\ncritic_answer = "sampled"\nmax_tokens = 3\ncritic_max_tokens = 1\n'
    )
    with pytest.warns(TokenBudgetWarning, match="sampling.max_tokens = 3 cannot hold one tool call"):
        _warn_token_budgets(load_config(cfg), offline_tokenizer)
