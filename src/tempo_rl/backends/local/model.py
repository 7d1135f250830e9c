"""Causal language models for the local backend: a tiny one built in code, or a local checkpoint.

Both are Hugging Face ``transformers`` causal LMs (``LlamaForCausalLM`` for the tiny one), so the rest of the
backend only relies on ``model(input_ids, attention_mask, position_ids, cache) -> logits``. Nothing is ever
downloaded: :func:`load_model` uses ``local_files_only=True``.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tempo_rl._optional import require

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "apply_lora",
    "build_tiny_model",
    "check_dtype",
    "forward_logits",
    "load_model",
    "resolve_device",
]


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"`` when a GPU is visible, else ``"cpu"``; other values are returned unchanged."""
    torch = require("torch", "local")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r} was requested but CUDA is not available; use device='cpu'")
    return device


def build_tiny_model(
    vocab_size: int,
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int | None = None,
    max_positions: int = 8192,
    seed: int = 0,
) -> Any:
    """A randomly initialised Llama-architecture causal LM, small enough to train on CPU.

    With the defaults (width 64, 2 layers, tied embeddings) it has about ``64 * vocab_size + 100k``
    parameters. Initialisation is deterministic for a fixed ``seed`` (the global torch RNG is left untouched).

    Args:
        vocab_size: ``len(tokenizer)``; every token id must be below it.
        hidden_size: model width; must be divisible by ``num_heads``.
        num_layers: transformer blocks.
        num_heads: attention heads.
        intermediate_size: MLP width (default ``4 * hidden_size``).
        max_positions: longest sequence (RoPE positions).
        seed: initialisation seed.
    """
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}")
    torch = require("torch", "local")
    transformers = require("transformers", "local")
    cfg = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(cfg)
    return model


def check_dtype(dtype: Any, device: str) -> None:
    """Raise ``ValueError`` when this torch cannot compute in ``dtype`` (a ``torch.dtype`` or its name) on
    ``device``: a matrix product and a softmax in it are tried there.

    float32 always works. bfloat16 works on every x86-64 and ARM CPU torch supports (fast where the CPU has
    bfloat16 instructions: AVX512-BF16 or AMX; elsewhere it is converted around each product) and on CUDA GPUs
    that ``torch.cuda.is_bf16_supported()``; float16 on CUDA and, slowly, on recent torch CPU builds.
    """
    torch = require("torch", "local")
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if dt in (torch.float32, torch.float64):
        return
    name = str(dt).removeprefix("torch.")
    why = ""
    if str(device).startswith("cuda") and dt == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        why = "this GPU has no bfloat16 support"
    else:
        try:
            x = torch.ones((4, 4), dtype=dt, device=device)
            float(torch.softmax(x @ x, dim=-1).sum())
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            why = f"{type(exc).__name__}: {exc}"
    if why:
        raise ValueError(
            f"backend.dtype = {name!r} cannot run on {device} with this torch ({why}); use 'float32'"
        )


def load_model(path: str | Path, *, dtype: str = "float32") -> Any:
    """Load a causal LM checkpoint from a local directory (never downloads), its weights in ``dtype``.

    A float32 checkpoint (such as ``tempo-rl model fetch smollm2``'s) loads in bfloat16 or float16 when asked:
    half the weights' memory. Per-token logprobs then differ from float32's by rounding (measured on
    SmolLM2-135M in bfloat16: mean 0.05, max 0.3 nats a token; see ``docs/real-model.md``).

    Raises:
        FileNotFoundError: ``path`` is not a directory with a ``config.json``.
    """
    p = Path(path)
    if not (p / "config.json").is_file():
        raise FileNotFoundError(
            f"{p} is not a Hugging Face checkpoint directory (no config.json); pass a local model directory "
            "or leave model_path unset to build the tiny model in code"
        )
    torch = require("torch", "local")
    transformers = require("transformers", "local")
    torch_dtype = getattr(torch, dtype)
    return transformers.AutoModelForCausalLM.from_pretrained(str(p), dtype=torch_dtype, local_files_only=True)


def apply_lora(model: Any, rank: int, alpha: float | None = None) -> Any:
    """Wrap ``model`` with a peft LoRA adapter of ``rank`` on every linear layer (only the adapter trains)."""
    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, got {rank}")
    peft = require("peft", "lora")
    cfg = peft.LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, target_modules="all-linear", lora_dropout=0.0)
    return peft.get_peft_model(model, cfg)


@functools.cache
def _cache_kwarg(forward: Any) -> str:
    params = inspect.signature(forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def forward_logits(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    cache: Any = None,
    *,
    use_cache: bool = False,
    logits_to_keep: int = 0,
) -> tuple[torch.Tensor, Any]:
    """``model(...)`` -> ``(logits [B, T, V] float32, cache)`` for transformers 4.x and 5.x cache names."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    kw: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "use_cache": use_cache,
    }
    if cache is not None:
        kw[_cache_kwarg(type(base).forward)] = cache
    if logits_to_keep:
        kw["logits_to_keep"] = logits_to_keep
    out = model(**kw)
    fields = getattr(type(out), "__dataclass_fields__", {})
    new_cache = out.cache if "cache" in fields else getattr(out, "past_key_values", None)
    return out.logits.float(), new_cache
