"""The single-tool-call protocol: the model answers with reasoning (optional) and exactly one tool call.

Two accepted forms (the tool name is configurable per environment, ``env_step`` by default)::

    <tool_call><function=env_step><parameter=action>go to desk 1</parameter></function></tool_call>
    <tool_call>{"name": "env_step", "arguments": {"action": "go to desk 1"}}</tool_call>

Rules (strict): exactly one ``<tool_call>`` ... ``</tool_call>`` block, nothing but whitespace after it
(trailing end-of-turn tokens such as ``<|im_end|>`` are removed first), the right tool name, exactly one
argument with the configured name, a non-empty string value. Any violation yields an *invalid*
:class:`ToolCall` whose ``action`` is :data:`INVALID_ACTION` and whose ``reason`` says what was wrong;
:meth:`ToolCallParser.parse` never raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "INVALID_ACTION",
    "ToolCall",
    "ToolCallParser",
    "format_tool_call",
    "parse_tool_call",
    "tool_schema",
]

#: the action sent to the environment (and counted) when the model's output is not a valid tool call
INVALID_ACTION = "__invalid_tool_call__"

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_DEFAULT_STRIP = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")

Reason = Literal[
    "ok",
    "no_tool_call",
    "multiple_tool_calls",
    "unclosed_tool_call",
    "text_after_tool_call",
    "malformed_call",
    "bad_json",
    "wrong_tool_name",
    "bad_arguments",
    "empty_action",
]


@dataclass(frozen=True)
class ToolCall:
    """The parse of one completion: ``valid`` with the ``action`` string, or invalid with a ``reason``."""

    action: str
    valid: bool
    reason: Reason
    form: Literal["xml", "json"] | None = None


def _invalid(reason: Reason, form: Literal["xml", "json"] | None = None) -> ToolCall:
    return ToolCall(action=INVALID_ACTION, valid=False, reason=reason, form=form)


class ToolCallParser:
    """Strict parser of the single tool call.

    Args:
        tool_name: the function name the model must call.
        argument: the name of its single string argument.
        strip_suffixes: end-of-turn markers removed (repeatedly) from the end of the text before parsing.
    """

    def __init__(
        self,
        tool_name: str = "env_step",
        argument: str = "action",
        strip_suffixes: tuple[str, ...] = _DEFAULT_STRIP,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", tool_name):
            raise ValueError(f"tool_name {tool_name!r} must be an identifier like 'env_step'")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", argument):
            raise ValueError(f"argument {argument!r} must be an identifier like 'action'")
        self.tool_name = tool_name
        self.argument = argument
        self.strip_suffixes = strip_suffixes
        self._xml = re.compile(
            r"<function=([^>\n]*)>\s*<parameter=([^>\n]*)>(.*?)</parameter>\s*</function>", re.DOTALL
        )

    def _strip_end(self, text: str) -> str:
        text = text.rstrip()
        changed = True
        while changed:
            changed = False
            for s in self.strip_suffixes:
                if s and text.endswith(s):
                    text = text[: -len(s)].rstrip()
                    changed = True
        return text

    def parse(self, text: str) -> ToolCall:
        """Parse a completion; never raises (non-str input is an invalid ``malformed_call``)."""
        if not isinstance(text, str):
            return _invalid("malformed_call")
        text = self._strip_end(text)
        n_open, n_close = text.count(OPEN), text.count(CLOSE)
        if n_open == 0 and n_close == 0:
            return _invalid("no_tool_call")
        if n_open > 1 or n_close > 1:
            return _invalid("multiple_tool_calls")
        if n_close == 0:
            return _invalid("unclosed_tool_call")
        start, end = text.find(OPEN), text.find(CLOSE)
        if n_open == 0 or end < start:
            return _invalid("malformed_call")
        if text[end + len(CLOSE) :].strip():
            return _invalid("text_after_tool_call")
        body = text[start + len(OPEN) : end].strip()
        if body.startswith("{"):
            return self._parse_json(body)
        return self._parse_xml(body)

    def _parse_json(self, body: str) -> ToolCall:
        try:
            obj: Any = json.loads(body)
        except (ValueError, RecursionError):
            return _invalid("bad_json", "json")
        if not isinstance(obj, dict) or set(obj) != {"name", "arguments"}:
            return _invalid("bad_json", "json")
        if obj["name"] != self.tool_name:
            return _invalid("wrong_tool_name", "json")
        args = obj["arguments"]
        if isinstance(args, str):  # OpenAI style: arguments as a JSON-encoded string
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                return _invalid("bad_arguments", "json")
        if (
            not isinstance(args, dict)
            or set(args) != {self.argument}
            or not isinstance(args[self.argument], str)
        ):
            return _invalid("bad_arguments", "json")
        return self._ok(args[self.argument], "json")

    def _parse_xml(self, body: str) -> ToolCall:
        m = self._xml.fullmatch(body)
        if m is None:
            return _invalid("malformed_call", "xml")
        name, param, value = m.group(1).strip(), m.group(2).strip(), m.group(3)
        if name != self.tool_name:
            return _invalid("wrong_tool_name", "xml")
        if (
            param != self.argument
            or "<parameter=" in value
            or "</parameter>" in value
            or "<function=" in value
        ):
            return _invalid("bad_arguments", "xml")
        return self._ok(value, "xml")

    @staticmethod
    def _ok(value: str, form: Literal["xml", "json"]) -> ToolCall:
        action = value.strip()
        if not action:
            return _invalid("empty_action", form)
        return ToolCall(action=action, valid=True, reason="ok", form=form)


def parse_tool_call(text: str, tool_name: str = "env_step", argument: str = "action") -> ToolCall:
    """One-off :meth:`ToolCallParser.parse` (build a parser once when parsing many completions)."""
    return ToolCallParser(tool_name, argument).parse(text)


def format_tool_call(
    action: str, tool_name: str = "env_step", argument: str = "action", form: Literal["xml", "json"] = "xml"
) -> str:
    """The canonical tool-call text for ``action`` (e.g. for demonstrations); parses back to ``action``."""
    if form == "json":
        return f"{OPEN}{json.dumps({'name': tool_name, 'arguments': {argument: action}})}{CLOSE}"
    if form == "xml":
        return f"{OPEN}<function={tool_name}><parameter={argument}>{action}</parameter></function>{CLOSE}"
    raise ValueError(f"form must be 'xml' or 'json', got {form!r}")


def tool_schema(
    tool_name: str = "env_step",
    argument: str = "action",
    description: str = "Take one action in the environment.",
) -> dict[str, Any]:
    """The OpenAI-style function schema of the single tool (for ``apply_chat_template(tools=[...])``)."""
    return {
        "type": "function",
        "function": {
            "name": tool_name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {argument: {"type": "string", "description": "the exact action text"}},
                "required": [argument],
            },
        },
    }
