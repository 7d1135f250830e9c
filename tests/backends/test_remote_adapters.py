"""PyTRIO / Tinker adapters against the recording stubs: credentials, retries, timeouts, argument checks."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.backends import (
    PyTrioBackendConfig,
    RetryConfig,
    SamplingParams,
    TinkerBackendConfig,
    create_clients,
)
from tempo_rl.backends.retry import BackendTimeoutError, backoff_delays, call_with_retry, is_transient
from tempo_rl.rollout.datums import completion_datum

pytrio = pytest.importorskip("pytrio")

FAST = RetryConfig(result_timeout_s=0.3, max_attempts=3, backoff_initial_s=0.0, backoff_max_s=0.0, jitter=0.0)


@pytest.fixture
def pytrio_stub(local_training: Any) -> tuple[Any, Any, Any]:
    from tempo_rl.backends.testing import RecordingPyTrioService

    service = RecordingPyTrioService(local_training)
    training, sampling = create_clients(
        PyTrioBackendConfig(base_model="stub/tiny", lora_rank=8, seed=3, retry=FAST), service_client=service
    )
    return service, training, sampling


def test_missing_credentials_name_the_fix_before_any_network(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("PYTRIO_API_KEY", raising=False)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))

    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("ServiceClient must not be constructed without credentials")

    monkeypatch.setattr(pytrio, "ServiceClient", boom)
    from tempo_rl.backends.pytrio import MissingCredentialsError

    with pytest.raises(MissingCredentialsError, match=r"trio login.*PYTRIO_API_KEY"):
        create_clients({"kind": "pytrio"})
    tinker = pytest.importorskip("tinker")
    monkeypatch.setattr(tinker, "ServiceClient", boom)
    with pytest.raises(MissingCredentialsError, match=r"tinker auth login.*TINKER_API_KEY"):
        create_clients({"kind": "tinker"})


def test_import_restores_excepthook_and_disables_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytrio.logging import excepthook as pyhook

    from tempo_rl.backends.pytrio import import_pytrio

    seen: list[bool] = []
    monkeypatch.setattr(pytrio, "configure_observability", lambda *, enabled: seen.append(enabled))
    monkeypatch.setattr(sys, "excepthook", pyhook.pytrio_excepthook)  # as after a first `import pytrio`
    import_pytrio()
    assert sys.excepthook is sys.__excepthook__ and seen == [False]


def test_calls_use_real_types_and_are_recorded(pytrio_stub: tuple[Any, Any, Any]) -> None:
    service, training, sampling = pytrio_stub
    assert service.calls[0] == ("get_server_capabilities", {})
    assert service.calls[1] == (
        "create_lora_training_client",
        {"base_model": "stub/tiny", "rank": 8, "seed": 3},
    )
    tok = training.get_tokenizer()
    prompt = tok.encode("go to desk 1", add_special_tokens=False)
    seq = sampling.sample(prompt, 2, SamplingParams(max_tokens=3, seed=0)).sequences[0]
    training.forward_backward([completion_datum(prompt, list(seq.tokens), list(seq.logprobs), 1.0)], "ppo")
    methods = service.methods_called()
    assert methods[-3:] == [
        "sample",
        "forward_backward",
        "fetch_tokenizer",
    ]  # no tokenizer_path: pytrio fetches
    assert service.calls[-2][1] == {"n": 1, "loss_fn": "ppo"}


def test_transient_errors_are_retried(pytrio_stub: tuple[Any, Any, Any]) -> None:
    service, training, sampling = pytrio_stub
    prompt = training.get_tokenizer().encode("go", add_special_tokens=False)
    service.fail_next("sample", ConnectionError("reset by peer"), times=2)
    assert len(sampling.sample(prompt, 1, SamplingParams(max_tokens=2)).sequences) == 1
    assert service.methods_called().count("sample") == 3
    service.fail_next("sample", ValueError("bad request"))  # not transient: no retry
    with pytest.raises(ValueError, match="bad request"):
        sampling.sample(prompt, 1, SamplingParams(max_tokens=2))
    assert service.methods_called().count("sample") == 4


def test_nothing_hangs_and_training_is_never_applied_twice(pytrio_stub: tuple[Any, Any, Any]) -> None:
    service, training, sampling = pytrio_stub
    tok = training.get_tokenizer()
    prompt = tok.encode("go", add_special_tokens=False)
    service.hang_next("sample", times=3)
    t0 = time.monotonic()
    with pytest.raises(BackendTimeoutError, match="pytrio sample"):
        sampling.sample(prompt, 1, SamplingParams(max_tokens=2))
    assert time.monotonic() - t0 < 5.0 and service.methods_called().count("sample") == 3
    datum = completion_datum(prompt, [5, 6], [-1.0, -1.0], 1.0)
    service.hang_next("forward_backward")
    with pytest.raises(BackendTimeoutError, match="forward_backward"):
        training.forward_backward([datum], "importance_sampling")
    assert service.methods_called().count("forward_backward") == 1  # a timeout is not retried
    service.fail_next("optim_step", ConnectionError("refused"))  # never reached the service: retried
    training.optim_step(__import__("tempo_rl.backends", fromlist=["AdamParams"]).AdamParams())
    assert service.methods_called().count("optim_step") == 2


def test_async_sampling_timeout(pytrio_stub: tuple[Any, Any, Any]) -> None:
    service, training, sampling = pytrio_stub
    prompt = training.get_tokenizer().encode("go", add_special_tokens=False)
    service.hang_next("sample_async", times=3)
    with pytest.raises(BackendTimeoutError):
        asyncio.run(sampling.sample_async(prompt, 1, SamplingParams(max_tokens=2)))
    res = asyncio.run(sampling.sample_async(prompt, 2, SamplingParams(max_tokens=2, seed=1)))
    assert len(res.sequences) == 2


def test_stub_rejects_calls_the_service_would_reject(pytrio_stub: tuple[Any, Any, Any]) -> None:
    from tempo_rl.backends.testing import RecordingPyTrioService, StubCallError

    service, training, _ = pytrio_stub
    raw = training.raw
    T = pytrio.types
    ok = T.Datum(
        model_input=T.ModelInput.from_ints([1, 2]),
        loss_fn_inputs={"target_tokens": np.array([2, 3], dtype=np.int64), "weights": np.ones(2, np.float32)},
    )
    raw.forward_backward([ok], "cross_entropy").result()
    with pytest.raises(StubCallError, match="auto_shift"):
        raw.forward_backward([ok], "cross_entropy", auto_shift=True)
    with pytest.raises(StubCallError, match="lacks"):
        raw.forward_backward([ok], "importance_sampling")
    short = T.Datum(model_input=T.ModelInput.from_ints([1, 2, 3]), loss_fn_inputs=dict(ok.loss_fn_inputs))
    with pytest.raises(StubCallError, match="shape"):
        raw.forward_backward([short], "cross_entropy")
    with pytest.raises(StubCallError, match="Datum"):
        raw.forward_backward([{"model_input": [1]}], "cross_entropy")
    with pytest.raises(StubCallError, match="max_tokens"):
        training.save_weights_and_get_sampling_client().raw.sample(
            T.ModelInput.from_ints([1]), 1, T.SamplingParams()
        )
    with pytest.raises(StubCallError, match="rank"):
        RecordingPyTrioService(service._core.local).create_lora_training_client("m", rank=128)


def test_tinker_adapter_differences(local_training: Any) -> None:
    pytest.importorskip("tinker")
    from tempo_rl.backends.testing import RecordingTinkerService

    service = RecordingTinkerService(local_training)
    training, sampling = create_clients(
        TinkerBackendConfig(base_model="stub", retry=FAST), service_client=service
    )
    tok = training.get_tokenizer()
    prompt = tok.encode("go to desk 1", add_special_tokens=False)
    seq = sampling.sample(prompt, 1, SamplingParams(max_tokens=4, seed=0)).sequences[0]
    assert seq.text == tok.decode(list(seq.tokens), skip_special_tokens=False)  # tinker returns no text
    path = training.save_state("t-1")
    training.load_state(path)
    names = service.methods_called()
    assert names[:3] == [
        "create_lora_training_client",
        "get_tokenizer",
        "save_weights_and_get_sampling_client",
    ]
    assert path.startswith("tinker://stub-run-") and "/state/t-1-" in path


def test_retry_policy_units() -> None:
    cfg = RetryConfig(max_attempts=6, backoff_initial_s=1.0, backoff_max_s=5.0, jitter=0.0)
    assert backoff_delays(cfg) == [1.0, 2.0, 4.0, 5.0, 5.0]

    class Status(Exception):
        def __init__(self, code: int) -> None:
            self.status_code = code

    assert is_transient(Status(503)) and is_transient(Status(429)) and not is_transient(Status(400))
    assert is_transient(TimeoutError()) and not is_transient(KeyError())
    slept: list[float] = []
    attempts = iter([ConnectionError(), ConnectionError(), "ok"])

    def flaky() -> str:
        x = next(attempts)
        if isinstance(x, Exception):
            raise x
        return x

    assert call_with_retry(flaky, cfg, what="x", sleep=slept.append) == "ok" and slept == [1.0, 2.0]


@pytest.mark.parametrize("kind", ["pytrio", "tinker"])
def test_stub_flag_runs_a_remote_config_offline(kind: str, tokenizer: Any, tmp_path: Path) -> None:
    pytest.importorskip(kind)
    local = {"kind": "local", "hidden_size": 32, "num_layers": 1, "num_heads": 2, "state_dir": str(tmp_path)}
    training, sampling = create_clients(
        {"kind": kind, "stub": True, "stub_local": local}, tokenizer=tokenizer
    )
    assert type(training.inner).__name__ == "RemoteTrainingClient" and training.flavor.name == kind
    prompt = tokenizer.encode("go to desk 1", add_special_tokens=False)
    seq = sampling.sample(prompt, 1, SamplingParams(max_tokens=3, seed=0)).sequences[0]
    out = training.forward_backward(
        [completion_datum(prompt, list(seq.tokens), list(seq.logprobs), 1.0)], "importance_sampling"
    )
    assert out.loss == pytest.approx(-len(seq.tokens), abs=1e-3)


def test_loss_falls_back_to_elementwise_outputs(tokenizer: Any) -> None:
    from tempo_rl.backends.remote import RemoteTrainingClient, ServiceFlavor

    T = pytrio.types

    class Raw:
        def forward_backward(self, data: Any, loss_fn: str, loss_fn_config: Any = None, **kw: Any) -> Any:
            outs = [
                {"elementwise_loss": T.TensorData.from_numpy(np.full(len(d.model_input), 0.5, np.float32))}
                for d in data
            ]
            return T.ForwardBackwardOutput(loss_fn_outputs=outs, metrics={})

    flavor = ServiceFlavor("pytrio", T, {}, {}, "loss_sum", False)
    client = RemoteTrainingClient(Raw(), flavor, tokenizer, FAST)
    out = client.forward_backward(
        [completion_datum([1, 2], [3, 4], [-1.0, -1.0], 1.0)], "importance_sampling"
    )
    assert out.loss == pytest.approx(1.5) and out.metrics["tokens"] == 3.0


@settings(max_examples=60)
@given(
    names=st.lists(
        st.from_regex(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,250}[A-Za-z0-9_-])?", fullmatch=True),
        min_size=1,
        max_size=6,
    )
)
def test_service_names_are_valid_unique_and_keep_the_name(tokenizer: Any, names: list[str]) -> None:
    """Every name a remote save sends matches the services' rule, fits their 200 characters, starts with the
    requested name (as much of it as fits) and is never sent twice, whatever the requested names."""
    from tempo_rl.backends.remote import _MAX_NAME, _NAME_RE, RemoteTrainingClient, ServiceFlavor

    sent: list[str] = []

    class Raw:
        def save_state(self, name: str) -> Any:
            sent.append(name)
            return type("R", (), {"path": f"trio://run/{name}"})()

    client = RemoteTrainingClient(
        Raw(), ServiceFlavor("pytrio", pytrio.types, {}, {}, "loss_sum", False), tokenizer, FAST
    )
    for name in names + names:
        client.save_state(name)
    assert len(set(sent)) == len(sent) == 2 * len(names)
    for want, got in zip(names + names, sent, strict=True):
        assert _NAME_RE.match(got) and len(got) <= _MAX_NAME
        assert got.startswith(want[: _MAX_NAME - 13])
