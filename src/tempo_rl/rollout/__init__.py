"""Rollouts: the N-branch rollout loop, the actor's prompts, token-exact chat rendering, the single-tool-call
protocol and Datum builders."""

from __future__ import annotations

from tempo_rl.rollout.branches import BranchResult, RolloutSettings, RolloutStats, run_branches
from tempo_rl.rollout.datums import SequenceBuilder, completion_datum, make_datum, sft_datum
from tempo_rl.rollout.prompts import build_actor_messages, format_observation
from tempo_rl.rollout.renderer import (
    ChatRenderer,
    Extension,
    Message,
    PromptState,
    PromptWindow,
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
    "BranchResult",
    "ChatRenderer",
    "Extension",
    "Message",
    "PromptState",
    "PromptWindow",
    "RendererStats",
    "RolloutSettings",
    "RolloutStats",
    "SequenceBuilder",
    "TemplateError",
    "ToolCall",
    "ToolCallParser",
    "build_actor_messages",
    "completion_datum",
    "format_observation",
    "format_tool_call",
    "make_datum",
    "parse_tool_call",
    "run_branches",
    "sft_datum",
    "tool_schema",
]
