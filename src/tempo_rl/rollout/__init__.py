"""Rollout building blocks: token-exact chat rendering, the single-tool-call protocol, Datum builders."""

from __future__ import annotations

from tempo_rl.rollout.datums import SequenceBuilder, completion_datum, make_datum, sft_datum
from tempo_rl.rollout.renderer import (
    ChatRenderer,
    Extension,
    Message,
    PromptState,
    RendererStats,
    TemplateError,
)
from tempo_rl.rollout.tool_call import (
    INVALID_ACTION,
    ToolCall,
    ToolCallParser,
    format_tool_call,
    parse_tool_call,
    tool_schema,
)

__all__ = [
    "INVALID_ACTION",
    "ChatRenderer",
    "Extension",
    "Message",
    "PromptState",
    "RendererStats",
    "SequenceBuilder",
    "TemplateError",
    "ToolCall",
    "ToolCallParser",
    "completion_datum",
    "format_tool_call",
    "make_datum",
    "parse_tool_call",
    "sft_datum",
    "tool_schema",
]
