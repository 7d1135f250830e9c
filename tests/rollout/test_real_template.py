"""Token-exact prompt extension on a real model's tokenizer and chat template (SmolLM2-135M-Instruct).

SmolLM2's ChatML template differs from the offline one: it writes a default system prompt when the first
message is not a system message, its BPE vocabulary (49,152 tokens) splits the tool-call tags into several
tokens, and its pad token is its EOS (``<|im_end|>``). Over 50 turns every prompt must strictly extend the
previous prompt + the sampled tokens, and where the template rewrites history the restart is detected and
counted. The tokenizer comes from the model cache (``tempo-rl model fetch smollm2``); see ``real_model_dir``
in tests/conftest.py for when these tests skip.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from tempo_rl.rollout.renderer import ChatRenderer, PromptState
from tempo_rl.rollout.templates import think_dropping_template
from tempo_rl.rollout.tool_call import ToolCallParser, format_tool_call

ACTIONS = ["go to desk 1", "open drawer 2", "take alarmclock 1 from desk 1", "use desklamp 1", "look"]
TURNS = 50


@pytest.fixture(scope="module")
def real_tokenizer(real_model_dir: Path) -> Any:
    from tempo_rl.backends.local import load_tokenizer

    return load_tokenizer(real_model_dir)


def _opening(system: bool) -> list[dict[str, str]]:
    user = {
        "role": "user",
        "content": "-= Welcome to TextWorld, ALFRED! =-\n\nYou see a desk 1 and a drawer 2.\n\n"
        "Your task is to: look at alarmclock under the desklamp.\nActions: " + " | ".join(ACTIONS),
    }
    if not system:
        return [user]
    return [{"role": "system", "content": "Reply with exactly one tool call."}, user]


def _completion(tok: Any, turn: int, *, canonical: bool) -> list[int]:
    """What an actor turn samples: some reasoning, a tool call, then EOS (every 7th turn stops by length, with
    no EOS). ``canonical=False`` tokenizes each character on its own: a valid but non-canonical sequence,
    as sampling may produce."""
    text = f"Step {turn}: I should act.\n" + format_tool_call(ACTIONS[turn % len(ACTIONS)])
    if canonical:
        ids = list(tok.encode(text, add_special_tokens=False))
    else:
        ids = [t for ch in text for t in tok.encode(ch, add_special_tokens=False)]
        assert len(ids) > len(tok.encode(text, add_special_tokens=False))
    return ids if turn % 7 == 6 else [*ids, int(tok.eos_token_id)]


def _observation(turn: int) -> dict[str, str]:
    return {"role": "tool", "content": f"You arrive at desk {turn}. On the desk 1, you see a pen {turn}."}


def _run(chat: ChatRenderer, tok: Any, *, canonical: bool, system: bool) -> PromptState:
    state = chat.start(_opening(system))
    parser = ToolCallParser()
    for turn in range(1, TURNS + 1):
        completion = _completion(tok, turn, canonical=canonical)
        # the tool call is read from the model's own text, as the sampler decodes it
        call = parser.parse(tok.decode(completion, skip_special_tokens=False))
        assert call.valid and call.action == ACTIONS[turn % len(ACTIONS)]
        ext = chat.extend(state, completion, [_observation(turn)])
        assert not ext.restarted, ext.reason
        prefix = (*state.tokens, *completion)
        # turn t + 1's prompt strictly extends turn t's prompt + the sampled tokens, token for token
        assert ext.state.tokens[: len(prefix)] == prefix and len(ext.state.tokens) > len(prefix)
        assert ext.state.tokens == (*prefix, *ext.appended)
        state = ext.state
    return state


def test_50_turns_extend_token_exactly_and_equal_the_full_render(real_tokenizer: Any) -> None:
    tok = real_tokenizer
    assert len(tok) == 49152 and tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id
    chat = ChatRenderer(tok, check=True)
    state = _run(chat, tok, canonical=True, system=True)
    full = chat.render_text(state.messages, True)
    # with canonical completions the extended prompt is exactly the tokenization of the full render
    assert state.tokens == chat.encode(full)
    assert chat.stats.extensions == TURNS == chat.stats.checks and chat.stats.restarts == 0
    assert full.startswith("<|im_start|>system\nReply with exactly one tool call.<|im_end|>\n")
    assert full.endswith("<|im_start|>tool\nYou arrive at desk 50. On the desk 1, you see a pen 50.<|im_end|>\n"
                         "<|im_start|>assistant\n")  # fmt: skip


def test_non_canonical_sampled_tokens_are_kept_as_sampled(real_tokenizer: Any) -> None:
    chat = ChatRenderer(real_tokenizer, check=True)  # check: decode(tokens) == full render, every turn
    state = _run(chat, real_tokenizer, canonical=False, system=True)
    assert chat.stats.restarts == 0 and chat.stats.checks == TURNS
    assert state.tokens != chat.encode(chat.render_text(state.messages, True))  # re-tokenizing would differ


def test_the_default_system_prompt_of_the_template_is_part_of_every_window(real_tokenizer: Any) -> None:
    chat = ChatRenderer(real_tokenizer, check=True)
    state = _run(chat, real_tokenizer, canonical=True, system=False)
    text = real_tokenizer.decode(list(state.tokens), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.count("You are a helpful AI assistant named SmolLM") == 1  # written once, not per turn
    assert chat.stats.restarts == 0


def test_a_history_rewriting_template_on_the_real_tokenizer_restarts_and_counts(real_tokenizer: Any) -> None:
    tok = copy.deepcopy(real_tokenizer)
    tok.chat_template = think_dropping_template(("user", "tool"))
    chat = ChatRenderer(tok)
    state = chat.start(_opening(True))
    for turn in range(1, 11):
        text = "<think>the drawer first</think>" + format_tool_call(ACTIONS[turn % len(ACTIONS)])
        completion = [*tok.encode(text, add_special_tokens=False), int(tok.eos_token_id)]
        ext = chat.extend(state, completion, [_observation(turn)])
        assert ext.restarted and ext.reason == "history_rewritten" and ext.appended == ()
        # the restart is a fresh full render: the earlier <think> blocks are gone from it
        assert ext.state.tokens == chat.encode(chat.render_text(ext.state.messages, True))
        assert "<think>" not in tok.decode(list(ext.state.tokens))
        state = ext.state
    assert chat.stats.restarts == 10 == chat.stats.restart_reasons["history_rewritten"]
    assert chat.stats.extensions == 0
