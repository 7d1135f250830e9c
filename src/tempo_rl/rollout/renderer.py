"""Token-exact multi-turn prompts: render chat turns with the model's template and extend by appending.

A multi-turn episode alternates: sample a completion from the current prompt, then extend the prompt with that
completion and the environment's answer. Re-rendering the whole conversation each turn and re-tokenizing it is
wrong (the sampled tokens may not be the canonical tokenization of their text, so the trained sequence would
differ from what the policy produced) and slow (O(L) per turn, O(L^2) per episode). :class:`ChatRenderer`
instead builds the next prompt as::

    next = prompt + completion_tokens (exactly as sampled) + closing tokens + tokens of the new turns

where *closing* is what the chat template puts after an assistant message's content (e.g. ``<|im_end|>\\n``;
the EOS the completion already ended with is not repeated) and the new turns' text is the difference between
two template renders of a constant-size *window* of the conversation (its head up to the first user message,
the last message before the completion, the completion, the new messages). The cost per turn is therefore
proportional to the new tokens, whatever the conversation length.

**History rewrites.** Some templates render an earlier turn differently once later turns exist (e.g. Qwen3
drops the ``<think>`` block of assistant turns before the last user query) or normalise an assistant message.
Then no appended prompt equals what the template would show the model. :meth:`ChatRenderer.extend` detects it
(the window renders must extend each other, and the assistant message must render as its content + closing)
and returns a *restart*: a fresh full render of the conversation that begins a new training sequence, instead
of silently re-tokenizing history. Restarts are counted in :attr:`ChatRenderer.stats`. With ``check=True``
every extension is also compared with a full re-render (O(L), for tests and debugging).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tempo_rl.backends.types import Tokenizer

__all__ = [
    "ChatRenderer",
    "Extension",
    "Message",
    "PromptState",
    "PromptWindow",
    "RendererStats",
    "TemplateError",
]

Message = Mapping[str, Any]  #: ``{"role": "system"|"user"|"assistant"|"tool", "content": str, ...}``

_PROBE = "\x01tempo-probe\x02"


class TemplateError(ValueError):
    """The chat template cannot be used for prompt extension (the message says why and what to do)."""


@dataclass(frozen=True)
class PromptState:
    """A prompt ready for sampling: its exact tokens and the messages it renders.

    ``head`` is the number of leading messages (through the first user message) kept in every render window.
    """

    tokens: tuple[int, ...]
    messages: tuple[Message, ...]
    head: int = 0


@dataclass(frozen=True)
class PromptWindow:
    """What the renderer needs, besides the tokens, to extend a stored prompt: the head messages (through the
    first user turn) and the last message.

    Attributes:
        messages: the head messages, then the last message (if it is not part of the head).
        head: how many leading messages form the head.
    """

    messages: tuple[Mapping[str, Any], ...]
    head: int

    @classmethod
    def of(cls, prompt: PromptState) -> PromptWindow:
        """The window of a live prompt."""
        head = list(prompt.messages[: prompt.head])
        last = list(prompt.messages[-1:]) if len(prompt.messages) > prompt.head else []
        return cls(messages=tuple(dict(m) for m in head + last), head=prompt.head)

    def prompt_state(self, tokens: Sequence[int]) -> PromptState:
        """The renderer state of the prompt ``tokens`` rendered with this window."""
        return PromptState(
            tokens=tuple(tokens), messages=tuple(dict(m) for m in self.messages), head=self.head
        )

    def to_json(self) -> dict[str, Any]:
        """``{"messages": [...], "head": int}``."""
        return {"messages": [dict(m) for m in self.messages], "head": self.head}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PromptWindow:
        """Inverse of :meth:`to_json`."""
        return cls(messages=tuple(dict(m) for m in data["messages"]), head=int(data["head"]))


@dataclass(frozen=True)
class Extension:
    """The result of :meth:`ChatRenderer.extend`.

    Attributes:
        state: the next prompt.
        appended: when not ``restarted``, the tokens added after the completion (closing + new turns), i.e.
            ``state.tokens == prompt + completion + appended``; empty when ``restarted``.
        restarted: the template rewrites history: ``state.tokens`` is a fresh full render that starts a new
            training sequence (the previous one ends with the completion).
        reason: why it restarted ("" otherwise).
    """

    state: PromptState
    appended: tuple[int, ...]
    restarted: bool = False
    reason: str = ""


@dataclass
class RendererStats:
    """What a :class:`ChatRenderer` did since it was made.

    Attributes:
        extensions: prompts extended by appending the new turns' tokens.
        restarts: prompts rendered afresh because the template rewrote history (see :attr:`restart_reasons`).
        full_renders: full renders of a conversation (first prompts and restarts).
        checks: extensions compared with a full re-render (``check=True``).
        appended_tokens: tokens appended by the extensions.
        restart_reasons: restarts counted by reason.
    """

    extensions: int = 0
    restarts: int = 0
    full_renders: int = 0
    checks: int = 0
    appended_tokens: int = 0
    restart_reasons: dict[str, int] = field(default_factory=dict)


class ChatRenderer:
    """Renders conversations with ``tokenizer.apply_chat_template`` and extends prompts by appending.

    Args:
        tokenizer: a Hugging Face tokenizer with a ``chat_template``.
        check: also compare every extension with a full re-render (O(L) per turn; for tests/debugging).
        template_kwargs: extra keyword arguments for ``apply_chat_template`` (e.g. ``tools=[...]``).
    """

    def __init__(
        self, tokenizer: Tokenizer, *, check: bool = False, template_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError(
                "the tokenizer has no chat_template; set tokenizer.chat_template (e.g. "
                "tempo_rl.backends.local.CHATML_TEMPLATE) before rendering conversations"
            )
        self.tokenizer: Any = tokenizer
        self.check = check
        self.template_kwargs = dict(template_kwargs or {})
        self.stats = RendererStats()
        eos = tokenizer.eos_token_id
        self._eos_text = tokenizer.decode([eos], skip_special_tokens=False) if eos is not None else None
        self._closing: str | None = None

    # ---- rendering primitives
    def render_text(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        """The template's text for ``messages``."""
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.template_kwargs,
        )
        if not isinstance(text, str):  # pragma: no cover - defensive against exotic tokenizers
            raise TemplateError(f"apply_chat_template returned {type(text).__name__}, expected str")
        return text

    def encode(self, text: str) -> tuple[int, ...]:
        """Tokens of ``text`` without added BOS/EOS (the template writes its own special tokens)."""
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    @staticmethod
    def _head_len(messages: Sequence[Message]) -> int:
        for i, m in enumerate(messages):
            if m.get("role") == "user":
                return i + 1
        return 0

    def start(self, messages: Sequence[Message]) -> PromptState:
        """The first prompt: a full render of ``messages`` with the generation prompt, tokenized."""
        _check_messages(messages)
        if messages[-1].get("role") == "assistant":
            raise ValueError("the last message is an assistant turn; a prompt must end with a user/tool turn")
        self.stats.full_renders += 1
        msgs = tuple(dict(m) for m in messages)
        return PromptState(self.encode(self.render_text(msgs, True)), msgs, self._head_len(msgs))

    def closing_text(self) -> str:
        """What the template writes after an assistant message's content (e.g. ``"<|im_end|>\\n"``)."""
        if self._closing is None:
            window: list[Message] = [{"role": "user", "content": "x"}]
            p = self.render_text(window, True)
            a = self.render_text([*window, {"role": "assistant", "content": _PROBE}], False)
            if not a.startswith(p) or not a[len(p) :].startswith(_PROBE):
                raise TemplateError(
                    "the chat template does not render an assistant turn as generation prompt + content; "
                    "prompt extension is impossible with it (use a template without such rewriting)"
                )
            self._closing = a[len(p) + len(_PROBE) :]
        return self._closing

    def _content(self, completion: Sequence[int]) -> tuple[str, bool]:
        """Decoded assistant content, and whether the completion already ended with EOS."""
        eos = self.tokenizer.eos_token_id
        ended = bool(completion) and eos is not None and completion[-1] == eos
        body = list(completion[:-1]) if ended else list(completion)
        return self.tokenizer.decode(body, skip_special_tokens=False), ended

    def _restart(self, messages: tuple[Message, ...], reason: str) -> Extension:
        self.stats.restarts += 1
        self.stats.restart_reasons[reason] = self.stats.restart_reasons.get(reason, 0) + 1
        self.stats.full_renders += 1
        tokens = self.encode(self.render_text(messages, True))
        return Extension(PromptState(tokens, messages, self._head_len(messages)), (), True, reason)

    def extend(
        self, state: PromptState, completion: Sequence[int], new_messages: Sequence[Message]
    ) -> Extension:
        """The next prompt after ``completion`` (sampled from ``state.tokens``) and the ``new_messages``.

        The assistant message recorded in the conversation is the completion's decoded text (without the final
        EOS). Returns an :class:`Extension`; see the module docstring for restarts.
        """
        if not new_messages:
            raise ValueError("extend needs at least one new message (the environment's answer)")
        _check_messages(new_messages)
        comp = [int(t) for t in completion]
        content, ended = self._content(comp)
        assistant: Message = {"role": "assistant", "content": content}
        msgs = (*state.messages, assistant, *(dict(m) for m in new_messages))
        try:
            full_closing = closing = self.closing_text()
        except TemplateError:
            return self._restart(msgs, "no_closing_text")
        if ended:  # the sampled EOS already is the start of the closing text
            if self._eos_text is None or not closing.startswith(self._eos_text):
                return self._restart(msgs, "eos_not_in_closing")
            closing = closing[len(self._eos_text) :]
        head = list(state.messages[: state.head])
        last = state.messages[-1:] if len(state.messages) > state.head else []
        window = [*head, *last]
        try:
            p = self.render_text(window, True)
            a = self.render_text([*window, assistant], False)
            b = self.render_text([*window, assistant, *new_messages], True)
        except Exception as exc:  # a template may reject a window (e.g. role-order checks): re-render fully
            return self._restart(msgs, f"window_render_failed:{type(exc).__name__}")
        if not a.startswith(p) or a[len(p) :] != content + full_closing:
            return self._restart(msgs, "assistant_rewritten")
        if not b.startswith(a):
            return self._restart(msgs, "history_rewritten")
        appended = self.encode(closing + b[len(a) :])
        tokens = state.tokens + tuple(comp) + appended
        if self.check:
            self.stats.checks += 1
            full = self.render_text(msgs, True)
            if self.tokenizer.decode(list(tokens), skip_special_tokens=False) != full:
                return self._restart(msgs, "check_mismatch")
        self.stats.extensions += 1
        self.stats.appended_tokens += len(appended)
        return Extension(PromptState(tokens, msgs, state.head or self._head_len(msgs)), appended)


def _check_messages(messages: Sequence[Message]) -> None:
    if not messages:
        raise ValueError("a conversation needs at least one message")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m or not isinstance(m.get("content"), str):
            raise ValueError(f"message {i} must be a mapping with 'role' and str 'content', got {m!r}")
