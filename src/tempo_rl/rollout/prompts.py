"""The actor's prompts: its system prompt, its opening chat and the text of each observation turn.

Only :attr:`~tempo_rl.envs.Observation.text` and :attr:`~tempo_rl.envs.Observation.admissible_actions` are read:
privileged information (walkthroughs, game source) never reaches an actor prompt.
"""

from __future__ import annotations

from tempo_rl.envs.core import Observation
from tempo_rl.rollout.tool_call import format_tool_call

__all__ = ["ACTOR_SYSTEM_PROMPT", "OBSERVATION_ROLE", "build_actor_messages", "format_observation"]

#: The chat role of observation turns after the opening user turn.
OBSERVATION_ROLE = "tool"

#: The actor's system prompt. ``{example}`` is replaced by an example tool call of the configured tool.
ACTOR_SYSTEM_PROMPT = (
    "You act in a text environment. Each turn, reply with exactly one tool call holding one of the listed "
    "actions, e.g. {example}"
)


def format_observation(
    observation: Observation,
    *,
    remaining_steps: int | None = None,
    status: str | None = None,
) -> str:
    """The text of one observation turn shown to the actor.

    ``status`` (e.g. ``"invalid tool call"``) comes first, then the observation text, the admissible actions
    when the env lists them, and the remaining step budget when shown. Never includes privileged information:
    only :attr:`Observation.text` and :attr:`Observation.admissible_actions` are read.
    """
    parts = []
    if status:
        parts.append(f"[{status}]")
    parts.append(observation.text)
    if observation.admissible_actions is not None:
        parts.append("Actions: " + " | ".join(observation.admissible_actions))
    if remaining_steps is not None:
        parts.append(f"Steps left: {remaining_steps}")
    return "\n".join(parts)


def build_actor_messages(
    observation: Observation,
    *,
    tool_name: str = "env_step",
    remaining_steps: int | None = None,
    system_prompt: str = ACTOR_SYSTEM_PROMPT,
) -> list[dict[str, str]]:
    """The actor's opening chat ``[system, user]`` for a reset observation (the public prompt builder).

    The user turn is :func:`format_observation` of the reset observation: the env's own text (which carries the
    task), the admissible actions and the step budget. Privileged information is never an input here.
    """
    return [
        {
            "role": "system",
            "content": system_prompt.replace("{example}", format_tool_call("look", tool_name)),
        },
        {"role": "user", "content": format_observation(observation, remaining_steps=remaining_steps)},
    ]
