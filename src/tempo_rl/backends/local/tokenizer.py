"""An offline tokenizer: byte-level BPE trained in-process, wrapped as a Hugging Face fast tokenizer.

No download is ever needed. :func:`build_tokenizer` trains a byte-level BPE (``tokenizers``) on a corpus of
texts (the trainer passes its prompts, environment observations and walkthrough actions), so that environment
text tokenizes compactly, while the 256-symbol byte alphabet guarantees that *any* string encodes and that
``decode(encode(s)) == s`` exactly. The result is a :class:`transformers.PreTrainedTokenizerFast` with
ChatML-like special tokens and a Jinja ``chat_template``, saved to / loaded from a run directory with the
usual ``save_pretrained`` / :func:`load_tokenizer`.

Special tokens (ids 0..2, in this order): ``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos: the
end of every turn and the default stop token). ``<think>``, ``</think>``, ``<tool_call>``, ``</tool_call>``,
the XML tags of the default tool call and the critic's ``<value>``/``</value>`` (:data:`STRUCTURE_TOKENS`) are
added as whole (non-special) tokens so that they survive ``skip_special_tokens`` and cost one token each.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tempo_rl._optional import require

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "CHATML_TEMPLATE",
    "EOS_TOKEN",
    "IM_START_TOKEN",
    "PAD_TOKEN",
    "STRUCTURE_TOKENS",
    "build_tokenizer",
    "load_tokenizer",
]

PAD_TOKEN = "<|endoftext|>"
IM_START_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
#: whole tokens that tool calls, reasoning and critic answers use; not special (they stay in decoded text). The
#: XML tags are those of :func:`tempo_rl.rollout.tool_call.format_tool_call`'s default tool (``env_step``,
#: argument ``action``), and ``<value>``/``</value>`` the critic's answer tags: as whole tokens a call is 7
#: tokens plus the action's, and no subword (``function``, ``parameter``, ``value``) is shared between an
#: opening and a closing tag, where a small model would have to tell them apart by the token before (measured:
#: RL updates on one tag then leaked into the other and broke the tiny model's tool calls).
STRUCTURE_TOKENS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<function=env_step>",
    "<parameter=action>",
    "</parameter>",
    "</function>",
    "<value>",
    "</value>",
)

#: ChatML: ``<|im_start|>{role}\n{content}<|im_end|>\n`` per message, then ``<|im_start|>assistant\n`` when a
#: generation prompt is requested. Purely local: a turn renders the same whatever precedes it.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_DEFAULT_CORPUS: tuple[str, ...] = (
    "You are a helpful agent. Think step by step, then call the tool exactly once.",
    '<tool_call>{"name": "env_step", "arguments": {"action": "go to the door"}}</tool_call>',
    "<tool_call><function=env_step><parameter=action>take key</parameter></function></tool_call>",
    "Task: Current step: Current observation: Available actions (copy one exactly):",
    "<|im_start|>system\n<|im_start|>user\n<|im_start|>assistant\n<|im_start|>tool\n<|im_end|>\n",
    "The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 <value>0.5</value>",
)


def _iter_corpus(corpus: Iterable[str]) -> Iterator[str]:
    for i, text in enumerate(corpus):
        if not isinstance(text, str):
            raise TypeError(f"tokenizer corpus item {i} is {type(text).__name__}, expected str")
        yield text
    yield from _DEFAULT_CORPUS


def build_tokenizer(
    corpus: Iterable[str],
    vocab_size: int = 1024,
    *,
    min_frequency: int = 2,
    chat_template: str = CHATML_TEMPLATE,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``corpus`` (in-process, ~1 s) and wrap it for transformers.

    Args:
        corpus: texts the tokenizer should encode compactly (a fixed built-in corpus of tool-call and prompt
            phrases is always appended).
        vocab_size: target vocabulary size including the 256 byte symbols and the special/structure tokens;
            must be >= 270. The trained vocabulary may come out smaller when the corpus is small.
        min_frequency: a pair must occur this many times to be merged.
        chat_template: the Jinja chat template stored on the tokenizer (ChatML by default).

    Returns:
        A ``PreTrainedTokenizerFast`` with ``eos_token = "<|im_end|>"``, ``pad_token = "<|endoftext|>"`` and
        ``chat_template`` set. ``len(tokenizer)`` is the model's vocabulary size.
    """
    smallest = 256 + 3 + len(STRUCTURE_TOKENS) + 1
    if vocab_size < smallest:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: use at least {smallest} (256 bytes + special and structure "
            "tokens + 1)"
        )
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    tk = require("tokenizers", "local")
    transformers = require("transformers", "local")

    specials = [PAD_TOKEN, IM_START_TOKEN, EOS_TOKEN]
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size - len(STRUCTURE_TOKENS),
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_iter_corpus(corpus), trainer=trainer)
    tok.add_tokens([tk.AddedToken(t, special=False, normalized=False) for t in STRUCTURE_TOKENS])
    wrapped = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START_TOKEN],
        clean_up_tokenization_spaces=False,
    )
    wrapped.chat_template = chat_template
    return wrapped


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved with ``tokenizer.save_pretrained(path)`` (offline: ``local_files_only``).

    Raises:
        FileNotFoundError: ``path`` has no ``tokenizer.json`` (build one with :func:`build_tokenizer`).
    """
    p = Path(path)
    if not (p / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"no tokenizer.json in {p}: build one with tempo_rl.backends.local.build_tokenizer(corpus) "
            "and save it with tokenizer.save_pretrained(dir)"
        )
    transformers = require("transformers", "local")
    tok: PreTrainedTokenizerFast = transformers.PreTrainedTokenizerFast.from_pretrained(
        str(p), local_files_only=True
    )
    return tok
