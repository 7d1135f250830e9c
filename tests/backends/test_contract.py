"""The backend contract: one suite run against the local backend, the PyTRIO adapter on the recording PyTRIO
stub, and the Tinker adapter on the recording Tinker stub. Every number is pinned against ``compute_logprobs``
of the same weights, so the suite checks semantics, not just shapes."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tempo_rl.backends import AdamParams, Datum, DatumError, SamplingParams
from tempo_rl.rollout.datums import SequenceBuilder, completion_datum

BACKENDS = ["local", "pytrio-stub", "tinker-stub"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, local_training: Any, tmp_path: Path) -> Any:
    """The training client of one backend (all three delegate the maths to a fresh tiny local model)."""
    kind = request.param
    if kind == "local":
        return local_training
    if kind == "pytrio-stub":
        pytest.importorskip("pytrio")
        from tempo_rl.backends import PyTrioBackendConfig, create_clients
        from tempo_rl.backends.testing import RecordingPyTrioService

        service = RecordingPyTrioService(local_training)
        training, _ = create_clients(
            PyTrioBackendConfig(base_model="stub/tiny", lora_rank=8), service_client=service
        )
        return training
    pytest.importorskip("tinker")
    from tempo_rl.backends import TinkerBackendConfig, create_clients
    from tempo_rl.backends.testing import RecordingTinkerService

    service = RecordingTinkerService(local_training)
    training, _ = create_clients(
        TinkerBackendConfig(base_model="stub/tiny", lora_rank=8), service_client=service
    )
    return training


def _prompt(tok: Any) -> list[int]:
    return tok.encode("you see a cabinet 1, a drawer 2", add_special_tokens=False)


def _sequence_datum(
    sampler: Any, prompt: list[int], completion: list[int], adv: float
) -> tuple[Datum, list[float]]:
    """Datum whose sampled logprobs are the sampler's own (so ratios are 1) and the token logprobs."""
    lps = sampler.compute_logprobs(prompt + completion)
    comp_lps = [float(x) for x in lps[len(prompt) :]]
    return completion_datum(
        prompt, completion, comp_lps, adv, vocab_size=len(sampler.get_tokenizer())
    ), comp_lps


def test_tokenizer_access(backend: Any) -> None:
    tok = backend.get_tokenizer()
    assert len(tok) > 256 and tok.eos_token_id is not None
    assert tok.decode(tok.encode("go to desk 1", add_special_tokens=False)) == "go to desk 1"


def test_sample_shapes_text_and_exact_logprobs(backend: Any) -> None:
    sampler = backend.save_weights_and_get_sampling_client()
    tok = backend.get_tokenizer()
    prompt = _prompt(tok)
    res = sampler.sample(prompt, 3, SamplingParams(max_tokens=6, seed=7, temperature=0.8, top_p=0.95))
    assert len(res.sequences) == 3
    for seq in res.sequences:
        assert 1 <= len(seq.tokens) <= 6 and len(seq.logprobs) == len(seq.tokens)
        assert seq.text == tok.decode(list(seq.tokens), skip_special_tokens=False)
        assert seq.stop_reason in ("stop", "length")
        if seq.stop_reason == "length":
            assert len(seq.tokens) == 6
        # the sampler's logprob of each token is the model's raw log-softmax: what compute_logprobs returns
        ref = sampler.compute_logprobs(prompt + list(seq.tokens))
        assert ref[0] is None and len(ref) == len(prompt) + len(seq.tokens)
        np.testing.assert_allclose(seq.logprobs, ref[len(prompt) :], atol=1e-4)


def test_seeded_sampling_is_deterministic(backend: Any) -> None:
    sampler = backend.save_weights_and_get_sampling_client()
    prompt = _prompt(backend.get_tokenizer())
    params = SamplingParams(max_tokens=8, seed=123)
    a = sampler.sample(prompt, 2, params)
    b = sampler.sample(prompt, 2, params)
    assert [s.tokens for s in a.sequences] == [s.tokens for s in b.sequences]

    async def many() -> list[Any]:
        return await asyncio.gather(*(sampler.sample_async(prompt, 2, params) for _ in range(3)))

    for r in asyncio.run(many()):
        assert [s.tokens for s in r.sequences] == [s.tokens for s in a.sequences]


def test_stop_token_ends_the_completion(backend: Any) -> None:
    sampler = backend.save_weights_and_get_sampling_client()
    prompt = _prompt(backend.get_tokenizer())
    first = sampler.sample(prompt, 1, SamplingParams(max_tokens=5, temperature=0.0)).sequences[0]
    stop_tok = first.tokens[2]
    cut = sampler.sample(
        prompt, 1, SamplingParams(max_tokens=5, temperature=0.0, stop=(stop_tok,))
    ).sequences[0]
    k = first.tokens.index(stop_tok)
    assert cut.tokens == first.tokens[: k + 1] and cut.stop_reason == "stop"


def test_importance_sampling_loss_value_and_ratio_one(backend: Any) -> None:
    sampler = backend.save_weights_and_get_sampling_client()
    prompt = _prompt(backend.get_tokenizer())
    comp = list(sampler.sample(prompt, 1, SamplingParams(max_tokens=5, seed=1)).sequences[0].tokens)
    datum, _ = _sequence_datum(sampler, prompt, comp, 0.5)
    out = backend.forward_backward([datum], "importance_sampling")
    # ratio exp(lp - lp_old) = 1 on every sampled token, so L = -sum_t A_t = -0.5 * len(comp)
    assert out.loss == pytest.approx(-0.5 * len(comp), abs=1e-3)


