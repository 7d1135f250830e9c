"""ALFWorld's text conventions, shared by the env, the planner and the game generator: how an action is
canonicalised before it reaches the game, and where the task sentence stands in an observation.

A leaf module (no tempo_rl imports), so every ALFWorld module can use it without importing the env.
"""

from __future__ import annotations

import re

__all__ = ["TASK_MARKER", "canonicalize_action", "extract_task"]

#: what precedes the task sentence in a reset observation
TASK_MARKER = "Your task is to: "
_WS = re.compile(r"\s+")


def canonicalize_action(action: str) -> str:
    """Strip, lower-case, collapse inner whitespace: ``"  Go  to\\tCabinet 1 "`` -> ``"go to cabinet 1"``."""
    if not isinstance(action, str):
        raise TypeError(f"an ALFWorld action must be a str, got {type(action).__name__}")
    return _WS.sub(" ", action).strip().lower()


def extract_task(text: str) -> str:
    """The task sentence after ``"Your task is to: "`` (to the end of that line), or ``""`` when absent."""
    idx = text.rfind(TASK_MARKER)
    if idx < 0:
        return ""
    return text[idx + len(TASK_MARKER) :].split("\n", 1)[0].strip()
