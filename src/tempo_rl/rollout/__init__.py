"""Rollouts: the N-branch rollout loop, the actor's prompts, token-exact chat rendering, the single-tool-call
protocol and Datum builders."""

from __future__ import annotations

from tempo_rl.rollout.branches import BranchResult, RolloutSettings, run_branches
from tempo_rl.rollout.datums import completion_datum, make_datum
from tempo_rl.rollout.prompts import build_actor_messages
from tempo_rl.rollout.renderer import ChatRenderer, PromptState, TemplateError
from tempo_rl.rollout.tool_call import (
    INVALID_ACTION,
    ToolCallParser,
    format_tool_call,
    parse_tool_call,
    tool_schema,
)

__all__ = [
    "INVALID_ACTION",
    "BranchResult",
    "ChatRenderer",
    "PromptState",
    "RolloutSettings",
    "TemplateError",
    "ToolCallParser",
    "build_actor_messages",
    "completion_datum",
    "format_tool_call",
    "make_datum",
    "parse_tool_call",
    "run_branches",
    "tool_schema",
]
