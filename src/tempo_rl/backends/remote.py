"""Adapters from a PyTRIO/Tinker-style service client to tempo-rl's protocols (shared by both services).

The two SDKs share one API shape (PyTRIO re-implements Tinker's); :class:`ServiceFlavor` captures what differs
(the types module, whether sequences carry text, how snapshots are named). The adapters:

* convert our :class:`~tempo_rl.backends.types.Datum` / :class:`SamplingParams` / :class:`AdamParams` to the
  service's pydantic types and the responses back;
* validate every datum (token ids < ``len(tokenizer)``, lengths, loss inputs) before anything is sent;
* bound every wait with a timeout and retry transient failures (:mod:`tempo_rl.backends.retry`).
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from tempo_rl.backends.config import RetryConfig
from tempo_rl.backends.retry import BackendTimeoutError, call_with_retry, call_with_retry_async
from tempo_rl.backends.types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    LossFn,
    SampledSequence,
    SampleResult,
    SamplingParams,
    Tokenizer,
)
from tempo_rl.backends.validation import validate_datums, validate_loss_fn

__all__ = [
    "RemoteSamplingClient",
    "RemoteTrainingClient",
    "ServiceFlavor",
    "create_lora_training_client",
    "from_service_datum",
    "run_blocking",
    "to_service_datum",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?$")
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="tempo-rl-remote")


@dataclass(frozen=True)
class ServiceFlavor:
    """What differs between PyTRIO and Tinker.

    Attributes:
        name: ``"pytrio"`` or ``"tinker"`` (for messages).
        types: the module holding ``Datum``, ``ModelInput``, ``TensorData``, ``SamplingParams``,
        ``AdamParams``. sample_kwargs: extra keyword arguments of ``sample`` (PyTRIO: ``return_text=True``).
        forward_backward_kwargs: extra keyword arguments of ``forward_backward`` (PyTRIO:
        ``auto_shift=False``). snapshot_takes_name: whether ``save_weights_and_get_sampling_client`` accepts
        ``name`` (Tinker).
    """

    name: str
    types: ModuleType
    sample_kwargs: Mapping[str, Any]
    forward_backward_kwargs: Mapping[str, Any]
    snapshot_takes_name: bool


def run_blocking(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run a blocking SDK call in a worker thread and wait at most ``timeout_s`` seconds for it."""
    fut = _POOL.submit(fn)
    try:
        return fut.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError as exc:
        raise BackendTimeoutError(f"{what} did not return within {timeout_s} s") from exc


def create_lora_training_client(service_client: Any, cfg: Any, service: str) -> Any:
    """``service_client.create_lora_training_client(...)`` with the LoRA settings of a remote backend config
    (``base_model``, ``lora_rank``, ``seed``, ``train_mlp/attn/unembed``), in a worker thread bounded by
    ``cfg.retry.result_timeout_s`` and retried per ``cfg.retry``; ``service`` names it in errors."""
    retry: RetryConfig = cfg.retry

    def make() -> Any:
        return service_client.create_lora_training_client(
            base_model=cfg.base_model,
            rank=cfg.lora_rank,
            seed=cfg.seed,
            train_mlp=cfg.train_mlp,
            train_attn=cfg.train_attn,
            train_unembed=cfg.train_unembed,
        )

    what = f"{service} create_lora_training_client"
    return call_with_retry(lambda: run_blocking(make, retry.result_timeout_s, what), retry, what=what)


def to_service_datum(datum: Datum, types: ModuleType) -> Any:
    """Our Datum -> the service's ``Datum`` (``target_tokens`` int64, other inputs float32; tags dropped)."""
    inputs = {}
    for key, value in datum.loss_fn_inputs.items():
        dtype = np.int64 if key == "target_tokens" else np.float32
        inputs[key] = types.TensorData.from_numpy(np.ascontiguousarray(np.asarray(value, dtype=dtype)))
    return types.Datum(
        model_input=types.ModelInput.from_ints([int(t) for t in datum.model_input]), loss_fn_inputs=inputs
    )


def from_service_datum(datum: Any) -> Datum:
    """The service's ``Datum`` -> ours (used by the recording stubs)."""
    return Datum(
        model_input=tuple(int(t) for t in datum.model_input.to_ints()),
        loss_fn_inputs={k: np.asarray(v.to_numpy()) for k, v in datum.loss_fn_inputs.items()},
    )


