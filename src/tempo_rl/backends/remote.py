"""Adapters from a PyTRIO/Tinker service client to tempo-rl's protocols (shared by both services).

The two SDKs share one API shape (PyTRIO re-implements Tinker's); :class:`ServiceFlavor` captures what differs
(the types module, the loss metric's name, how async calls are made). The adapters:

* convert our :class:`~tempo_rl.backends.types.Datum` / :class:`SamplingParams` / :class:`AdamParams` to the
  service's pydantic types and the responses back;
* validate every datum (token ids < ``len(tokenizer)``, lengths within the service's per-sample limit, loss
  inputs) before anything is sent;
* bound every wait with ``retry.result_timeout_s`` (a late answer raises
  :class:`~tempo_rl.backends.retry.BackendTimeoutError`). They make each call **once**: retries are applied to
  every backend alike by :mod:`tempo_rl.backends.factory` (:class:`~tempo_rl.backends.retry.RetryingTrainingClient`).

Rules of the services that shape the adapter (read from the SDKs, pytrio 0.2.9 and tinker 0.38.0):

* **State loads.** PyTRIO's ``TrainingClient.load_state*`` is accepted only before the first training call
  (any ``forward_backward`` / ``optim_step`` / save starts the remote trainer; later it raises
  ``ValidationError`` ``validation.already_initialized``), and Tinker deprecates ``load_state*``. Both restore
  weights only unless ``*_with_optimizer`` is used. So :meth:`RemoteTrainingClient.load_state` replaces the
  service training client by ``service.create_training_client_from_state_with_optimizer(path)``: weights **and**
  Adam moments, at any time, on both services (each load starts a new training run on the service).
* **Checkpoint names.** Both SDKs save with ``overwrite=False``: a name used twice is rejected. Every
  :meth:`RemoteTrainingClient.save_state` call therefore sends ``{name}-{tag}{n:04d}`` (``tag``: 8 random hex
  digits per adapter, ``n``: a per-adapter counter), unique across resumes and across the retries of a save
  whose first attempt timed out; the returned path is what a checkpoint records.
* **Loss metric.** PyTRIO's ``forward_backward`` reports ``loss_sum`` / ``loss_mean`` / ``token_count``, Tinker's
  ``loss:sum``.
* **Tokenizer.** PyTRIO's ``forward_backward`` checks token ids against ``len(get_tokenizer(model_id))``,
  which loads (or downloads) the tokenizer by model id. With ``tokenizer_path`` set, the adapter hands the SDK
  that tokenizer's size instead (see :func:`seed_pytrio_vocab_size`), so nothing is fetched.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from tempo_rl.backends.config import RetryConfig
from tempo_rl.backends.retry import BackendTimeoutError
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
from tempo_rl.backends.validation import DatumError, validate_datums, validate_loss_fn

__all__ = [
    "RemoteSamplingClient",
    "RemoteTrainingClient",
    "SequenceLimits",
    "ServiceFlavor",
    "create_lora_training_client",
    "create_training_client_from_state",
    "from_service_datum",
    "open_training_client",
    "resolve",
    "run_blocking",
    "seed_pytrio_vocab_size",
    "to_service_datum",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?$")
#: the longest name the services keep as given (pytrio shortens longer ones with a hash)
_MAX_NAME = 200
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="tempo-rl-remote")


@dataclass(frozen=True)
class SequenceLimits:
    """A service's per-sample token limits (None: not reported).

    Attributes:
        max_seq_len: most tokens in one training sample (``len(model_input)``).
        max_tokens_per_request: most input tokens in one training request; one sample must fit too.
        sample_max_seq_len: most tokens of one sampled sequence, prompt plus ``max_tokens``.
    """

    max_seq_len: int | None = None
    max_tokens_per_request: int | None = None
    sample_max_seq_len: int | None = None

    def bound(self) -> int | None:
        """The tightest per-sample training limit, or None."""
        values = [v for v in (self.max_seq_len, self.max_tokens_per_request) if v is not None]
        return min(values) if values else None

    def check(self, n_tokens: int, what: str, service: str) -> None:
        """Raise ``ValueError`` when a sequence of ``n_tokens`` tokens exceeds the training or the sampling limit
        (``what`` names the setting that produced it, ``service`` the service)."""
        for bound, kind in ((self.bound(), "training"), (self.sample_max_seq_len, "sampling")):
            if bound is not None and n_tokens > bound:
                raise ValueError(
                    f"{what}: {n_tokens} tokens exceed {service}'s per-sample {kind} limit of {bound} tokens "
                    f"(training max_seq_len={self.max_seq_len}, max_tokens_per_request="
                    f"{self.max_tokens_per_request}; sampling max_seq_len={self.sample_max_seq_len}); lower it to "
                    f"at most {bound}"
                )


@dataclass(frozen=True)
class ServiceFlavor:
    """What differs between PyTRIO and Tinker.

    Attributes:
        name: ``"pytrio"`` or ``"tinker"`` (for messages).
        types: the module holding ``Datum``, ``ModelInput``, ``TensorData``, ``SamplingParams``, ``AdamParams``.
        sample_kwargs: extra keyword arguments of ``sample`` (PyTRIO: ``return_text=True``).
        forward_backward_kwargs: extra keyword arguments of ``forward_backward`` (PyTRIO: ``auto_shift=False``).
        loss_metric: the ``forward_backward`` metric holding the summed loss (PyTRIO ``loss_sum``, Tinker
            ``loss:sum``).
        async_via_future: Tinker: ``sample`` / ``compute_logprobs`` return an awaitable future, and their
            ``*_async`` twins are deprecated; PyTRIO: ``sample_async`` / ``compute_logprobs_async`` are used.
    """

    name: str
    types: ModuleType
    sample_kwargs: Mapping[str, Any]
    forward_backward_kwargs: Mapping[str, Any]
    loss_metric: str
    async_via_future: bool


def run_blocking(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Run a blocking SDK call in a worker thread and wait at most ``timeout_s`` seconds for it."""
    fut = _POOL.submit(fn)
    try:
        return fut.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError as exc:
        raise BackendTimeoutError(f"{what} did not return within {timeout_s} s") from exc


