"""Backend errors are retried with backoff, and each update is applied exactly once (local backend).

Each test drives a real :class:`~tempo_rl.backends.local.LocalTrainingClient` through
``RetryingTrainingClient(FaultyTrainingClient(local))`` and compares the weights, bit for bit, with a twin
client that met no fault: a second optimizer step, or gradients accumulated twice, would change them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tempo_rl.backends.config import RetryConfig  # noqa: E402
from tempo_rl.backends.retry import (  # noqa: E402
    BackendTimeoutError,
    RetryingTrainingClient,
    backoff_delays,
)
from tempo_rl.backends.types import AdamParams, SamplingParams  # noqa: E402
from tempo_rl.rollout.datums import make_datum  # noqa: E402
from tempo_rl.testing.faults import (  # noqa: E402
    FaultPlan,
    FaultRates,
    FaultyTrainingClient,
    InjectedServerError,
    InjectedTimeout,
)

CORPUS = ["go to desk 1", "take apple 1 from desk 1", "Nothing happens.", "<value>0.5</value>"] * 30
ADAM = AdamParams(learning_rate=1e-2)
RETRY = RetryConfig(max_attempts=4, backoff_initial_s=0.5, backoff_max_s=4.0, jitter=0.0)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from tempo_rl.backends.local import build_tokenizer

    return build_tokenizer(CORPUS, vocab_size=300)


def _local(tokenizer: Any, tmp_path: Any) -> Any:
    from tempo_rl.backends.local import LocalTrainingClient, build_tiny_model

    model = build_tiny_model(len(tokenizer), hidden_size=16, num_layers=1, num_heads=2, seed=0)
    return LocalTrainingClient(model, tokenizer, state_dir=tmp_path, seed=0)


def _datums(tokenizer: Any) -> list[Any]:
    tokens = tokenizer.encode("take apple 1 from desk 1", add_special_tokens=False)
    n = len(tokens)
    return [
        make_datum(tokens, [0.0] + [-1.0] * (n - 1), [0.0] + [adv] * (n - 1), vocab_size=len(tokenizer))
        for adv in (1.0, -0.5)
    ]


def _weights(client: Any) -> list[Any]:
    return [p.detach().clone() for p in client.model.parameters()]


def _same(a: list[Any], b: list[Any]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _reference(tokenizer: Any, tmp_path: Any, steps: int = 1) -> list[Any]:
    ref = _local(tokenizer, tmp_path / "ref")
    for _ in range(steps):
        ref.forward_backward(_datums(tokenizer), "importance_sampling")
        ref.optim_step(ADAM)
    return _weights(ref)


def _faulty(
    tokenizer: Any, tmp_path: Any, plan: FaultPlan
) -> tuple[RetryingTrainingClient, Any, list[float]]:
    local = _local(tokenizer, tmp_path / "faulty")
    slept: list[float] = []
    return RetryingTrainingClient(FaultyTrainingClient(local, plan), RETRY, sleep=slept.append), local, slept


def _update(client: Any, tokenizer: Any) -> None:
    client.forward_backward(_datums(tokenizer), "importance_sampling")
    client.optim_step(ADAM)


def test_lost_optim_step_acknowledgement_is_not_applied_twice(tokenizer: Any, tmp_path: Any) -> None:
    plan = FaultPlan(FaultRates(optim_lost_ack=1.0), max_faults={"optim_lost_ack": 1})
    client, local, slept = _faulty(tokenizer, tmp_path, plan)
    _update(client, tokenizer)  # the step is applied, then its answer is "lost" (a timeout)
    assert plan.injected["optim_lost_ack"] == 1
    assert local.step == 1 and client.inner.optim_applied == 1  # one step, not two
    assert client.stats.optim_acknowledged == 1 and slept == []  # settled by the counter: no resend
    assert _same(_weights(local), _reference(tokenizer, tmp_path))
    _update(client, tokenizer)  # the next update is a normal one
    assert local.step == 2 and _same(_weights(local), _reference(tokenizer, tmp_path / "two", steps=2))


def test_refused_optim_step_is_retried_with_backoff_and_applied_once(tokenizer: Any, tmp_path: Any) -> None:
    plan = FaultPlan(FaultRates(optim_fail=1.0), max_faults={"optim_fail": 2})
    client, local, slept = _faulty(tokenizer, tmp_path, plan)
    _update(client, tokenizer)
    assert client.inner.optim_calls == 3 and local.step == 1
    assert client.stats.retries == {"optim_step": 2}
    assert slept == [0.5, 1.0]  # exponential backoff (jitter 0)
    assert _same(_weights(local), _reference(tokenizer, tmp_path))


def test_refused_forward_backward_is_retried_without_doubling_gradients(
    tokenizer: Any, tmp_path: Any
) -> None:
    plan = FaultPlan(FaultRates(backend_transient=1.0), max_faults={"backend_transient": 1})
    client, local, slept = _faulty(tokenizer, tmp_path, plan)
    _update(client, tokenizer)
    assert client.stats.retries == {"forward_backward": 1} and slept == [0.5]
    assert _same(_weights(local), _reference(tokenizer, tmp_path))


class _ApplyThenTimeout:
    """forward_backward accumulates the gradient, then its answer times out (the ambiguous case)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def forward_backward(self, *args: Any) -> Any:
        self.inner.forward_backward(*args)
        raise InjectedTimeout("forward_backward answer lost")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_ambiguous_forward_backward_timeout_is_not_resent(tokenizer: Any, tmp_path: Any) -> None:
    local = _local(tokenizer, tmp_path)
    client = RetryingTrainingClient(_ApplyThenTimeout(local), RETRY, sleep=lambda s: None)
    with pytest.raises(BackendTimeoutError, match="forward_backward"):
        client.forward_backward(_datums(tokenizer), "importance_sampling")
    assert client.stats.failures == {"forward_backward": 1} and not client.stats.retries


