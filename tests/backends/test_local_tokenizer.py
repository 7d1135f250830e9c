"""The offline tokenizer: exact round trips, compact env text, chat template, save/load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.backends.local import build_tokenizer, load_tokenizer
from tempo_rl.backends.local.tokenizer import EOS_TOKEN, IM_START_TOKEN, PAD_TOKEN


def test_special_tokens_and_ids(tokenizer: Any) -> None:
    assert tokenizer.convert_tokens_to_ids([PAD_TOKEN, IM_START_TOKEN, EOS_TOKEN]) == [0, 1, 2]
    assert tokenizer.eos_token_id == 2 and tokenizer.pad_token_id == 0
    for t in ("<tool_call>", "</tool_call>", "<think>", "</think>"):
        assert len(tokenizer.encode(t, add_special_tokens=False)) == 1


def test_tool_call_and_value_tags_are_whole_tokens(tokenizer: Any) -> None:
    from tempo_rl.rollout.tool_call import format_tool_call

    call = format_tool_call("take red")
    ids = tokenizer.encode(call, add_special_tokens=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    tags = [
        "<tool_call>",
        "<function=env_step>",
        "<parameter=action>",
        "</parameter>",
        "</function>",
        "</tool_call>",
    ]
    assert [p for p in pieces if p.startswith("<")] == tags  # no tag is split into shared subwords
    assert tokenizer.decode(ids) == call
    answer = "<value>0.4</value>"
    ids = tokenizer.encode(answer, add_special_tokens=False)
    assert tokenizer.decode(ids[:1]) == "<value>" and tokenizer.decode(ids[-1:]) == "</value>"
    assert tokenizer.decode(ids) == answer
    # near-misses are not tags: they encode byte-exactly as ordinary text
    for text in ("<function=env_stepx>", "</parameter=action>", "<value >1</value"):
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_chat_template_renders_chatml(tokenizer: Any) -> None:
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_env_text_is_compact(tokenizer: Any) -> None:
    text = "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a drawer 2."
    n = len(tokenizer.encode(text, add_special_tokens=False))
    # byte-level pre-tokenization splits at words, so a learned corpus costs about one token per word/punct.
    words = len(text.split()) + text.count(",") + text.count(".")
    assert n <= words, f"{n} tokens for {words} words and punctuation: the BPE did not learn the corpus"
    for word in (" cabinet", " drawer", " quickly"):
        assert len(tokenizer.encode(word, add_special_tokens=False)) == 1


@settings(max_examples=60)
@given(st.text(max_size=80))
def test_any_text_round_trips_exactly(tokenizer: Any, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert all(0 <= i < len(tokenizer) for i in ids)
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_save_and_load(tokenizer: Any, tmp_path: Path) -> None:
    tokenizer.save_pretrained(tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok")
    text = "go to desk 1 <tool_call>x</tool_call> ünïcode"
    assert loaded.encode(text) == tokenizer.encode(text)
    assert loaded.chat_template == tokenizer.chat_template
    assert len(loaded) == len(tokenizer) and loaded.eos_token_id == tokenizer.eos_token_id


def test_bad_inputs_have_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="too small"):
        build_tokenizer(["a"], vocab_size=100)
    with pytest.raises(TypeError, match="corpus item 1"):
        build_tokenizer(["a", 3], vocab_size=300)  # type: ignore[list-item]
    with pytest.raises(FileNotFoundError, match="build_tokenizer"):
        load_tokenizer(tmp_path)
