"""``forward_backward`` computes logits only from the first target position of a chunk on.

A real vocabulary makes ``[B, T, V]`` logits the bulk of training memory (SmolLM2: 49,152 x 4 bytes = 197 KB a
position, ~200 MB for a 1,000-token critic prompt, held twice for the backward), yet an RL datum's prompt has no
targets. The loss and the gradient must be those of the full computation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tempo_rl.rollout.datums import completion_datum, sft_datum


def _datums(tok: Any, rng: np.random.Generator) -> list[Any]:
    v = len(tok)
    p1, p2 = rng.integers(3, v, 120).tolist(), rng.integers(3, v, 80).tolist()
    c1, c2 = rng.integers(3, v, 6).tolist(), rng.integers(3, v, 9).tolist()
    return [
        completion_datum(p1, c1, [-2.0] * 6, 0.7, vocab_size=v),
        completion_datum(p2, c2, [-1.5] * 9, -0.4, vocab_size=v),
    ]


def _reference(client: Any, datums: list[Any]) -> tuple[float, dict[str, Any]]:
    """The importance-sampling loss and gradient with logits at every position."""
    import torch

    client.model.zero_grad(set_to_none=True)
    total = 0.0
    for d in datums:
        ids = torch.tensor([d.model_input])
        tgt = np.asarray(d.loss_fn_inputs["target_tokens"])
        valid = torch.from_numpy((tgt >= 0).astype(np.float32))
        logits = client.model(input_ids=ids).logits.float()[0]
        lp = torch.log_softmax(logits, -1).gather(-1, torch.from_numpy(np.maximum(tgt, 0))[:, None])[:, 0]
        old = torch.from_numpy(np.asarray(d.loss_fn_inputs["logprobs"], dtype=np.float32))
        adv = torch.from_numpy(np.asarray(d.loss_fn_inputs["advantages"], dtype=np.float32))
        loss = -(torch.exp(lp - old) * valid * adv).sum()
        loss.backward()
        total += float(loss)
    grads = {n: p.grad.clone() for n, p in client.model.named_parameters() if p.grad is not None}
    client.model.zero_grad(set_to_none=True)
    return total, grads


def test_only_target_positions_reach_the_lm_head_and_the_gradient_is_unchanged(local_training: Any) -> None:
    tok = local_training.get_tokenizer()
    datums = _datums(tok, np.random.default_rng(0))
    ref_loss, ref_grads = _reference(local_training, datums)
    seen: list[tuple[int, ...]] = []
    hook = local_training.model.lm_head.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape)))
    try:
        out = local_training.forward_backward(datums, "importance_sampling")
    finally:
        hook.remove()
    # one chunk of 2 rows, width 120 + 6 - 1 = 125; the first target is at position 80 - 1 = 79 (row 2)
    assert seen == [(2, 125 - 79, 32)]
    assert out.metrics["target_tokens"] == out.metrics["tokens"] == 125 + 88  # counts as before
    assert out.loss == pytest.approx(ref_loss, rel=1e-5)
    grads = {n: p.grad for n, p in local_training.model.named_parameters() if p.grad is not None}
    assert grads.keys() == ref_grads.keys()
    for name, g in grads.items():
        np.testing.assert_allclose(g.numpy(), ref_grads[name].numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_supervised_datums_keep_every_target_position(local_training: Any) -> None:
    tok = local_training.get_tokenizer()
    d = sft_datum([5, 6], list(range(10, 40)), weight=1.0)
    seen: list[tuple[int, ...]] = []
    hook = local_training.model.lm_head.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape)))
    try:
        local_training.forward_backward([d], "cross_entropy")
    finally:
        hook.remove()
    assert len(tok) > 40 and seen == [(1, 31 - 1, 32)]  # targets from position 1 (the second prompt token)