class _NoCounter:
    """A client without an optimizer step counter (like a remote service)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls = 0

    def optim_step(self, params: Any) -> None:
        self.calls += 1
        self._inner.optim_step(params)
        raise InjectedTimeout("optim_step answer lost")


def test_without_a_step_counter_an_ambiguous_optim_step_is_never_resent(
    tokenizer: Any, tmp_path: Any
) -> None:
    local = _local(tokenizer, tmp_path)
    inner = _NoCounter(local)
    client = RetryingTrainingClient(inner, RETRY, sleep=lambda s: None)
    local.forward_backward(_datums(tokenizer), "importance_sampling")
    with pytest.raises(BackendTimeoutError, match="optim_step"):
        client.optim_step(ADAM)
    assert inner.calls == 1 and local.step == 1


def test_refusals_past_max_attempts_raise_the_last_error(tokenizer: Any, tmp_path: Any) -> None:
    plan = FaultPlan(FaultRates(optim_fail=1.0))
    client, local, slept = _faulty(tokenizer, tmp_path, plan)
    client.forward_backward(_datums(tokenizer), "importance_sampling")
    with pytest.raises(InjectedServerError):
        client.optim_step(ADAM)
    assert client.inner.optim_calls == RETRY.max_attempts and local.step == 0
    assert slept == backoff_delays(RETRY)[: RETRY.max_attempts - 1]


def test_sampling_timeouts_and_refusals_are_retried(tokenizer: Any, tmp_path: Any) -> None:
    plan = FaultPlan(
        FaultRates(backend_timeout=1.0, backend_transient=1.0),
        max_faults={"backend_timeout": 2, "backend_transient": 1},
    )
    client, _local_client, _ = _faulty(tokenizer, tmp_path, plan)
    fast = RetryingTrainingClient(client.inner, RETRY.model_copy(update={"backoff_initial_s": 0.0}))
    sampler = fast.save_weights_and_get_sampling_client()
    prompt = tokenizer.encode("go to desk 1", add_special_tokens=False)
    params = SamplingParams(max_tokens=4, seed=3)
    out = asyncio.run(sampler.sample_async(prompt, 2, params))
    assert len(out.sequences) == 2
    assert fast.stats.retries == {"sample": 3}
    assert plan.injected["backend_timeout"] == 2 and plan.injected["backend_transient"] == 1
