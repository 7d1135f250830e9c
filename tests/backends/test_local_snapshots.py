"""Local sampling clients share the training model's weights: one copy of the frozen weights, exact versions.

A sampler is made over the training model's storage; the training client copies a parameter into a live
sampler only before it changes that parameter in place (``optim_step``, ``load_state``). With LoRA the base
weights are therefore never copied, and whatever the fine-tuning, an old sampler keeps computing its own policy
version after the trainer has stepped.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tempo_rl.backends import AdamParams, SamplingParams
from tempo_rl.rollout.datums import completion_datum

PROMPT_TEXT = "Your task is to: put a clean apple in the fridge."


def _rss_bytes() -> int:
    """The process's resident memory now (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _trim_heap() -> None:
    """Hand freed heap memory back to the system (glibc), so that the next allocations show in the RSS."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class _RssPeak:
    """The most resident memory seen while the ``with`` block runs (polled every millisecond)."""

    def __init__(self) -> None:
        self.bytes = _rss_bytes()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._done.wait(0.001):
            self.bytes = max(self.bytes, _rss_bytes())

    def __enter__(self) -> _RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.bytes = max(self.bytes, _rss_bytes())


def _training(tokenizer: Any, tmp_path: Path, *, lora: int, hidden: int = 32, layers: int = 1) -> Any:
    from tempo_rl.backends.local import LocalTrainingClient, apply_lora, build_tiny_model

    model = build_tiny_model(len(tokenizer), hidden_size=hidden, num_layers=layers, num_heads=2, seed=0)
    if lora:
        model = apply_lora(model, lora)
    return LocalTrainingClient(model, tokenizer, state_dir=tmp_path / "ckpt", seed=0, prefix_cache_bytes=0)


def _step(training: Any, sampler: Any, prompt: list[int], lr: float = 5e-2) -> None:
    """One importance-sampling step on a sampled completion (a large learning rate: the weights move)."""
    seq = sampler.sample(prompt, 1, SamplingParams(max_tokens=4, seed=1)).sequences[0]
    datum = completion_datum(
        prompt, list(seq.tokens), list(seq.logprobs), 1.0, vocab_size=training.vocab_size
    )
    training.forward_backward([datum], "importance_sampling")
    training.optim_step(AdamParams(learning_rate=lr))


def _probe(sampler: Any, prompt: list[int]) -> tuple[list[Any], list[tuple[int, ...]]]:
    """What a sampler computes: logprobs of a fixed sequence, and seeded samples."""
    lps = sampler.compute_logprobs([*prompt, 5, 6, 7])
    seqs = sampler.sample(prompt, 2, SamplingParams(max_tokens=6, seed=7, temperature=1.0)).sequences
    return lps, [tuple(s.tokens) for s in seqs]


def _base_params(model: Any) -> dict[str, Any]:
    return {k: p for k, p in model.named_parameters() if "lora_" not in k}


def test_lora_samplers_share_the_base_weights_and_a_new_version_costs_no_copy(
    tokenizer: Any, tmp_path: Path
) -> None:
    # ~17M parameters (67 MB of float32): large enough that a copy of them shows in the resident memory
    training = _training(tokenizer, tmp_path, lora=4, hidden=512, layers=4)
    weight_bytes = sum(p.numel() * p.element_size() for p in _base_params(training.model).values())
    prompt = tokenizer.encode(PROMPT_TEXT, add_special_tokens=False)
    first = training.save_weights_and_get_sampling_client()
    _step(training, first, prompt)
    second = training.save_weights_and_get_sampling_client()
    base = _base_params(training.model)
    for name, param in _base_params(first.model).items():
        assert param.data_ptr() == base[name].data_ptr(), name
        assert _base_params(second.model)[name].data_ptr() == base[name].data_ptr(), name
    # each version owns its adapter: the first one copied it before the step changed it
    lora = {k: p for k, p in training.model.named_parameters() if "lora_" in k}
    assert lora and all(
        p.data_ptr() != dict(first.model.named_parameters())[k].data_ptr() for k, p in lora.items()
    )
    assert 0 < first.snapshot_bytes < weight_bytes / 10 and second.snapshot_bytes == 0

    _step(training, second, prompt)
    gc.collect()
    before = _rss_bytes()
    third = training.save_weights_and_get_sampling_client()
    _step(training, third, prompt)  # the third version is used and outlived by a fourth: it owns its adapter
    fourth = training.save_weights_and_get_sampling_client()
    grown = _rss_bytes() - before
    assert grown < weight_bytes / 4, (grown, weight_bytes)
    stats = training.sampling_stats.as_metrics()
    assert stats["sampling/live_samplers"] == 4
    assert stats["sampling/live_snapshots"] == 3  # all but the newest hold a copy of an older adapter
    assert stats["sampling/snapshot_bytes"] == first.snapshot_bytes * 3 < weight_bytes / 3
    assert fourth.snapshot_bytes == 0


@pytest.mark.parametrize("lora", [0, 4])
def test_an_old_sampler_computes_its_own_version_after_the_trainer_steps(
    tokenizer: Any, tmp_path: Path, lora: int
) -> None:
    training = _training(tokenizer, tmp_path, lora=lora)
    prompt = tokenizer.encode(PROMPT_TEXT, add_special_tokens=False)
    old = training.save_weights_and_get_sampling_client()
    before = _probe(old, prompt)
    for _ in range(3):
        _step(training, training.save_weights_and_get_sampling_client(), prompt)
    new = training.save_weights_and_get_sampling_client()
    assert _probe(new, prompt)[0] != before[0]  # the weights moved
    assert _probe(old, prompt) == before  # bit for bit: the old version's logprobs and samples
    assert old.snapshot_bytes > 0


def test_full_fine_tuning_copies_weights_only_for_a_sampler_still_alive(
    tokenizer: Any, tmp_path: Path
) -> None:
    training = _training(tokenizer, tmp_path, lora=0)
    weight_bytes = sum(p.numel() * p.element_size() for p in training.model.parameters())
    prompt = tokenizer.encode(PROMPT_TEXT, add_special_tokens=False)
    sampler = training.save_weights_and_get_sampling_client()
    mine = dict(sampler.model.named_parameters())
    assert all(p.data_ptr() == mine[k].data_ptr() for k, p in training.model.named_parameters())
    _step(training, sampler, prompt)  # alive during the step: it copies what the step changes
    assert sampler.snapshot_bytes == weight_bytes
    assert training.sampling_stats.as_metrics()["sampling/live_snapshots"] == 1
    del sampler, mine
    gc.collect()
    assert training.sampling_stats.as_metrics()["sampling/live_snapshots"] == 0
    # a sampler dropped before the step (its rollouts finished) never costs a copy
    current = training.save_weights_and_get_sampling_client()
    seq = current.sample(prompt, 1, SamplingParams(max_tokens=4, seed=1)).sequences[0]
    del current
    gc.collect()
    datum = completion_datum(
        prompt, list(seq.tokens), list(seq.logprobs), 1.0, vocab_size=training.vocab_size
    )
    training.forward_backward([datum], "importance_sampling")
    training.optim_step(AdamParams(learning_rate=1e-2))
    stats = training.sampling_stats.as_metrics()
    assert stats["sampling/live_samplers"] == 0 and stats["sampling/snapshot_bytes"] == 0


@pytest.mark.parametrize("lora", [0, 4])
def test_load_state_leaves_live_samplers_on_their_version(tokenizer: Any, tmp_path: Path, lora: int) -> None:
    training = _training(tokenizer, tmp_path, lora=lora)
    prompt = tokenizer.encode(PROMPT_TEXT, add_special_tokens=False)
    start = training.save_weights_and_get_sampling_client()
    at_start = _probe(start, prompt)
    saved = training.save_state("start")
    _step(training, start, prompt)
    later = training.save_weights_and_get_sampling_client()
    at_later = _probe(later, prompt)
    training.load_state(saved)
    assert _probe(later, prompt) == at_later  # the loaded state did not change the live sampler
    assert _probe(training.save_weights_and_get_sampling_client(), prompt)[0] == at_start[0]
    if lora:  # the base weights loaded are the same values: still one shared copy
        base = _base_params(training.model)
        assert all(p.data_ptr() == base[k].data_ptr() for k, p in _base_params(later.model).items())


@pytest.mark.parametrize("lora", [0, 4])
def test_activation_checkpointing_gives_the_same_gradient_with_less_memory(
    tokenizer: Any, tmp_path: Path, lora: int
) -> None:
    import numpy as np
    import torch

    from tempo_rl.backends.local import LocalTrainingClient, apply_lora, build_tiny_model

    rng = np.random.default_rng(0)
    toks = rng.integers(3, len(tokenizer), size=800).tolist()
    datum = completion_datum(toks[:700], toks[700:], [-1.0] * 100, 1.0, vocab_size=len(tokenizer))
    grads, grown = {}, {}
    for on in (False, True):
        model = build_tiny_model(len(tokenizer), hidden_size=128, num_layers=16, num_heads=4, seed=0)
        torch.manual_seed(0)  # the adapter's initialisation
        model = apply_lora(model, lora) if lora else model
        training = LocalTrainingClient(model, tokenizer, state_dir=tmp_path, activation_checkpointing=on)
        assert len(training.checkpointed_layers) == (16 if on else 0)
        training.forward_backward([datum], "importance_sampling")  # warm-up: allocations of the first call
        training.model.zero_grad(set_to_none=True)
        gc.collect()
        _trim_heap()
        before = _rss_bytes()
        with _RssPeak() as peak:
            out = training.forward_backward([datum], "importance_sampling")
        grown[on] = peak.bytes - before
        grads[on] = (
            out.loss,
            {k: p.grad.clone() for k, p in training.model.named_parameters() if p.grad is not None},
        )
        assert not any(layer.training for layer in training.checkpointed_layers)  # eval mode again
    assert grads[True][0] == grads[False][0]
    assert grads[True][1].keys() == grads[False][1].keys()
    for k, g in grads[False][1].items():
        assert bool((grads[True][1][k] == g).all()), k
    assert grown[True] < grown[False] / 1.5, grown  # measured: 0.4x-0.55x here, 0.36x on SmolLM2-135M