def to_service_sampling_params(params: SamplingParams, types: ModuleType) -> Any:
    """Our SamplingParams -> the service's (``stop`` becomes a list)."""
    return types.SamplingParams(
        max_tokens=params.max_tokens,
        seed=params.seed,
        stop=list(params.stop) if params.stop else None,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
    )


def to_service_adam(params: AdamParams, types: ModuleType) -> Any:
    """Our AdamParams -> the service's (same names and meaning)."""
    return types.AdamParams(
        learning_rate=params.learning_rate,
        beta1=params.beta1,
        beta2=params.beta2,
        eps=params.eps,
        weight_decay=params.weight_decay,
        grad_clip_norm=params.grad_clip_norm,
    )


class RemoteSamplingClient:
    """:class:`~tempo_rl.backends.types.SamplingClient` over a service sampling client."""

    def __init__(self, raw: Any, flavor: ServiceFlavor, tokenizer: Tokenizer, retry: RetryConfig) -> None:
        self.raw = raw
        self.flavor = flavor
        self.tokenizer = tokenizer
        self.retry = retry
        self.vocab_size = len(tokenizer)

    def _prompt(self, tokens: Sequence[int], what: str) -> Any:
        ids = [int(t) for t in tokens]
        if not ids:
            raise ValueError(f"{what}: the prompt is empty")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(
                f"{what}: token ids {bad[:5]} are outside [0, {self.vocab_size}) (len(tokenizer))"
            )
        return self.flavor.types.ModelInput.from_ints(ids)

    def _check(self, num_samples: int, params: SamplingParams) -> None:
        if num_samples < 1:
            raise ValueError(f"sample: num_samples must be >= 1, got {num_samples}")
        if params.max_tokens < 1:
            raise ValueError(f"sample: SamplingParams.max_tokens must be >= 1, got {params.max_tokens}")

    def _result(self, resp: Any) -> SampleResult:
        seqs = []
        for s in resp.sequences:
            tokens = tuple(int(t) for t in s.tokens)
            text = getattr(s, "text", None)
            if text is None:
                text = self.tokenizer.decode(list(tokens), skip_special_tokens=False)
            seqs.append(
                SampledSequence(
                    tokens=tokens,
                    logprobs=tuple(float(x) for x in s.logprobs),
                    text=text,
                    stop_reason=str(s.stop_reason),
                )
            )
        return SampleResult(sequences=tuple(seqs))

    def sample(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> SampleResult:
        """``num_samples`` completions (retried on transient failures; every wait bounded)."""
        self._check(num_samples, params)
        mi = self._prompt(prompt, "sample")
        sp = to_service_sampling_params(params, self.flavor.types)
        resp = call_with_retry(
            lambda: self.raw.sample(
                prompt=mi, num_samples=num_samples, sampling_params=sp, **self.flavor.sample_kwargs
            ),
            self.retry,
            what=f"{self.flavor.name} sample",
        )
        return self._result(resp)

    async def sample_async(
        self, prompt: Sequence[int], num_samples: int, params: SamplingParams
    ) -> SampleResult:
        """Async :meth:`sample` (the service's ``sample_async``, bounded by ``asyncio.wait_for``)."""
        self._check(num_samples, params)
        mi = self._prompt(prompt, "sample_async")
        sp = to_service_sampling_params(params, self.flavor.types)
        resp = await call_with_retry_async(
            lambda: self.raw.sample_async(
                prompt=mi, num_samples=num_samples, sampling_params=sp, **self.flavor.sample_kwargs
            ),
            self.retry,
            what=f"{self.flavor.name} sample_async",
        )
        return self._result(resp)

    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        """Per-token logprobs under the sampler's weights (first is None)."""
        mi = self._prompt(tokens, "compute_logprobs")
        out = call_with_retry(
            lambda: self.raw.compute_logprobs(mi), self.retry, what=f"{self.flavor.name} compute_logprobs"
        )
        return [None if x is None else float(x) for x in out]

    async def compute_logprobs_async(self, tokens: Sequence[int]) -> list[float | None]:
        """Async :meth:`compute_logprobs`."""
        mi = self._prompt(tokens, "compute_logprobs_async")
        out = await call_with_retry_async(
            lambda: self.raw.compute_logprobs_async(mi),
            self.retry,
            what=f"{self.flavor.name} compute_logprobs",
        )
        return [None if x is None else float(x) for x in out]

    def get_tokenizer(self) -> Tokenizer:
        """The model's tokenizer."""
        return self.tokenizer


class RemoteTrainingClient:
    """:class:`~tempo_rl.backends.types.TrainingClient` over a service training client."""

    def __init__(self, raw: Any, flavor: ServiceFlavor, tokenizer: Tokenizer, retry: RetryConfig) -> None:
        self.raw = raw
        self.flavor = flavor
        self.tokenizer = tokenizer
        self.retry = retry
        self.vocab_size = len(tokenizer)

    def forward_backward(
        self, datums: Sequence[Datum], loss_fn: LossFn, loss_fn_config: Mapping[str, Any] | None = None
    ) -> ForwardBackwardOutput:
        """Validate, convert and send one batch; ``loss`` is the service's ``loss:sum`` metric (else the sum of
        its per-token ``elementwise_loss`` outputs, else NaN).

        Not retried after a timeout (the service may have accumulated the gradient already).
        """
        cfg = validate_loss_fn(loss_fn, loss_fn_config)
        validate_datums(datums, self.vocab_size, loss_fn)
        data = [to_service_datum(d, self.flavor.types) for d in datums]
        out = call_with_retry(
            lambda: self.raw.forward_backward(
                data, loss_fn, loss_fn_config=cfg or None, **self.flavor.forward_backward_kwargs
            ),
            self.retry,
            what=f"{self.flavor.name} forward_backward",
            idempotent=False,
        )
        metrics = {k: float(v) for k, v in (getattr(out, "metrics", None) or {}).items()}
        loss = metrics.get("loss:sum", metrics.get("loss", float("nan")))
        if loss != loss:  # no loss metric: sum the per-token losses when the service returns them
            parts = [
                o["elementwise_loss"]
                for o in getattr(out, "loss_fn_outputs", None) or []
                if "elementwise_loss" in o
            ]
            if parts:
                loss = float(
                    sum(np.asarray(p.to_numpy() if hasattr(p, "to_numpy") else p).sum() for p in parts)
                )
        metrics.update(
            {
                "tokens": float(sum(len(d.model_input) for d in datums)),
                "datums": float(len(datums)),
            }
        )
        return ForwardBackwardOutput(loss=loss, metrics=metrics)

    def optim_step(self, adam_params: AdamParams) -> None:
        """One Adam step with PyTRIO's parameters (not retried after a timeout)."""
        ap = to_service_adam(adam_params, self.flavor.types)
        call_with_retry(
            lambda: self.raw.optim_step(adam_params=ap),
            self.retry,
            what=f"{self.flavor.name} optim_step",
            idempotent=False,
        )

    def save_state(self, name: str) -> str:
        """Save weights + optimizer on the service; return its path (e.g. ``trio://...``)."""
        if not _NAME_RE.match(name):
            raise ValueError(
                f"checkpoint name {name!r} is invalid for {self.flavor.name}: "
                "use letters, digits, '.', '_', '-'"
            )
        resp = call_with_retry(
            lambda: self.raw.save_state(name), self.retry, what=f"{self.flavor.name} save_state"
        )
        return str(resp.path)

    def load_state(self, path: str) -> None:
        """Load weights + optimizer state saved by :meth:`save_state`."""
        call_with_retry(lambda: self.raw.load_state(path), self.retry, what=f"{self.flavor.name} load_state")

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> RemoteSamplingClient:
        """Snapshot the weights on the service and return a sampling client on them."""
        if self.flavor.snapshot_takes_name:
            call: Callable[[], Any] = lambda: self.raw.save_weights_and_get_sampling_client(name=name)  # noqa: E731
        else:
            call = self.raw.save_weights_and_get_sampling_client
        what = f"{self.flavor.name} save_weights_and_get_sampling_client"
        raw_sampler = call_with_retry(
            lambda: run_blocking(call, self.retry.result_timeout_s, what), self.retry, what=what
        )
        return RemoteSamplingClient(raw_sampler, self.flavor, self.tokenizer, self.retry)

    def get_tokenizer(self) -> Tokenizer:
        """The model's tokenizer."""
        return self.tokenizer
