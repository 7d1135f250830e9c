"""Chat templates that rewrite history, for testing prompt extension and template restarts.

Real reasoning models' templates (e.g. Qwen3) render an assistant turn differently once a later user query
exists: its ``<think>...</think>`` block is dropped. No token-exact extension of the sampled prompt exists then,
and :meth:`tempo_rl.rollout.ChatRenderer.extend` reports a restart. :func:`think_dropping_template` writes such a
template (ChatML framing) so that tests and users can check how their pipeline handles restarts offline.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["QWEN_STYLE_TEMPLATE", "think_dropping_template"]


def think_dropping_template(reset_roles: Sequence[str] = ("user",)) -> str:
    """A Qwen3-style Jinja chat template: assistant turns before the last message whose role is in
    ``reset_roles`` lose their ``<think>`` block (everything up to and including ``</think>``).

    Tool turns render as a user turn wrapping ``<tool_response>``; every other turn as
    ``<|im_start|>{role}\\n{content}<|im_end|>\\n``; the generation prompt is ``<|im_start|>assistant\\n``.

    Args:
        reset_roles: the roles that count as "a later query". ``("user",)`` is Qwen3's behaviour (tool results
            do not reset, so tool-driven agents extend exactly); ``("user", "tool")`` rewrites history after
            every tool turn (a restart on every turn).

    Raises:
        ValueError: ``reset_roles`` is empty or holds a role that is not a plain identifier.
    """
    roles = list(reset_roles)
    if not roles or not all(isinstance(r, str) and r.isidentifier() for r in roles):
        raise ValueError(
            f"reset_roles must be non-empty plain role names like ('user',), got {reset_roles!r}"
        )
    listed = "[" + ", ".join(f"'{r}'" for r in roles) + "]"
    return (
        "{%- set ns = namespace(last_user=-1) -%}"
        "{%- for m in messages -%}"
        "{%- if m['role'] in " + listed + " -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
        "{%- endfor -%}"
        "{%- for m in messages -%}"
        "{%- if m['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in m['content'] -%}"
        "{{ '<|im_start|>assistant\\n' + m['content'].split('</think>')[-1].lstrip() + '<|im_end|>\\n' }}"
        "{%- elif m['role'] == 'tool' -%}"
        "{{ '<|im_start|>user\\n<tool_response>\\n' + m['content'] + '\\n</tool_response><|im_end|>\\n' }}"
        "{%- else -%}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
    )


#: Qwen3's rule: assistant turns before the last *user* message lose their ``<think>`` block.
QWEN_STYLE_TEMPLATE = think_dropping_template(("user",))
