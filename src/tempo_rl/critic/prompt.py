"""The generative critic's prompt: a system prompt plus one user turn describing the state.

The user turn holds the task, the privileged information (critic-only), the remaining step budget when known,
and the *condensed* history: the initial observation, then one ``Actor:`` / ``Environment:`` pair per turn.
When the prompt is over the token budget, a contiguous block in the middle of the history is replaced by one
line saying how many turns were omitted: the first turns (how the episode started) and the most recent turns
(where it stands) are kept, recent ones preferred 2:1.
"""

from __future__ import annotations

from collections.abc import Sequence

from tempo_rl.critic.base import CriticQuery, Turn

__all__ = [
    "DEFAULT_CRITIC_SYSTEM_PROMPT",
    "Message",
    "build_critic_messages",
    "condense_history",
    "kept_turns",
    "shown_turns",
]

#: A chat message: ``{"role": "system" | "user" | "assistant", "content": str}``.
Message = dict[str, str]

#: ``{r_max}`` is replaced by the configured R_max.
DEFAULT_CRITIC_SYSTEM_PROMPT = (
    "You are a value estimator for an agent acting in a text environment. You are shown the task, the "
    "interaction so far, and privileged information that the agent itself never sees. Judge how much "
    "return the agent will still collect from the current state if it keeps acting as it has so far. The "
    "answer is a number between 0 and {r_max} (for a task that is either solved or not, the probability "
    "that the agent solves it). Think briefly, then finish with exactly one line of the form "
    "<value>x</value>."
)


def kept_turns(n_turns: int, omitted: int) -> tuple[int, int]:
    """How many turns to keep at the start and at the end when ``omitted`` middle turns are dropped.

    Returns ``(head, tail)`` with ``head + tail = n_turns - omitted`` and ``tail = ceil(2 * keep / 3)``.
    """
    if not 0 <= omitted <= n_turns:
        raise ValueError(f"omitted must be in [0, {n_turns}], got {omitted}")
    keep = n_turns - omitted
    tail = -(-2 * keep // 3)
    return keep - tail, tail


def shown_turns(n_turns: int, history_turns: int | None) -> int:
    """How many of ``n_turns`` history turns the critic is shown: the last ``history_turns`` (None: all)."""
    if history_turns is None:
        return n_turns
    if history_turns < 0:
        raise ValueError(f"history_turns must be >= 0 or None, got {history_turns}")
    return min(n_turns, history_turns)


def condense_history(
    initial_observation: str,
    history: Sequence[Turn],
    omitted: int = 0,
    max_observation_chars: int | None = None,
    history_turns: int | None = None,
) -> str:
    """The history as text: ``Initial situation:``, then ``Step i`` blocks, ``omitted`` middle turns elided.

    Args:
        initial_observation: the reset observation.
        history: ``(action, observation)`` turns, oldest first.
        omitted: how many of the shown turns to leave out of the middle (see :func:`kept_turns`).
        max_observation_chars: cut each observation to this many characters (``...`` appended); None = no cut.
        history_turns: show only the last this many turns (:func:`shown_turns`; the earlier ones are named by a
            ``[... steps 1-j not shown ...]`` line); None = all.
    """

    def cut(text: str) -> str:
        if max_observation_chars is not None and len(text) > max_observation_chars:
            return text[:max_observation_chars] + "..."
        return text

    start = len(history) - shown_turns(len(history), history_turns)
    shown = history[start:]
    head, tail = kept_turns(len(shown), omitted)
    lines = ["Initial situation:", cut(initial_observation)]
    if start:
        lines.append(f"[... steps 1-{start} not shown ...]")
    indices = list(range(head)) + list(range(len(shown) - tail, len(shown)))
    gap = f"[... steps {start + head + 1}-{start + head + omitted} omitted to fit the prompt budget ...]"
    for pos, i in enumerate(indices):
        if omitted and pos == head:
            lines.append(gap)
        action, observation = shown[i]
        lines.append(f"Step {start + i + 1}. Actor: {action}")
        lines.append(f"Environment: {cut(observation)}")
    if omitted and head == len(indices):  # everything after the head was omitted
        lines.append(gap)
    return "\n".join(lines)


def build_critic_messages(
    query: CriticQuery,
    *,
    system_prompt: str = DEFAULT_CRITIC_SYSTEM_PROMPT,
    omitted: int = 0,
    max_observation_chars: int | None = None,
    history_turns: int | None = None,
) -> list[Message]:
    """The critic's chat: ``[system, user]``.

    ``system_prompt`` may contain ``{r_max}``; it is formatted with the query's R_max (compact ``g`` format).
    ``omitted``, ``max_observation_chars`` and ``history_turns``: see :func:`condense_history`.
    """
    r_max_text = f"{query.r_max:g}"
    system = system_prompt.replace("{r_max}", r_max_text)
    parts = [f"Task: {query.task}"]
    if query.privileged_info:
        parts.append(f"Privileged information (hidden from the agent):\n{query.privileged_info}")
    if query.remaining_steps is not None:
        parts.append(f"Steps left before the episode is cut off: {query.remaining_steps}")
    parts.append(
        "Interaction so far:\n"
        + condense_history(
            query.initial_observation, query.history, omitted, max_observation_chars, history_turns
        )
    )
    if query.privileged_state:
        parts.append(f"Now (hidden from the agent): {query.privileged_state}")
    parts.append(f"Estimate the value of the current state (0 to {r_max_text}); end with <value>x</value>.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]