def resolve(value: Any, timeout_s: float, what: str) -> Any:
    """``value.result(timeout=timeout_s)`` when ``value`` is future-like, else ``value``; a timeout raises
    :class:`BackendTimeoutError` naming ``what``."""
    if hasattr(value, "result") and callable(value.result):
        try:
            return value.result(timeout=timeout_s)
        except (TimeoutError, concurrent.futures.TimeoutError) as exc:
            raise BackendTimeoutError(f"{what} did not finish within {timeout_s} s") from exc
    return value


def _call(fn: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """One SDK call in a worker thread, its (future) result awaited; the whole bounded by ``timeout_s``."""
    return run_blocking(lambda: resolve(fn(), timeout_s, what), timeout_s, what)


async def _await(value: Any) -> Any:
    return await value


async def _call_async(make: Callable[[], Awaitable[Any]], timeout_s: float, what: str) -> Any:
    try:
        return await asyncio.wait_for(_await(make()), timeout=timeout_s)
    except TimeoutError as exc:
        raise BackendTimeoutError(f"{what} did not finish within {timeout_s} s") from exc


def create_lora_training_client(service_client: Any, cfg: Any, service: str) -> Any:
    """``service_client.create_lora_training_client(...)`` with the LoRA settings of a remote backend config
    (``base_model``, ``lora_rank``, ``seed``, ``train_mlp/attn/unembed``), bounded by
    ``cfg.retry.result_timeout_s``; ``service`` names it in errors. Tinker's returned future is resolved."""
    what = f"{service} create_lora_training_client"
    return _call(
        lambda: service_client.create_lora_training_client(
            base_model=cfg.base_model,
            rank=cfg.lora_rank,
            seed=cfg.seed,
            train_mlp=cfg.train_mlp,
            train_attn=cfg.train_attn,
            train_unembed=cfg.train_unembed,
        ),
        cfg.retry.result_timeout_s,
        what,
    )


def create_training_client_from_state(service_client: Any, path: str, timeout_s: float, service: str) -> Any:
    """A new service training client holding the weights **and optimizer state** saved at ``path``
    (``create_training_client_from_state_with_optimizer``, the same call on both SDKs)."""
    what = f"{service} create_training_client_from_state_with_optimizer"
    return _call(
        lambda: service_client.create_training_client_from_state_with_optimizer(path), timeout_s, what
    )


def seed_pytrio_vocab_size(raw: Any, tokenizer: Tokenizer) -> None:
    """Give a pytrio ``TrainingClient`` its tokenizer's vocabulary size so that ``forward_backward`` does not
    load the tokenizer by model id (pytrio 0.2.9 caches ``len(get_tokenizer(model_id))`` in the
    ``functools.cached_property`` ``_tokenizer_vocab_size``; the tests pin that attribute).

    Raises:
        RuntimeError: the installed pytrio has no such cached property (the tokenizer would be fetched).
    """
    attr = getattr(type(raw), "_tokenizer_vocab_size", None)
    if not isinstance(attr, functools.cached_property):
        raise RuntimeError(
            f"pytrio {type(raw).__module__}.{type(raw).__name__} has no cached _tokenizer_vocab_size; this "
            "tempo-rl cannot stop it from loading the tokenizer by model id. Install pytrio 0.2.x or unset "
            "backend.tokenizer_path"
        )
    raw.__dict__["_tokenizer_vocab_size"] = len(tokenizer)


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
    return types.AdamParams(**params.as_dict())


@dataclass(eq=False, repr=False)
class _RemoteClient:
    """What both adapters hold: the SDK client, the flavor, the tokenizer, the timeout policy and the service's
    per-sample token limits (none by default)."""

    raw: Any
    flavor: ServiceFlavor
    tokenizer: Tokenizer
    retry: RetryConfig
    limits: SequenceLimits = field(default_factory=SequenceLimits)

    def __post_init__(self) -> None:
        self.vocab_size = len(self.tokenizer)

    def _what(self, method: str) -> str:
        return f"{self.flavor.name} {method}"

    def get_tokenizer(self) -> Tokenizer:
        """The model's tokenizer."""
        return self.tokenizer


@dataclass(eq=False, repr=False)
class RemoteSamplingClient(_RemoteClient):
    """:class:`~tempo_rl.backends.types.SamplingClient` over a service sampling client (one try per call).

    ``limits.sample_max_seq_len`` (when the service reports it) bounds ``len(prompt) + max_tokens`` of every
    ``sample``; a longer request fails here, with the numbers, instead of on the service.
    """

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

    def _check(self, prompt: Sequence[int], num_samples: int, params: SamplingParams) -> None:
        if num_samples < 1:
            raise ValueError(f"sample: num_samples must be >= 1, got {num_samples}")
        if params.max_tokens < 1:
            raise ValueError(f"sample: SamplingParams.max_tokens must be >= 1, got {params.max_tokens}")
        bound = self.limits.sample_max_seq_len
        if bound is not None and len(prompt) + params.max_tokens > bound:
            raise ValueError(
                f"sample: a {len(prompt)}-token prompt plus max_tokens={params.max_tokens} exceeds "
                f"{self.flavor.name}'s sampling limit of {bound} tokens; lower sampling.max_trajectory_tokens "
                "(actor) or sampling.critic_max_prompt_tokens (critic)"
            )

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
        """``num_samples`` completions (the wait bounded by ``result_timeout_s``)."""
        self._check(prompt, num_samples, params)
        mi = self._prompt(prompt, "sample")
        sp = to_service_sampling_params(params, self.flavor.types)
        resp = _call(
            lambda: self.raw.sample(
                prompt=mi, num_samples=num_samples, sampling_params=sp, **self.flavor.sample_kwargs
            ),
            self.retry.result_timeout_s,
            self._what("sample"),
        )
        return self._result(resp)

    async def sample_async(
        self, prompt: Sequence[int], num_samples: int, params: SamplingParams
    ) -> SampleResult:
        """Async :meth:`sample` (Tinker: ``await sample(...)``; PyTRIO: ``sample_async``), bounded by
        ``asyncio.wait_for``."""
        self._check(prompt, num_samples, params)
        mi = self._prompt(prompt, "sample_async")
        sp = to_service_sampling_params(params, self.flavor.types)
        fn = self.raw.sample if self.flavor.async_via_future else self.raw.sample_async
        resp = await _call_async(
            lambda: fn(prompt=mi, num_samples=num_samples, sampling_params=sp, **self.flavor.sample_kwargs),
            self.retry.result_timeout_s,
            self._what("sample_async"),
        )
        return self._result(resp)

    def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        """Per-token logprobs under the sampler's weights (first is None)."""
        mi = self._prompt(tokens, "compute_logprobs")
        out = _call(
            lambda: self.raw.compute_logprobs(mi), self.retry.result_timeout_s, self._what("compute_logprobs")
        )
        return [None if x is None else float(x) for x in out]

    async def compute_logprobs_async(self, tokens: Sequence[int]) -> list[float | None]:
        """Async :meth:`compute_logprobs`."""
        mi = self._prompt(tokens, "compute_logprobs_async")
        fn = self.raw.compute_logprobs if self.flavor.async_via_future else self.raw.compute_logprobs_async
        out = await _call_async(
            lambda: fn(mi), self.retry.result_timeout_s, self._what("compute_logprobs_async")
        )
        return [None if x is None else float(x) for x in out]


@dataclass(eq=False, repr=False)
class RemoteTrainingClient(_RemoteClient):
    """:class:`~tempo_rl.backends.types.TrainingClient` over a service training client (one try per call).

    Args:
        raw: the SDK's training client.
        flavor: what differs between the services.
        tokenizer: the base model's tokenizer.
        retry: ``result_timeout_s`` bounds every wait (retries are the factory's).
        service: the SDK's service client; :meth:`load_state` creates the new training client with it.
        limits: the service's per-sample token limits, checked before every ``forward_backward``.
        prepare: ``prepare(raw, tokenizer)`` is called on every SDK training client this adapter takes on (the
            first and each one :meth:`load_state` creates), e.g. to apply :func:`seed_pytrio_vocab_size`.
    """

    service: Any = field(default=None, kw_only=True)
    prepare: Callable[[Any, Tokenizer], None] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._tag = secrets.token_hex(4)
        self._saves = 0
        if self.prepare is not None:
            self.prepare(self.raw, self.tokenizer)

    def forward_backward(
        self, datums: Sequence[Datum], loss_fn: LossFn, loss_fn_config: Mapping[str, Any] | None = None
    ) -> ForwardBackwardOutput:
        """Validate, convert and send one batch.

        ``loss`` is the service's summed loss (``flavor.loss_metric``), else the sum of its per-token
        ``elementwise_loss`` outputs, else NaN. Never resent after a timeout (the service may have accumulated
        the gradient already).
        """
        cfg = validate_loss_fn(loss_fn, loss_fn_config)
        validate_datums(datums, self.vocab_size, loss_fn)
        bound = self.limits.bound()
        if bound is not None:
            for i, d in enumerate(datums):
                if len(d.model_input) > bound:
                    raise DatumError(
                        f"datum {i}: {len(d.model_input)} input tokens exceed {self.flavor.name}'s per-sample "
                        f"limit of {bound}; lower sampling.max_trajectory_tokens (actor) or "
                        "sampling.critic_max_prompt_tokens + critic_max_tokens (critic)"
                    )
        data = [to_service_datum(d, self.flavor.types) for d in datums]
        out = _call(
            lambda: self.raw.forward_backward(
                data, loss_fn, loss_fn_config=cfg or None, **self.flavor.forward_backward_kwargs
            ),
            self.retry.result_timeout_s,
            self._what("forward_backward"),
        )
        metrics = {
            k: float(v)
            for k, v in (getattr(out, "metrics", None) or {}).items()
            if isinstance(v, (int, float))
        }
        loss = metrics.get(self.flavor.loss_metric, float("nan"))
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
        """One Adam step (``optim_step(adam_params=...)``, the keyword both SDKs accept)."""
        ap = to_service_adam(adam_params, self.flavor.types)
        _call(
            lambda: self.raw.optim_step(adam_params=ap),
            self.retry.result_timeout_s,
            self._what("optim_step"),
        )

    def service_name(self, name: str) -> str:
        """The unique name the next :meth:`save_state` sends for ``name`` (``{name}-{tag}{n:04d}``)."""
        if not _NAME_RE.match(name):
            raise ValueError(
                f"checkpoint name {name!r} is invalid for {self.flavor.name}: "
                "use letters, digits, '.', '_', '-' (starting with a letter or digit)"
            )
        suffix = f"-{self._tag}{self._saves:04d}"
        return name[: _MAX_NAME - len(suffix)] + suffix

    def save_state(self, name: str) -> str:
        """Save weights + optimizer on the service under a unique name derived from ``name``; return its path
        (e.g. ``trio://...``), which :meth:`load_state` accepts."""
        unique = self.service_name(name)
        self._saves += 1
        resp = _call(
            lambda: self.raw.save_state(unique), self.retry.result_timeout_s, self._what("save_state")
        )
        return str(resp.path)

    def load_state(self, path: str) -> None:
        """Continue from the weights **and** Adam state saved at ``path``: the service training client is
        replaced by one created from that state (accepted at any time on both services)."""
        if self.service is None:
            raise RuntimeError(
                f"{self.flavor.name} load_state needs the service client that created this training client; "
                "build the clients with tempo_rl.backends.create_clients"
            )
        raw = create_training_client_from_state(
            self.service, path, self.retry.result_timeout_s, self.flavor.name
        )
        if self.prepare is not None:
            self.prepare(raw, self.tokenizer)
        self.raw = raw

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> RemoteSamplingClient:
        """Snapshot the weights on the service and return a sampling client on them (``name`` is only a label
        here: neither SDK takes one any more)."""
        raw_sampler = _call(
            self.raw.save_weights_and_get_sampling_client,
            self.retry.result_timeout_s,
            self._what("save_weights_and_get_sampling_client"),
        )
        return RemoteSamplingClient(raw_sampler, self.flavor, self.tokenizer, self.retry, self.limits)


def _service_tokenizer(raw: Any, tokenizer_path: str | None, timeout_s: float, service: str) -> Tokenizer:
    """The tokenizer saved at ``tokenizer_path``, else the SDK training client's own (``raw.get_tokenizer()``)."""
    if tokenizer_path is not None:
        from tempo_rl.backends.local.tokenizer import load_tokenizer

        tok: Any = load_tokenizer(tokenizer_path)
        return tok  # type: ignore[no-any-return]
    return run_blocking(raw.get_tokenizer, timeout_s, f"{service} get_tokenizer")  # type: ignore[no-any-return]


def open_training_client(
    service_client: Any,
    cfg: Any,
    flavor: ServiceFlavor,
    *,
    resume_from: str | None = None,
    limits: SequenceLimits | None = None,
    prepare: Callable[[Any, Tokenizer], None] | None = None,
) -> tuple[RemoteTrainingClient, RemoteSamplingClient]:
    """The adapter over a new service training client, and a sampling client on its weights.

    The tokenizer is the one saved at ``cfg.tokenizer_path`` when set, else the SDK training client's
    ``get_tokenizer()`` (bounded by ``cfg.retry.result_timeout_s``).

    Args:
        service_client: the SDK's ``ServiceClient`` (or a stub with its API).
        cfg: the remote backend config (LoRA settings, ``tokenizer_path``, ``retry``).
        flavor: the service's :class:`ServiceFlavor`.
        resume_from: a path returned by ``save_state``: the training client is created from it with its
            optimizer state (``create_training_client_from_state_with_optimizer``) instead of fresh LoRA weights.
        limits: the service's per-sample token limits.
        prepare: see :class:`RemoteTrainingClient`.
    """
    timeout = cfg.retry.result_timeout_s
    if resume_from is None:
        raw = create_lora_training_client(service_client, cfg, flavor.name)
    else:
        raw = create_training_client_from_state(service_client, resume_from, timeout, flavor.name)
    tokenizer = _service_tokenizer(raw, cfg.tokenizer_path, timeout, flavor.name)
    training = RemoteTrainingClient(
        raw, flavor, tokenizer, cfg.retry, limits or SequenceLimits(), service=service_client, prepare=prepare
    )
    return training, training.save_weights_and_get_sampling_client()