def test_ppo_loss_clips_ratio_bounds(backend: Any) -> None:
    sampler = backend.save_weights_and_get_sampling_client()
    prompt = _prompt(backend.get_tokenizer())
    comp = list(sampler.sample(prompt, 1, SamplingParams(max_tokens=4, seed=2)).sequences[0].tokens)
    datums = []
    for adv in (1.0, -1.0):
        d, _lps = _sequence_datum(sampler, prompt, comp, adv)
        shifted = np.asarray(d.loss_fn_inputs["logprobs"]).copy()
        shifted[len(prompt) - 1 :] -= math.log(2.0)  # lp_old = lp - log 2  ->  ratio = 2 on sampled tokens
        datums.append(Datum(d.model_input, {**d.loss_fn_inputs, "logprobs": shifted}))
    cfg = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    out = backend.forward_backward(datums, "ppo", cfg)
    n = len(comp)
    # A=+1: min(2, 1.2) = 1.2 per token; A=-1: min(-2, -1.2) = -2 per token  ->  L = -(1.2 n - 2 n) = 0.8 n
    assert out.loss == pytest.approx(0.8 * n, abs=2e-3)


def test_cross_entropy_loss_with_weights(backend: Any) -> None:
    sampler = backend.save_weights_and_get_sampling_client()
    tok = backend.get_tokenizer()
    tokens = tok.encode("go to desk 1 and take apple 1", add_special_tokens=False)
    lps = sampler.compute_logprobs(tokens)
    w = np.linspace(0.0, 1.0, len(tokens) - 1).astype(np.float32)
    datum = Datum(tuple(tokens[:-1]), {"target_tokens": np.asarray(tokens[1:], dtype=np.int64), "weights": w})
    out = backend.forward_backward([datum], "cross_entropy")
    assert out.loss == pytest.approx(-float(np.dot(w, np.asarray(lps[1:], dtype=np.float64))), rel=1e-4)


def test_forward_backward_accumulates_until_optim_step(backend: Any, tmp_path: Path) -> None:
    sampler = backend.save_weights_and_get_sampling_client()
    tok = backend.get_tokenizer()
    prompt = _prompt(tok)
    comp = tok.encode(" go to desk 1", add_special_tokens=False)
    d1, _ = _sequence_datum(sampler, prompt, comp, 1.0)
    d2, _ = _sequence_datum(sampler, prompt, comp[:2], -0.5)
    start = backend.save_state("start")
    adam = AdamParams(learning_rate=1e-2)
    backend.forward_backward([d1], "importance_sampling")
    backend.forward_backward([d2], "importance_sampling")
    backend.optim_step(adam)
    split = backend.save_weights_and_get_sampling_client().compute_logprobs(prompt + comp)
    backend.load_state(start)
    backend.forward_backward([d1, d2], "importance_sampling")
    backend.optim_step(adam)
    joint = backend.save_weights_and_get_sampling_client().compute_logprobs(prompt + comp)
    np.testing.assert_allclose(split[1:], joint[1:], atol=1e-5)
    assert not np.allclose(split[1:], sampler.compute_logprobs(prompt + comp)[1:], atol=1e-4)


def test_snapshot_is_frozen_and_state_round_trips(backend: Any) -> None:
    tok = backend.get_tokenizer()
    prompt = _prompt(tok)
    comp = tok.encode(" take apple 1", add_special_tokens=False)
    snap = backend.save_weights_and_get_sampling_client()
    before = snap.compute_logprobs(prompt + comp)
    d, _ = _sequence_datum(snap, prompt, comp, 1.0)
    path = backend.save_state("s-0")
    backend.forward_backward([d], "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-2))
    after_step = backend.save_weights_and_get_sampling_client().compute_logprobs(prompt + comp)
    assert snap.compute_logprobs(prompt + comp) == before  # the snapshot did not move
    assert sum(after_step[len(prompt) :]) > sum(
        before[len(prompt) :]
    )  # A > 0 raised the completion's logprob
    backend.load_state(path)
    np.testing.assert_allclose(
        backend.save_weights_and_get_sampling_client().compute_logprobs(prompt + comp)[1:],
        before[1:],
        atol=1e-6,
    )


def test_bad_input_is_rejected_with_a_clear_error(backend: Any) -> None:
    vocab = len(backend.get_tokenizer())
    b = SequenceBuilder()
    b.add_context([1, 2, 3])
    b.add_sampled([4, 5], [-1.0, -1.0])
    good = b.to_datum(1.0)
    oov = Datum((1, 2, vocab + 5, 4), good.loss_fn_inputs)
    with pytest.raises(DatumError, match="vocabulary"):
        backend.forward_backward([oov], "importance_sampling")
    short = Datum(good.model_input, {**good.loss_fn_inputs, "advantages": np.zeros(2, np.float32)})
    with pytest.raises(DatumError, match="advantages"):
        backend.forward_backward([short], "importance_sampling")
    with pytest.raises(ValueError, match="unknown loss_fn"):
        backend.forward_backward([good], "dpo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ratio bounds"):
        backend.forward_backward([good], "ppo", {"clip_low_threshold": 0.2, "clip_high_threshold": 0.2})
    with pytest.raises(ValueError, match="checkpoint name"):
        backend.save_state("bad name/with slash")
    sampler = backend.save_weights_and_get_sampling_client()
    with pytest.raises(ValueError, match="max_tokens"):
        sampler.sample([1, 2], 1, SamplingParams(max_tokens=0))
    with pytest.raises(ValueError, match="outside"):
        sampler.sample([1, vocab + 3], 1, SamplingParams(max_tokens=2))
