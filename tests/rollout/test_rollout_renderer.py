"""ChatRenderer: exact prefix extension, per-turn cost, history-rewrite detection (ChatML and Qwen-style)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers", reason="the renderer tests use the offline tokenizer (local extra)")

from tempo_rl.rollout.renderer import ChatRenderer, TemplateError
from tempo_rl.rollout.templates import QWEN_STYLE_TEMPLATE

#: a Qwen3-style template: assistant turns before the last user message lose their <think> block
QWEN_STYLE = QWEN_STYLE_TEMPLATE


@pytest.fixture(scope="module")
def tok() -> Any:
    from tempo_rl.backends.local import build_tokenizer

    return build_tokenizer(["You see a desk 1. go to desk 1. Nothing happens."] * 10, vocab_size=400)


@pytest.fixture
def qwen_tok(tok: Any) -> Any:
    import copy

    t = copy.deepcopy(tok)
    t.chat_template = QWEN_STYLE
    return t


def _completion(tok: Any, text: str, eos: bool = True) -> list[int]:
    # deliberately NON-canonical tokens (one per character): proves tokens are kept, never re-encoded
    ids = [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]
    return ids + ([tok.eos_token_id] if eos else [])


START = [{"role": "system", "content": "Act."}, {"role": "user", "content": "You see a desk 1."}]


def test_extension_keeps_sampled_tokens_and_matches_full_render(tok: Any) -> None:
    r = ChatRenderer(tok, check=True)
    state = r.start(START)
    assert state.tokens == tuple(tok.encode(r.render_text(START, True), add_special_tokens=False))
    comp = _completion(tok, "go to desk 1")
    ext = r.extend(state, comp, [{"role": "tool", "content": "Nothing happens."}])
    assert not ext.restarted
    n = len(state.tokens)
    assert ext.state.tokens[:n] == state.tokens
    assert ext.state.tokens[n : n + len(comp)] == tuple(comp)  # sampled tokens exactly
    assert ext.state.tokens == state.tokens + tuple(comp) + ext.appended
    # ChatML closing after the sampled <|im_end|> is just "\n", then the new turn and the generation prompt
    assert (
        tok.decode(list(ext.appended))
        == "\n<|im_start|>tool\nNothing happens.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert r.stats.checks == 1 and r.stats.restarts == 0


def test_completion_cut_by_length_gets_the_closing_eos(tok: Any) -> None:
    r = ChatRenderer(tok, check=True)
    state = r.start(START)
    ext = r.extend(state, _completion(tok, "go to", eos=False), [{"role": "user", "content": "ok"}])
    assert not ext.restarted
    assert tok.decode(list(ext.appended)).startswith("<|im_end|>\n<|im_start|>user\nok")
    assert ext.state.messages[-2] == {"role": "assistant", "content": "go to"}


def test_many_turns_stay_exact_and_appended_size_is_constant(tok: Any) -> None:
    r = ChatRenderer(tok, check=True)
    state = r.start(START)
    sizes = []
    for k in range(12):
        ext = r.extend(state, _completion(tok, f"go to desk {k}"), [{"role": "tool", "content": f"obs {k}"}])
        assert not ext.restarted
        sizes.append(len(ext.appended))
        state = ext.state
    assert max(sizes) - min(sizes) <= 2  # proportional to the new turn only (digits may merge differently)
    assert r.stats.extensions == 12 and r.stats.checks == 12


def test_qwen_style_template_with_tool_turns_extends(qwen_tok: Any) -> None:
    r = ChatRenderer(qwen_tok, check=True)
    state = r.start(START)
    for k in range(3):
        comp = _completion(qwen_tok, f"<think>plan {k}</think>go to desk 1")
        ext = r.extend(state, comp, [{"role": "tool", "content": "Nothing happens."}])
        assert not ext.restarted, ext.reason  # reasoning after the last user query is kept by the template
        state = ext.state


def test_qwen_style_template_dropping_reasoning_restarts_and_counts(qwen_tok: Any) -> None:
    r = ChatRenderer(qwen_tok)  # detection works without the O(L) check mode
    state = r.start(START)
    comp = _completion(qwen_tok, "<think>plan</think>go to desk 1")
    ext = r.extend(state, comp, [{"role": "user", "content": "Nothing happens."}])
    assert ext.restarted and ext.reason == "history_rewritten" and ext.appended == ()
    assert r.stats.restarts == 1 and r.stats.restart_reasons == {"history_rewritten": 1}
    # the new sequence is the template's own render (the earlier <think> block dropped), tokenized fresh
    full = r.render_text(ext.state.messages, True)
    assert "<think>" not in full
    assert ext.state.tokens == tuple(qwen_tok.encode(full, add_special_tokens=False))
    # a completion without reasoning is not rewritten: plain extension
    ext2 = r.extend(ext.state, _completion(qwen_tok, "look"), [{"role": "user", "content": "ok"}])
    assert not ext2.restarted


def test_check_mode_catches_rewrites_the_window_cannot_see(tok: Any) -> None:
    import copy

    # a template that shows only the last 6 messages: the constant-size window never sees the truncation
    sliding = copy.deepcopy(tok)
    sliding.chat_template = tok.chat_template.replace(
        "for message in messages", "for message in messages[-6:]"
    )
    plain, checked = ChatRenderer(sliding), ChatRenderer(sliding, check=True)
    s_plain, s_checked = plain.start(START), checked.start(START)
    for k in range(4):
        comp = _completion(sliding, f"go {k}")
        s_plain = plain.extend(s_plain, comp, [{"role": "tool", "content": "x"}]).state
        s_checked = checked.extend(s_checked, comp, [{"role": "tool", "content": "x"}]).state
    assert plain.stats.restarts == 0  # without check mode the prompt keeps the full history (self-consistent)
    assert checked.stats.restarts >= 1 and checked.stats.restart_reasons.get("check_mismatch", 0) >= 1


def test_template_that_rewrites_every_turn_restarts_instead_of_raising(tok: Any) -> None:
    import copy

    counting = copy.deepcopy(tok)  # every turn shows the message count: nothing can be appended
    counting.chat_template = tok.chat_template.replace(
        "message['role'] + '\\n'", "message['role'] + (messages|length|string) + '\\n'"
    )
    assert counting.chat_template != tok.chat_template
    r = ChatRenderer(counting)
    ext = r.extend(r.start(START), _completion(counting, "go"), [{"role": "tool", "content": "x"}])
    assert ext.restarted and ext.reason == "no_closing_text" and r.stats.restarts == 1
    with pytest.raises(TemplateError, match="impossible"):
        r.closing_text()


def test_errors_name_the_fix(tok: Any) -> None:
    import copy

    bare = copy.deepcopy(tok)
    bare.chat_template = None
    with pytest.raises(TemplateError, match="chat_template"):
        ChatRenderer(bare)
    r = ChatRenderer(tok)
    with pytest.raises(ValueError, match="at least one message"):
        r.start([])
    with pytest.raises(ValueError, match="assistant"):
        r.start([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    with pytest.raises(ValueError, match="new message"):
        r.extend(r.start(START), [1], [])


_turn_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=30)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(3, 300), min_size=0, max_size=6),
            st.booleans(),
            st.sampled_from(["tool", "user"]),
            _turn_text,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_property_every_extension_is_an_exact_prefix_extension(tok: Any, turns: list[Any]) -> None:
    r = ChatRenderer(tok, check=True)  # check mode: the appended prompt must equal a full re-render
    state = r.start(START)
    for body, eos, role, text in turns:
        comp = [t for t in body if t < len(tok)] + ([tok.eos_token_id] if eos else [])
        content = tok.decode([t for t in comp if t != tok.eos_token_id])
        if "<|im_end|>" in content or "<|im_start|>" in content or "<|endoftext|>" in content:
            continue  # special tokens inside a completion are outside the template's grammar
        ext = r.extend(state, comp, [{"role": role, "content": text}])
        assert not ext.restarted, ext.reason
        assert ext.state.tokens == state.tokens + tuple(comp) + ext.appended
        state = ext.state
