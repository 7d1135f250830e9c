"""``backend.dtype`` for a checkpoint directory: the weights load in it, and logprobs stay near float32's.

Stated tolerances (per-token logprob, nats, against the same checkpoint in float32):

* the tiny model in bfloat16: at most 0.05;
* SmolLM2-135M-Instruct in bfloat16 on a 110-token chat prompt and answer: mean at most 0.1, max at most 0.5
  (measured: mean 0.05, max 0.29 on a 2-core AVX512 CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tempo_rl.backends import AdamParams, LocalBackendConfig, SamplingParams, create_clients
from tempo_rl.rollout.datums import completion_datum


def _clients(path: Path, dtype: str, lora: int, tmp_path: Path) -> tuple[Any, Any]:
    from tempo_rl.backends.factory import create_local_clients

    cfg = LocalBackendConfig(
        model_path=str(path), dtype=dtype, lora_rank=lora, device="cpu", state_dir=str(tmp_path / "s")
    )
    return create_local_clients(cfg)


def test_a_checkpoint_loads_in_bfloat16_and_its_logprobs_stay_near_float32(
    tokenizer: Any, tmp_path: Path
) -> None:
    import torch

    cfg = LocalBackendConfig(hidden_size=32, num_layers=2, num_heads=2, state_dir=str(tmp_path / "s"))
    training, _ = create_clients(cfg, tokenizer=tokenizer)
    training.model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    tokens = tokenizer.encode("You arrive at desk 1. go to desk 1 and take apple 1", add_special_tokens=False)
    _, full = _clients(tmp_path / "ckpt", "float32", 4, tmp_path)
    half_training, half = _clients(tmp_path / "ckpt", "bfloat16", 4, tmp_path)
    base = {k: p for k, p in half_training.model.named_parameters() if "lora_" not in k}
    adapter = {k: p for k, p in half_training.model.named_parameters() if "lora_" in k}
    assert {p.dtype for p in base.values()} == {torch.bfloat16}  # half the weights' memory
    assert adapter and {p.dtype for p in adapter.values()} == {
        torch.float32
    }  # the trained part stays float32
    lp16, lp32 = half.compute_logprobs(tokens)[1:], full.compute_logprobs(tokens)[1:]
    np.testing.assert_allclose(lp16, lp32, atol=0.05)
    assert lp16 != lp32  # really computed in bfloat16

    # it samples and trains; the samplers share the bfloat16 base weights
    prompt = tokens[:6]
    seq = half.sample(prompt, 1, SamplingParams(max_tokens=4, seed=0)).sequences[0]
    datum = completion_datum(prompt, list(seq.tokens), list(seq.logprobs), 1.0, vocab_size=len(tokenizer))
    assert np.isfinite(half_training.forward_backward([datum], "importance_sampling").loss)
    half_training.optim_step(AdamParams(learning_rate=1e-2))
    after = half_training.save_weights_and_get_sampling_client()
    shared = {k: p.data_ptr() for k, p in after.model.named_parameters() if "lora_" not in k}
    assert shared == {k: p.data_ptr() for k, p in base.items()}
    assert half.compute_logprobs(tokens)[1:] == lp16  # the first version is unchanged


def test_full_fine_tuning_in_half_precision_warns(tokenizer: Any, tmp_path: Path) -> None:
    cfg = LocalBackendConfig(hidden_size=32, num_layers=1, num_heads=2, state_dir=str(tmp_path / "s"))
    training, _ = create_clients(cfg, tokenizer=tokenizer)
    training.model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    with pytest.warns(UserWarning, match="Adam updates smaller than their rounding step"):
        _clients(tmp_path / "ckpt", "bfloat16", 0, tmp_path)


def test_check_dtype_names_an_unusable_dtype() -> None:
    import torch

    from tempo_rl.backends.local.model import check_dtype

    check_dtype("float32", "cpu")
    check_dtype(torch.bfloat16, "cpu")  # torch computes bfloat16 on every CPU it supports
    with pytest.raises(ValueError, match=r"backend\.dtype = 'int8' cannot run on cpu.*use 'float32'"):
        check_dtype(torch.int8, "cpu")  # softmax has no integer kernel


@pytest.mark.slow
def test_smollm2_in_bfloat16_logprobs_within_the_stated_tolerance(
    real_model_dir: Path, tmp_path: Path
) -> None:
    from tempo_rl.rollout.renderer import ChatRenderer

    lps: dict[str, np.ndarray] = {}
    for dtype in ("float32", "bfloat16"):
        training, sampler = _clients(real_model_dir, dtype, 8, tmp_path)
        tok = training.get_tokenizer()
        task = (
            "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a desk 1, a "
            "drawer 2 and a fridge 1. Your task is to: put a clean apple in the fridge. What do you do first?"
        )
        prompt = list(ChatRenderer(tok).start([{"role": "user", "content": task}]).tokens)
        answer = "I go to the desk 1 and look for the apple, then I take it to the sinkbasin to clean it."
        lps[dtype] = np.array(
            sampler.compute_logprobs(prompt + tok.encode(answer, add_special_tokens=False))[1:]
        )
        del training, sampler
    diff = np.abs(lps["bfloat16"] - lps["float32"])
    assert len(diff) > 100
    assert diff.mean() <= 0.1 and diff.max() <= 0.5, (diff.mean(), diff.max())
