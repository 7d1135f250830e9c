"""Local-backend specifics: it learns (IS and cross-entropy), sampling filters, micro-batching, LoRA."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tempo_rl.backends import (
    AdamParams,
    LocalBackendConfig,
    SamplingParams,
    create_clients,
    parse_backend_config,
)
from tempo_rl.rollout.datums import completion_datum, sft_datum


def test_filter_logits_pinned() -> None:
    import torch

    from tempo_rl.backends.local.sampling import filter_logits

    z = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(filter_logits(z, 1.0, -1, 0.7))[0].tolist()
    assert kept == [True, True, False, False]  # 0.5 < 0.7 <= 0.5 + 0.3
    assert torch.isfinite(filter_logits(z, 1.0, 3, 1.0))[0].tolist() == [True, True, True, False]
    probs = torch.softmax(filter_logits(z, 2.0, -1, 1.0), -1)[0]
    expected = np.sqrt([0.5, 0.3, 0.15, 0.05]) / np.sqrt([0.5, 0.3, 0.15, 0.05]).sum()
    np.testing.assert_allclose(probs.numpy(), expected, rtol=1e-5)


def test_importance_sampling_raises_positive_completions(local_training: Any) -> None:
    tok = local_training.get_tokenizer()
    prompt = tok.encode("Your task is to: put a clean apple in the fridge.", add_special_tokens=False)
    sampler = local_training.save_weights_and_get_sampling_client()
    seqs = sampler.sample(prompt, 4, SamplingParams(max_tokens=6, seed=3)).sequences
    advs = [1.5, -0.5, -0.5, -0.5]  # reward - group mean for rewards (1, 0, 0, 0) x 2

    def total_lp(client: Any, seq: Any) -> float:
        return float(sum(client.compute_logprobs(prompt + list(seq.tokens))[len(prompt) :]))

    before = [total_lp(sampler, s) for s in seqs]
    for _ in range(4):
        datums = [
            completion_datum(prompt, list(s.tokens), list(s.logprobs), a, vocab_size=len(tok))
            for s, a in zip(seqs, advs)
        ]  # off-policy after the first step: the stale sampler logprobs are corrected by the IS ratio
        local_training.forward_backward(datums, "importance_sampling")
        local_training.optim_step(AdamParams(learning_rate=5e-3, grad_clip_norm=1.0))
    after = [total_lp(local_training.save_weights_and_get_sampling_client(), s) for s in seqs]
    assert after[0] > before[0] + 1.0, (before, after)
    assert all(a < b for a, b in zip(after[1:], before[1:])), (before, after)


@pytest.mark.slow
def test_cross_entropy_fits_a_toy_dataset(tokenizer: Any, tmp_path: Path) -> None:
    cfg = LocalBackendConfig(hidden_size=48, num_layers=2, num_heads=4, state_dir=str(tmp_path), seed=1)
    training, _ = create_clients(cfg, tokenizer=tokenizer)
    eos = tokenizer.eos_token_id
    pairs = {
        "desk": " go to desk 1",
        "apple": " take apple 1",
        "drawer": " open drawer 2",
        "look": " Nothing happens.",
    }
    data = [
        (
            tokenizer.encode(f"Q: {q} A:", add_special_tokens=False),
            [*tokenizer.encode(a, add_special_tokens=False), eos],
        )
        for q, a in pairs.items()
    ]
    datums = [sft_datum(p, c, vocab_size=len(tokenizer)) for p, c in data]
    n_targets = sum(len(c) for _, c in data)
    first = training.forward_backward(datums, "cross_entropy").loss / n_targets
    for _ in range(60):
        training.optim_step(AdamParams(learning_rate=1e-2))
        last = training.forward_backward(datums, "cross_entropy").loss / n_targets
    training.optim_step(AdamParams(learning_rate=0.0))
    assert first > 4.0 and last < 0.05, (first, last)
    sampler = training.save_weights_and_get_sampling_client()
    for p, c in data:
        out = sampler.sample(p, 1, SamplingParams(max_tokens=len(c) + 3, temperature=0.0)).sequences[0]
        assert list(out.tokens) == c and out.stop_reason == "stop"


def test_concurrent_requests_are_coalesced(local_training: Any) -> None:
    sampler = local_training.save_weights_and_get_sampling_client()
    tok = local_training.get_tokenizer()
    prompts = [tok.encode(f"go to desk {k}", add_special_tokens=False) for k in range(6)]

    async def run() -> list[Any]:
        return await asyncio.gather(
            *(sampler.sample_async(p, 2, SamplingParams(max_tokens=4, seed=k)) for k, p in enumerate(prompts))
        )

    batched = asyncio.run(run())
    assert sampler.batches_run == 1 and sampler.requests_served == 6
    for k, p in enumerate(prompts):  # same tokens as one request at a time (seeded, padding is invisible)
        alone = sampler.sample(p, 2, SamplingParams(max_tokens=4, seed=k))
        assert [s.tokens for s in alone.sequences] == [s.tokens for s in batched[k].sequences]


def test_stop_strings_and_greedy(local_training: Any) -> None:
    sampler = local_training.save_weights_and_get_sampling_client()
    tok = local_training.get_tokenizer()
    prompt = tok.encode("go to desk", add_special_tokens=False)
    greedy = sampler.sample(prompt, 2, SamplingParams(max_tokens=6, temperature=0.0)).sequences
    assert greedy[0].tokens == greedy[1].tokens
    assert (
        sampler.sample(prompt, 1, SamplingParams(max_tokens=6, top_k=1)).sequences[0].tokens
        == greedy[0].tokens
    )
    stop = tok.decode(list(greedy[0].tokens[1:3]))
    if stop.strip():
        cut = sampler.sample(
            prompt, 1, SamplingParams(max_tokens=6, temperature=0.0, stop=(stop,))
        ).sequences[0]
        assert stop in cut.text and cut.stop_reason == "stop" and len(cut.tokens) <= 3


def test_same_seed_same_model_and_samples(tokenizer: Any, tmp_path: Path) -> None:
    cfg = {"kind": "local", "hidden_size": 32, "num_layers": 1, "num_heads": 2, "state_dir": str(tmp_path)}
    (_, s1), (_, s2) = create_clients(cfg, tokenizer=tokenizer), create_clients(cfg, tokenizer=tokenizer)
    prompt = tokenizer.encode("go to desk 1", add_special_tokens=False)
    p = SamplingParams(max_tokens=5)  # no seed: the client's generator, seeded from the config seed
    assert [s.tokens for s in s1.sample(prompt, 3, p).sequences] == [
        s.tokens for s in s2.sample(prompt, 3, p).sequences
    ]


def test_lora_trains_only_the_adapter(tokenizer: Any, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    training, sampler = create_clients(
        LocalBackendConfig(hidden_size=32, num_layers=1, num_heads=2, lora_rank=4, state_dir=str(tmp_path)),
        tokenizer=tokenizer,
    )
    before = {k: v.clone() for k, v in training.model.state_dict().items()}
    prompt = tokenizer.encode("go to desk 1", add_special_tokens=False)
    seq = sampler.sample(prompt, 1, SamplingParams(max_tokens=4, seed=0)).sequences[0]
    training.forward_backward(
        [completion_datum(prompt, list(seq.tokens), list(seq.logprobs), 1.0)], "importance_sampling"
    )
    training.optim_step(AdamParams(learning_rate=1e-2))
    changed = {
        k for k, v in training.model.state_dict().items() if not np.allclose(v.numpy(), before[k].numpy())
    }
    assert changed and all("lora_" in k for k in changed)


def test_config_validation_messages() -> None:
    with pytest.raises(ValueError, match="kind"):
        parse_backend_config({"kind": "nope"})
    with pytest.raises(ValueError, match="extra"):
        parse_backend_config({"kind": "local", "hidden": 3})
    with pytest.raises(ValueError, match="lora_rank"):
        parse_backend_config({"kind": "pytrio", "lora_rank": 128})
    assert parse_backend_config({"kind": "pytrio"}).retry.max_attempts == 5
    assert math.isfinite(parse_backend_config({"kind": "tinker"}).retry.result_timeout_s)


def test_local_checkpoint_directory_round_trip(tokenizer: Any, tmp_path: Path) -> None:
    """A saved HF checkpoint (model + tokenizer in one dir) loads offline and scores identically."""
    cfg = LocalBackendConfig(hidden_size=32, num_layers=1, num_heads=2, state_dir=str(tmp_path / "s"))
    training, sampler = create_clients(cfg, tokenizer=tokenizer)
    training.model.save_pretrained(tmp_path / "ckpt")
    tokenizer.save_pretrained(tmp_path / "ckpt")
    _, loaded = create_clients(
        LocalBackendConfig(model_path=str(tmp_path / "ckpt"), state_dir=str(tmp_path / "s"))
    )
    tokens = tokenizer.encode("go to desk 1", add_special_tokens=False)
    assert len(loaded.get_tokenizer()) == len(tokenizer)
    np.testing.assert_allclose(
        loaded.compute_logprobs(tokens)[1:], sampler.compute_logprobs(tokens)[1:], atol=1e-6
    )
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        create_clients(LocalBackendConfig(model_path=str(tmp_path / "nope")), tokenizer=tokenizer)


def test_score_continuations_is_the_tail_of_compute_logprobs(local_training: Any) -> None:
    """The shared-prompt scorer of the critic's answer grid gives each continuation's logprobs as
    ``compute_logprobs(prompt + c)[len(prompt):]`` (to float rounding), the same on every call."""
    tok = local_training.get_tokenizer()
    sampler = local_training.save_weights_and_get_sampling_client()
    prompt = tok.encode("You are the critic. Task: open the door. Value:", add_special_tokens=False)
    answers = [tok.encode(f"<value>{v}</value>", add_special_tokens=False) for v in ("0", "1", "0.5")]
    conts = [*answers, answers[0][:1], []]
    shared = sampler.score_continuations(prompt, conts)
    assert [len(t) for t in shared] == [len(c) for c in conts]
    for c, tail in zip(conts[:-1], shared[:-1]):
        np.testing.assert_allclose(tail, sampler.compute_logprobs(prompt + c)[len(prompt) :], atol=1e-5)
    assert shared == sampler.score_continuations(prompt, conts)  # deterministic
    assert asyncio.run(sampler.score_continuations_async(prompt, conts)) == shared
    with pytest.raises(ValueError, match="empty prompt"):
        sampler.score_continuations([], conts)
    with pytest.raises(ValueError, match=r"token ids \[999999\] outside"):
        sampler.score_continuations(prompt, [[999999]])
    with pytest.raises(ValueError, match="over the model's max_positions"):
        sampler.score_continuations(prompt * 5000, conts[:1])
