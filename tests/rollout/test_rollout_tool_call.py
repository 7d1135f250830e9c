"""The single-tool-call parser: accepted forms, every rejection reason, and fuzzing (it never raises)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.rollout.tool_call import (
    INVALID_ACTION,
    ToolCallParser,
    format_tool_call,
    parse_tool_call,
    tool_schema,
)

P = ToolCallParser("env_step", "action")
XML = "<tool_call><function=env_step><parameter=action>go to desk 1</parameter></function></tool_call>"
JSON = '<tool_call>{"name": "env_step", "arguments": {"action": "go to desk 1"}}</tool_call>'


@pytest.mark.parametrize(
    "text,form",
    [
        (XML, "xml"),
        (JSON, "json"),
        ("<think>the desk may hold it</think>\n" + XML, "xml"),
        ("I will look.\n" + JSON + "\n<|im_end|>", "json"),
        (XML.replace("><parameter", ">\n  <parameter").replace("</parameter>", "  </parameter>\n"), "xml"),
        (
            '<tool_call>{"name": "env_step", "arguments": "{\\"action\\": \\"go to desk 1\\"}"}</tool_call>',
            "json",
        ),
    ],
)
def test_valid_calls(text: str, form: str) -> None:
    call = P.parse(text)
    assert call.valid and call.reason == "ok" and call.form == form
    assert call.action == "go to desk 1"


@pytest.mark.parametrize(
    "text,reason",
    [
        ("go to desk 1", "no_tool_call"),
        ("", "no_tool_call"),
        (XML + XML, "multiple_tool_calls"),
        (XML + " then I will look", "text_after_tool_call"),
        ("<tool_call><function=env_step><parameter=action>go", "unclosed_tool_call"),
        ("</tool_call>" + "<tool_call>", "malformed_call"),
        ("<tool_call>go to desk 1</tool_call>", "malformed_call"),
        ("<tool_call>{not json}</tool_call>", "bad_json"),
        ('<tool_call>{"name": "env_step"}</tool_call>', "bad_json"),
        (JSON.replace("env_step", "other"), "wrong_tool_name"),
        (XML.replace("function=env_step", "function=other"), "wrong_tool_name"),
        (JSON.replace('"action"', '"act"'), "bad_arguments"),
        ('<tool_call>{"name": "env_step", "arguments": {"action": 3}}</tool_call>', "bad_arguments"),
        (XML.replace("parameter=action", "parameter=act"), "bad_arguments"),
        (XML.replace("go to desk 1", "   "), "empty_action"),
    ],
)
def test_invalid_calls_name_the_reason(text: str, reason: str) -> None:
    call = P.parse(text)
    assert not call.valid and call.action == INVALID_ACTION and call.reason == reason


def test_tool_name_is_configurable() -> None:
    text = format_tool_call("take key", "alfworld_step", form="json")
    assert parse_tool_call(text, "alfworld_step").action == "take key"
    assert parse_tool_call(text, "env_step").reason == "wrong_tool_name"
    with pytest.raises(ValueError, match="identifier"):
        ToolCallParser("bad name")
    schema = tool_schema("alfworld_step")
    assert schema["function"]["name"] == "alfworld_step"
    assert schema["function"]["parameters"]["required"] == ["action"]


_action = st.text(min_size=1, max_size=40).filter(
    lambda s: (
        s.strip() == s
        and s
        and not any(
            x in s for x in ("<tool_call>", "</tool_call>", "parameter>", "<parameter=", "<function=")
        )
    )
)


@settings(max_examples=200)
@given(
    _action, st.sampled_from(["xml", "json"]), st.text(max_size=30).filter(lambda s: "tool_call>" not in s)
)
def test_format_then_parse_round_trips(action: str, form: str, prefix: str) -> None:
    call = P.parse(prefix + format_tool_call(action, form=form))  # type: ignore[arg-type]
    assert call.valid, call.reason
    assert call.action == action


_pieces = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<function=env_step>",
        "</function>",
        "<parameter=action>",
        "</parameter>",
        "{",
        "}",
        '"name"',
        '"arguments"',
        ":",
        ",",
        '"env_step"',
        '"action"',
        "go",
        " ",
        "\n",
        "<|im_end|>",
        "[",
        "]",
    ]
)


@settings(max_examples=400)
@given(st.one_of(st.text(max_size=200), st.lists(_pieces, max_size=25).map("".join)))
def test_parser_never_raises(text: str) -> None:
    call = P.parse(text)
    assert call.valid == (call.reason == "ok")
    assert (call.action == INVALID_ACTION) != call.valid
    if call.valid:
        assert call.action and call.action == call.action.strip()


def test_deeply_nested_json_is_invalid_not_a_crash() -> None:
    body = json.dumps({"name": "env_step", "arguments": {"action": "x"}})
    deep = '{"a": ' * 5000 + "1" + "}" * 5000  # RecursionError inside json.loads
    assert P.parse(f"<tool_call>{deep}</tool_call>").reason == "bad_json"
    assert P.parse(f"<tool_call>{body}</tool_call>").valid
    assert P.parse(None).reason == "malformed_call"  # type: ignore[arg-type]
