"""tempo-rl on the real tinker 0.38.0 client, with only its HTTP transport replaced (``fake_tinker``).

One test per adapter behaviour the real client could break: no deprecated API on any update (``name=`` in the
snapshot, ``load_state``, ``sample_async`` / ``compute_logprobs_async``), Adam kept across a resume, a
checkpoint name never saved twice.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
pytest.importorskip("torch")

from fake_tinker import FakeTinker, install  # noqa: E402

from tempo_rl.backends import (  # noqa: E402
    AdamParams,
    RetryConfig,
    SamplingParams,
    TinkerBackendConfig,
    create_clients,
)
from tempo_rl.rollout.datums import completion_datum  # noqa: E402

FAST = RetryConfig(
    result_timeout_s=30.0, max_attempts=2, backoff_initial_s=0.0, backoff_max_s=0.0, jitter=0.0
)


@pytest.fixture
def service(
    local_training: Any, tokenizer: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, FakeTinker, TinkerBackendConfig]]:
    """A real ``tinker.ServiceClient`` on the fake server, and a config with a local tokenizer folder."""
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    server = FakeTinker(local_training)
    install(monkeypatch, server)
    tok = tmp_path / "tokenizer"
    tokenizer.save_pretrained(str(tok))
    client = tinker.ServiceClient(base_url="http://tinker.test")
    cfg = TinkerBackendConfig(lora_rank=8, tokenizer_path=str(tok), retry=FAST)
    yield client, server, cfg
    client.close("success").result(timeout=30)
    assert server.errors == []


def _datum(tokenizer: Any, sampler: Any) -> Any:
    prompt = tokenizer.encode("go to desk 1", add_special_tokens=False)
    seq = sampler.sample(prompt, 1, SamplingParams(max_tokens=3, seed=0)).sequences[0]
    return completion_datum(prompt, list(seq.tokens), list(seq.logprobs), 1.0)


def _deprecations(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, (DeprecationWarning, FutureWarning))
        and "deprecated" in str(w.message).lower()
    ]


def test_a_whole_cycle_uses_no_deprecated_tinker_api(
    service: tuple[Any, FakeTinker, TinkerBackendConfig], tokenizer: Any
) -> None:
    """Defect 6: create, sample (sync and async), logprobs (sync and async), train, save, resume, snapshot:
    tinker raises no deprecation warning."""
    client, server, cfg = service
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        training, sampler = create_clients(cfg, service_client=client)
        datum = _datum(tokenizer, sampler)
        prompt = list(datum.model_input[:4])
        asyncio.run(sampler.sample_async(prompt, 1, SamplingParams(max_tokens=2, seed=0)))
        asyncio.run(sampler.compute_logprobs_async(prompt))
        out = training.forward_backward([datum], "importance_sampling")
        training.optim_step(AdamParams())
        training.load_state(training.save_state("update_000001"))
        snapshot = training.save_weights_and_get_sampling_client("policy-000001")
        assert snapshot.compute_logprobs(prompt)[0] is None
    assert _deprecations(caught) == []
    # importance sampling at ratio 1 with advantage 1 on the completion: loss:sum = -(completion tokens)
    assert out.loss == pytest.approx(-int(np.sum(datum.loss_fn_inputs["advantages"] != 0)), abs=1e-3)
    paths = [p for p, _ in server.events]
    assert "forward_backward" in paths and "load_weights" in paths and "asample" in paths


def test_a_tinker_resume_brings_adam_back(
    service: tuple[Any, FakeTinker, TinkerBackendConfig], tokenizer: Any, local_training: Any
) -> None:
    """Defect 2 on Tinker: ``load_state`` restored weights only, so a resume restarted Adam."""
    client, server, cfg = service
    training, sampler = create_clients(cfg, service_client=client)
    datum = _datum(tokenizer, sampler)
    training.forward_backward([datum], "importance_sampling")
    training.optim_step(AdamParams(learning_rate=1e-2))
    path = training.save_state("update_000001")
    state = local_training._optimizer.state_dict()["state"]
    saved = [state[k]["exp_avg"].numpy().copy() for k in sorted(state)]
    training.forward_backward([datum], "importance_sampling")
    training.optim_step(AdamParams(learning_rate=1e-2))

    training.load_state(path)

    assert local_training._optimizer is not None, "the load restarted Adam"
    state = local_training._optimizer.state_dict()["state"]
    for k, want in zip(sorted(state), saved, strict=True):
        np.testing.assert_array_equal(state[k]["exp_avg"].numpy(), want)
    loads = [b for p, b in server.events if p == "load_weights"]
    assert loads and loads[-1]["path"] == path and loads[-1]["optimizer"] is True


def test_one_name_saved_twice_on_tinker(
    service: tuple[Any, FakeTinker, TinkerBackendConfig], tokenizer: Any
) -> None:
    """Defect 5 on Tinker: ``save_state`` uses ``overwrite=False``; the second save of a name was refused."""
    client, server, cfg = service
    training, sampler = create_clients(cfg, service_client=client)
    training.forward_backward([_datum(tokenizer, sampler)], "importance_sampling")
    first = training.save_state("kl-resume-current")
    second = training.save_state("kl-resume-current")
    assert first != second and {first, second} <= set(server.checkpoints)


@pytest.mark.slow
def test_a_gigpo_run_trains_through_the_tinker_client(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``algorithm = "gigpo"`` on Tinker: the run trains through the real client on the fake transport."""
    import json

    from tempo_rl.backends.local import LocalTrainingClient, build_tiny_model
    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import env_corpus, train_run

    env = [
        'env.name="keydoor"',
        "env.kwargs={horizon=12, keys=1, colours=2}",
        "env.invalid_action_penalty=0.1",
    ]
    tokenizer = build_tokenizer(env_corpus(load_config(None, env), games=4), vocab_size=512)
    tok = tmp_path / "tokenizer"
    tokenizer.save_pretrained(str(tok))
    model = build_tiny_model(len(tokenizer), hidden_size=64, num_layers=2, num_heads=4, max_positions=2048)
    local = LocalTrainingClient(model, tokenizer, state_dir=tmp_path / "service_states", seed=0)
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    server = FakeTinker(local)
    install(monkeypatch, server)
    client = tinker.ServiceClient(base_url="http://tinker.test")
    retry = "{result_timeout_s=60.0, max_attempts=2, backoff_initial_s=0.0, backoff_max_s=0.0, jitter=0.0}"
    config = load_config(
        None,
        [
            *env,
            'algorithm="gigpo"',
            f'backend={{kind="tinker", lora_rank=8, tokenizer_path="{tok}", retry={retry}}}',
            "grpo.updates=2",
            "grpo.games_per_batch=2",
            "tempo.max_rounds=12",
            "sampling.max_tokens=32",
            "sampling.max_trajectory_tokens=1200",
            "optim.learning_rate=1e-3",
            "warmstart.episodes=32",
            "warmstart.epochs=10",
            "warmstart.batch_size=4",
            "warmstart.learning_rate=3e-3",
            "run.loggers=[]",
        ],
    )
    try:
        summary = train_run(tmp_path / "run", config, console=False, service_client=client)
    finally:
        client.close("success").result(timeout=30)
    assert summary["updates_done"] == 2 and server.errors == []
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    updates = [r for r in map(json.loads, lines) if r.get("train/phase") == 3.0]
    assert len(updates) == 2 and all(r["gigpo/anchor_groups"] >= 2 for r in updates)
    assert sum(r["train/actor_datums"] for r in updates) > 0
    assert "forward_backward" in [p for p, _ in server.events]
