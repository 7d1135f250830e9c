"""tempo-rl's Tinker adapter against the real tinker 0.38.0 public methods.

Every call the adapter makes on a Tinker client goes through :class:`RealTinkerFront`: the installed SDK's own
method is first run (with a mock ``self``, so nothing reaches the network) to bind the arguments to its real
signature and to catch the ``DeprecationWarning`` / ``FutureWarning`` it raises; the call is then served by the
recording stub. The front also applies what tinker documents for ``load_state``: weights only (Adam restarts).
Defect 6 of issue 23: the adapter used ``save_weights_and_get_sampling_client(name=...)``, ``load_state`` and
``sample_async`` / ``compute_logprobs_async``, all deprecated; defect 2 on Tinker: a resume reset Adam.
"""

from __future__ import annotations

import asyncio
import inspect
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
pytest.importorskip("torch")

from tempo_rl.backends import AdamParams, RetryConfig, SamplingParams, TinkerBackendConfig, create_clients  # noqa: E402
from tempo_rl.rollout.datums import completion_datum  # noqa: E402

FAST = RetryConfig(
    result_timeout_s=20.0, max_attempts=2, backoff_initial_s=0.0, backoff_max_s=0.0, jitter=0.0
)
_SKIP_DRY_RUN = {"get_tokenizer"}  # loads a tokenizer by model name: served by the stub only


def _dry_run(real: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """Bind ``args``/``kwargs`` to the real SDK method and run it on a mock ``self``; its deprecation warnings."""
    inspect.signature(real).bind(None, *args, **kwargs)  # TypeError: an argument the SDK does not take
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fake_self = mock.MagicMock()
        try:
            out = real(fake_self, *args, **kwargs)
            if inspect.iscoroutine(out):
                out.close()
        except Exception:
            pass
        for c in fake_self.mock_calls:  # coroutines handed to the mock event loop: never run them
            for arg in (*c.args, *c.kwargs.values()):
                if inspect.iscoroutine(arg):
                    arg.close()
    return [
        f"{real.__qualname__}: {w.message}"
        for w in caught
        if issubclass(w.category, (DeprecationWarning, FutureWarning))
    ]


class RealTinkerFront:
    """Wraps a stub client; each call first runs the real tinker method of ``real_cls`` (see module docstring)."""

    def __init__(self, inner: Any, real_cls: type, found: list[str], local: Any) -> None:
        self._inner, self._real_cls, self._found, self._local = inner, real_cls, found, local

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        real = inspect.getattr_static(self._real_cls, name, None)
        if not callable(target) or real is None or name in _SKIP_DRY_RUN:
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self._found.extend(_dry_run(getattr(self._real_cls, name), args, kwargs))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the stub's own copies of the warnings are counted above
                out = target(*args, **kwargs)
            if name in ("load_state", "load_state_async"):  # tinker: weights only
                self._local._optimizer = None
            return self._wrap(out)

        return call

    def _wrap(self, out: Any) -> Any:
        kinds = {"_TinkerTraining": tinker.TrainingClient, "_TinkerSampling": tinker.SamplingClient}
        if type(out).__name__ in kinds:
            return RealTinkerFront(out, kinds[type(out).__name__], self._found, self._local)
        if hasattr(out, "result") and type(out).__name__ == "_Future":
            value = out.result()
            if type(value).__name__ in kinds:
                wrapped = RealTinkerFront(value, kinds[type(value).__name__], self._found, self._local)
                return _Resolved(wrapped, out)
        return out


class _Resolved:
    """A completed future holding a wrapped client (``result``) that can be awaited too."""

    def __init__(self, value: Any, original: Any) -> None:
        self._value = value

    def result(self, timeout: float | None = None) -> Any:
        return self._value

    def __await__(self) -> Any:
        async def get() -> Any:
            return self._value

        return get().__await__()


@pytest.fixture
def front(local_training: Any) -> tuple[Any, list[str]]:
    from tempo_rl.backends.testing import RecordingTinkerService

    found: list[str] = []
    return RealTinkerFront(
        RecordingTinkerService(local_training), tinker.ServiceClient, found, local_training
    ), found


def _datum(training: Any, sampler: Any) -> Any:
    prompt = training.get_tokenizer().encode("go to desk 1", add_special_tokens=False)
    seq = sampler.sample(prompt, 1, SamplingParams(max_tokens=3, seed=0)).sequences[0]
    return completion_datum(prompt, list(seq.tokens), list(seq.logprobs), 1.0)


def test_the_adapter_calls_no_deprecated_tinker_api(front: tuple[Any, list[str]]) -> None:
    """Defect 6: a whole cycle (create, sample, async sample and logprobs, train, save, resume, snapshot) makes
    no call the installed tinker marks deprecated, and every call binds to its real signature."""
    service, found = front
    training, sampler = create_clients(
        TinkerBackendConfig(base_model="stub", retry=FAST), service_client=service
    )
    datum = _datum(training, sampler)
    prompt = list(datum.model_input[:4])
    asyncio.run(sampler.sample_async(prompt, 1, SamplingParams(max_tokens=2, seed=0)))
    asyncio.run(sampler.compute_logprobs_async(prompt))
    training.forward_backward([datum], "importance_sampling")
    training.optim_step(AdamParams())
    training.load_state(training.save_state("update_000001"))
    training.save_weights_and_get_sampling_client("policy-000001").compute_logprobs(prompt)
    assert found == []


def test_a_tinker_resume_keeps_adam(front: tuple[Any, list[str]], local_training: Any) -> None:
    """Defect 2 on Tinker: ``load_state`` restores weights only; a resume must bring the Adam moments back."""
    service, _ = front
    training, sampler = create_clients(
        TinkerBackendConfig(base_model="stub", retry=FAST), service_client=service
    )
    datum = _datum(training, sampler)
    training.forward_backward([datum], "importance_sampling")
    training.optim_step(AdamParams(learning_rate=1e-2))
    path = training.save_state("update_000001")
    state = local_training._optimizer.state_dict()["state"]
    saved = [state[k]["exp_avg"].numpy().copy() for k in sorted(state)]
    training.forward_backward([datum], "importance_sampling")
    training.optim_step(AdamParams(learning_rate=1e-2))

    training.load_state(path)

    assert local_training._optimizer is not None, "Adam was reset by the load"
    state = local_training._optimizer.state_dict()["state"]
    for k, want in zip(sorted(state), saved, strict=True):
        np.testing.assert_array_equal(state[k]["exp_avg"].numpy(), want)


def test_the_front_catches_what_it_should(tmp_path: Path) -> None:
    """The check itself: the real SDK's deprecations are seen, and a wrong argument fails binding."""
    assert _dry_run(tinker.SamplingClient.sample_async, (None, 1, None), {})
    assert _dry_run(tinker.TrainingClient.save_weights_and_get_sampling_client, (), {"name": "x"})
    assert _dry_run(tinker.TrainingClient.load_state, ("tinker://x",), {})
    assert not _dry_run(tinker.TrainingClient.save_weights_and_get_sampling_client, (), {})
    with pytest.raises(TypeError):
        _dry_run(tinker.SamplingClient.sample, (None, 1, None), {"return_text": True})
