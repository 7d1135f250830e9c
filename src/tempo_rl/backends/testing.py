"""Recording stubs of the PyTRIO and Tinker service clients, for offline tests and CI examples.

PyTRIO and Tinker have no offline mode (their ``ServiceClient`` authenticates over HTTPS when constructed), so
the fast tests run tempo-rl against these stubs. They follow the rules the real SDKs (pytrio 0.2.9, tinker
0.38.0) enforce, so a stub cannot hide a call the service would refuse:

* the SDKs' method names and signatures (pinned against the installed SDKs in
  ``tests/backends/test_sdk_pins.py``), futures with ``.result(timeout)`` that can also be awaited;
* only the SDKs' *real* pydantic types (``Datum``, ``ModelInput``, ``TensorData``, ``SamplingParams``,
  ``AdamParams``), every call's shapes and arguments checked like the service would (dtypes, lengths
  ``== len(model_input)``, the inputs each loss needs, token ids ``< len(tokenizer)``, LoRA rank bounds,
  checkpoint-name rule, ``max_tokens`` set, ``auto_shift=False``), raising :class:`StubCallError` otherwise;
* **state rules**: a training client's first ``forward_backward`` / ``optim_step`` / save starts its trainer;
  PyTRIO's ``load_state*`` after that raises pytrio's own ``ValidationError`` (``validation.already_initialized``);
  ``load_state`` and ``create_training_client_from_state`` restore weights only (Adam restarts), the
  ``*_with_optimizer`` variants restore both; a checkpoint name is never overwritten (``overwrite=False``);
* **deprecations**: Tinker's ``sample_async``, ``compute_logprobs_async`` and ``load_state*`` warn
  (``FutureWarning``) and ``save_weights_and_get_sampling_client(name=...)`` warns (``DeprecationWarning``), as
  the SDK does;
* **responses shaped as the real ones**: PyTRIO's ``forward_backward`` metrics are ``loss_sum`` /
  ``loss_mean`` / ``token_count``, Tinker's ``loss:sum``; PyTRIO reports per-model limits through
  ``get_server_capabilities()`` and rejects a longer sample; PyTRIO's ``forward_backward`` needs the vocabulary
  size, which it fetches through ``get_tokenizer`` (recorded as ``fetch_tokenizer``) unless it was given one;
* every call recorded in ``service.calls`` as ``(method, summary)``;
* the maths delegated to a :class:`~tempo_rl.backends.local.LocalTrainingClient`, so a whole training loop
  ("ALFWorld on PyTRIO") runs offline with real learning;
* injected failures: ``service.fail_next("sample", ConnectionError("reset"))`` makes the next ``sample``
  raise, and ``service.hang_next("forward_backward")`` returns a future that never completes.

Usage::

    training, sampling = create_clients(PyTrioBackendConfig(base_model="stub"), service_client=
                                        RecordingPyTrioService(local_training_client))
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
import warnings
from collections import defaultdict, deque
from collections.abc import Generator, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from tempo_rl.backends.remote import from_service_datum
from tempo_rl.backends.types import AdamParams, SamplingParams
from tempo_rl.backends.validation import LOSS_INPUTS

__all__ = ["RecordingPyTrioService", "RecordingTinkerService", "StubCallError"]

_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?$")
_TINKER_LOAD_STATE_DEPRECATED = (
    "DEPRECATED: TrainingClient.load_state*() is deprecated (tinker 0.38); create a new training client from "
    "the checkpoint with ServiceClient.create_training_client_from_state_with_optimizer()"
)


class StubCallError(AssertionError):
    """A call the real service would reject (wrong type, shape, argument); the message says which."""


class _Future:
    """A completed (or never-completing) future with the SDKs' ``result(timeout)`` API; awaitable too."""

    def __init__(self, value: Any = None, *, hang: bool = False, error: BaseException | None = None) -> None:
        self._f: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if error is not None:
            self._f.set_exception(error)
        elif not hang:
            self._f.set_result(value)

    def result(self, timeout: float | None = None) -> Any:
        return self._f.result(timeout=timeout)

    def done(self) -> bool:
        return self._f.done()

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self._f).__await__()


class _Run:
    """One training run on the stub service: whether its trainer started and the names it saved."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.started = False
        self.names: set[str] = set()


class _Core:
    """State shared by one stub service and its clients: the delegate, the call log and injected faults."""

    def __init__(self, local: Any, types: ModuleType, name: str) -> None:
        self.local = local
        self.types = types
        self.name = name
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.faults: defaultdict[str, deque[BaseException | None]] = defaultdict(deque)
        self.paths: dict[str, str] = {}
        self.runs: list[_Run] = []
        self.vocab_size = len(local.get_tokenizer())

    def new_run(self) -> _Run:
        run = _Run(len(self.runs))
        self.runs.append(run)
        return run

    def enter(self, method: str, **summary: Any) -> bool:
        """Record the call; raise an injected error; return True when the call must hang."""
        self.calls.append((method, summary))
        if self.faults[method]:
            fault = self.faults[method].popleft()
            if fault is None:
                return True
            raise fault
        return False

    def fail(self, msg: str) -> StubCallError:
        return StubCallError(f"{self.name} stub: {msg}")

    # ---- argument checks shared by both SDKs
    def check_model_input(self, mi: Any, what: str) -> list[int]:
        if not isinstance(mi, self.types.ModelInput):
            raise self.fail(f"{what} must be {self.name}.ModelInput, got {type(mi).__name__}")
        ids = [int(t) for t in mi.to_ints()]
        if not ids:
            raise self.fail(f"{what} is empty")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise self.fail(f"{what} token ids {bad[:5]} outside [0, {self.vocab_size})")
        return ids

    def check_sample(
        self, prompt: Any, num_samples: Any, sampling_params: Any
    ) -> tuple[list[int], int, SamplingParams]:
        ids = self.check_model_input(prompt, "prompt")
        if not isinstance(num_samples, int) or num_samples < 1:
            raise self.fail(f"num_samples must be a positive int, got {num_samples!r}")
        return ids, num_samples, self.our_sampling_params(sampling_params)

    def check_datums(self, data: Any, loss_fn: Any, loss_fn_config: Any) -> list[Any]:
        if not isinstance(data, list) or not data:
            raise self.fail(f"data must be a non-empty list of {self.name}.Datum, got {type(data).__name__}")
        if loss_fn not in LOSS_INPUTS:
            raise self.fail(f"loss_fn {loss_fn!r} is not one this stub serves ({sorted(LOSS_INPUTS)})")
        if loss_fn_config is not None and not isinstance(loss_fn_config, dict):
            raise self.fail(f"loss_fn_config must be a dict or None, got {type(loss_fn_config).__name__}")
        ours = []
        for i, d in enumerate(data):
            if not isinstance(d, self.types.Datum):
                raise self.fail(f"data[{i}] must be {self.name}.Datum, got {type(d).__name__}")
            n = len(self.check_model_input(d.model_input, f"data[{i}].model_input"))
            for key, td in d.loss_fn_inputs.items():
                if not isinstance(td, self.types.TensorData):
                    raise self.fail(f"data[{i}].loss_fn_inputs[{key!r}] must be TensorData")
                want = "int64" if key == "target_tokens" else "float32"
                if str(td.dtype) != want:
                    raise self.fail(
                        f"data[{i}].loss_fn_inputs[{key!r}] has dtype {td.dtype}, expected {want}"
                    )
                if list(td.shape or [len(td.tolist())]) != [n]:
                    raise self.fail(f"data[{i}].loss_fn_inputs[{key!r}] has shape {td.shape}, expected [{n}]")
            missing = [k for k in LOSS_INPUTS[loss_fn] if k not in d.loss_fn_inputs]
            if missing:
                raise self.fail(f"data[{i}] lacks {missing} required by {loss_fn}")
            tgt = np.asarray(d.loss_fn_inputs["target_tokens"].to_numpy())
            if ((tgt != -100) & ((tgt < 0) | (tgt >= self.vocab_size))).any():
                raise self.fail(f"data[{i}].target_tokens outside [0, {self.vocab_size})")
            ours.append(from_service_datum(d))
        return ours

    def our_sampling_params(self, sp: Any) -> SamplingParams:
        if not isinstance(sp, self.types.SamplingParams):
            raise self.fail(f"sampling_params must be {self.name}.SamplingParams, got {type(sp).__name__}")
        if sp.max_tokens is None:
            raise self.fail("SamplingParams.max_tokens must be set")
        stop = sp.stop
        if isinstance(stop, str):
            stop = [stop]
        return SamplingParams(
            max_tokens=int(sp.max_tokens),
            temperature=float(sp.temperature),
            top_p=float(sp.top_p),
            top_k=int(sp.top_k),
            seed=sp.seed,
            stop=tuple(stop) if stop else None,
        )

    def our_adam(self, ap: Any) -> AdamParams:
        if not isinstance(ap, self.types.AdamParams):
            raise self.fail(f"adam_params must be {self.name}.AdamParams, got {type(ap).__name__}")
        return AdamParams.of(ap)

    def check_lora(self, base_model: Any, rank: Any, low: int, high: int | None) -> None:
        if not isinstance(base_model, str) or not base_model:
            raise self.fail("base_model must be a non-empty model id")
        if not isinstance(rank, int) or rank < low or (high is not None and rank > high):
            bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
            raise self.fail(f"LoRA rank must be an int {bounds}, got {rank!r}")

    def save(self, run: _Run, name: Any, overwrite: bool, scheme: str) -> str:
        """Save the delegate's state under ``name`` in ``run``; a used name is refused unless ``overwrite``."""
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise self.fail(f"checkpoint name {name!r} does not match {_NAME_RE.pattern}")
        if name in run.names and not overwrite:
            raise self.fail(
                f"checkpoint {name!r} already exists in training run {run.number} and overwrite=False "
                "(the service rejects it)"
            )
        run.started = True
        run.names.add(name)
        uri = f"{scheme}://stub-run-{run.number}/state/{name}"
        self.paths[uri] = self.local.save_state(f"run{run.number}-{name}")
        return uri

    def restore(self, path: Any, *, optimizer: bool) -> None:
        """Load a saved state into the delegate: weights always, Adam state only when ``optimizer``."""
        if path not in self.paths:
            raise self.fail(f"unknown checkpoint path {path!r}; pass a path returned by save_state")
        self.local.load_state(self.paths[path])
        if not optimizer:
            self.local._optimizer = None  # weights only: the service restarts Adam


class _StubService:
    """Common service-client part: fault injection and the call log."""

    _core: _Core

    @property
    def calls(self) -> list[tuple[str, dict[str, Any]]]:
        """Every call made on this service and its clients, in order: ``(method, summary)``."""
        return self._core.calls

    def fail_next(self, method: str, error: BaseException, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` raise ``error``."""
        self._core.faults[method].extend([error] * times)

    def hang_next(self, method: str, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` return a future that never completes."""
        self._core.faults[method].extend([None] * times)

    def methods_called(self) -> list[str]:
        """The method names of :attr:`calls`."""
        return [m for m, _ in self.calls]


class _StubSampling:
    """What both SDKs' sampling clients share: the delegate sampler and ``compute_logprobs``."""

    def __init__(self, core: _Core, local_sampler: Any) -> None:
        self._core, self._local = core, local_sampler

    def compute_logprobs(self, prompt: Any) -> _Future:
        hang = self._core.enter("compute_logprobs")
        ids = self._core.check_model_input(prompt, "prompt")
        return _Future(hang=True) if hang else _Future(self._local.compute_logprobs(ids))


# ------------------------------------------------------------------------------------------------ PyTRIO
class _PyTrioSampling(_StubSampling):
    def _response(self, res: Any) -> Any:
        t = self._core.types
        return t.SampleResponse(
            sequences=[
                t.SampleSequence(
                    stop_reason=s.stop_reason, tokens=list(s.tokens), text=s.text, logprobs=list(s.logprobs)
                )
                for s in res.sequences
            ]
        )

    def _args(
        self, prompt: Any, num_samples: Any, sampling_params: Any, return_text: Any
    ) -> tuple[list[int], int, SamplingParams]:
        if return_text is not True:
            raise self._core.fail("tempo-rl must request return_text=True")
        return self._core.check_sample(prompt, num_samples, sampling_params)

    def sample(
        self,
        prompt: Any,
        num_samples: int = 1,
        sampling_params: Any = None,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        return_text: bool = True,
    ) -> _Future:
        hang = self._core.enter("sample", num_samples=num_samples)
        ids, n, sp = self._args(prompt, num_samples, sampling_params, return_text)
        if hang:
            return _Future(hang=True)
        return _Future(self._response(self._local.sample(ids, n, sp)))

    async def sample_async(
        self,
        prompt: Any,
        num_samples: int = 1,
        sampling_params: Any = None,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        return_text: bool = True,
    ) -> Any:
        hang = self._core.enter("sample_async", num_samples=num_samples)
        ids, n, sp = self._args(prompt, num_samples, sampling_params, return_text)
        if hang:
            await asyncio.Event().wait()
        return self._response(await self._local.sample_async(ids, n, sp))

    async def compute_logprobs_async(self, prompt: Any) -> list[float | None]:
        self._core.enter("compute_logprobs_async")
        ids = self._core.check_model_input(prompt, "prompt")
        result: list[float | None] = await self._local.compute_logprobs_async(ids)
        return result

    def get_tokenizer(self) -> Any:
        return self._core.local.get_tokenizer()


class _PyTrioTraining:
    """pytrio.TrainingClient's API and state rules over the delegate."""

    def __init__(self, core: _Core, model_id: str, limits: Any) -> None:
        self._core = core
        self._run = core.new_run()
        self.model_id = model_id
        self._limits = limits

    @functools.cached_property
    def _tokenizer_vocab_size(self) -> int:
        """As pytrio: ``len(get_tokenizer(model_id))``, fetched on first use (recorded as ``fetch_tokenizer``)."""
        self._core.enter("fetch_tokenizer", model_id=self.model_id)
        return len(self._core.local.get_tokenizer())

    def _start(self) -> None:
        self._run.started = True

    def forward_backward(
        self, data: Any, loss_fn: str = "cross_entropy", loss_fn_config: Any = None, auto_shift: bool = False
    ) -> _Future:
        from pytrio.errors.base import ValidationError

        hang = self._core.enter(
            "forward_backward", n=len(data) if isinstance(data, list) else -1, loss_fn=loss_fn
        )
        if auto_shift is not False:
            raise self._core.fail("tempo-rl shifts tokens itself: auto_shift must be False")
        vocab = self._tokenizer_vocab_size
        ours = self._core.check_datums(data, loss_fn, loss_fn_config)
        max_len = self._limits.max_seq_len if self._limits is not None else None
        for i, d in enumerate(ours):
            if max_len is not None and len(d.model_input) > max_len:
                raise ValidationError(
                    "training sample exceeds max_seq_len",
                    code="validation.training_sample_too_long",
                    details={"sample_index": i, "seq_len": len(d.model_input), "max_seq_len": max_len},
                )
            if max(d.model_input) >= vocab:
                raise ValidationError(
                    "training input token ID is outside the tokenizer vocabulary",
                    code="validation.token_id_out_of_range",
                )
        self._start()
        if hang:
            return _Future(hang=True)
        out = self._core.local.forward_backward(ours, loss_fn, loss_fn_config)
        count = int(out.metrics.get("active_tokens", sum(len(d.model_input) for d in ours)))
        t = self._core.types
        return _Future(
            t.ForwardBackwardOutput(
                loss_fn_outputs=[],
                metrics={
                    "loss_sum": float(out.loss),
                    "loss_mean": float(out.loss) / count if count > 0 else 0.0,
                    "token_count": count,
                },
            )
        )

    def optim_step(self, adam_params: Any) -> _Future:
        hang = self._core.enter("optim_step")
        ap = self._core.our_adam(adam_params)
        self._start()
        if hang:
            return _Future(hang=True)
        self._core.local.optim_step(ap)
        return _Future(self._core.types.OptimStepResponse(metrics={}))

    def save_state(self, name: str, ttl_seconds: int | None = None, overwrite: bool = False) -> _Future:
        self._core.enter("save_state", name=name)
        uri = self._core.save(self._run, name, overwrite, "trio")
        return _Future(self._core.types.SaveWeightsResponse(path=uri, model=self.model_id, size=1))

    def _load(self, path: str, *, optimizer: bool) -> _Future:
        from pytrio.errors.base import ValidationError

        if self._run.started:
            raise ValidationError(
                "load_state cannot be called after training has started. "
                "Call load_state before the first training operation.",
                code="validation.already_initialized",
            )
        self._core.restore(path, optimizer=optimizer)
        self._start()
        return _Future({})

    def load_state(self, path: str) -> _Future:
        self._core.enter("load_state", path=path)
        return self._load(path, optimizer=False)

    def load_state_with_optimizer(self, path: str) -> _Future:
        self._core.enter("load_state_with_optimizer", path=path)
        return self._load(path, optimizer=True)

    def save_weights_and_get_sampling_client(self) -> _PyTrioSampling:
        self._core.enter("save_weights_and_get_sampling_client")
        self._start()
        return _PyTrioSampling(self._core, self._core.local.save_weights_and_get_sampling_client())

    def get_tokenizer(self) -> Any:
        self._core.enter("get_tokenizer")
        return self._core.local.get_tokenizer()


class RecordingPyTrioService(_StubService):
    """A stub ``pytrio.ServiceClient`` on the real pytrio types, delegating to a local training client.

    Args:
        local: a :class:`~tempo_rl.backends.local.LocalTrainingClient` that does the maths.
        models: the model ids :meth:`get_server_capabilities` lists (with the limits below).
        max_seq_len: the per-sample training limit reported by :meth:`get_server_capabilities` and enforced
            by ``forward_backward`` (None: none).
        max_tokens_per_request: the per-request training limit reported (None: none).
    """

    def __init__(
        self,
        local: Any,
        *,
        models: Sequence[str] = (),
        max_seq_len: int | None = None,
        max_tokens_per_request: int | None = None,
    ) -> None:
        from tempo_rl.backends.pytrio import import_pytrio

        self._core = _Core(local, import_pytrio().types, "pytrio")
        self.max_seq_len = max_seq_len
        self.max_tokens_per_request = max_tokens_per_request
        self.models: list[str] = list(models)

    def _limits(self) -> Any:
        from pytrio.model.limits import TrainingLimits

        return TrainingLimits(
            max_batch_size=None,
            max_tokens_per_request=self.max_tokens_per_request,
            max_seq_len=self.max_seq_len,
        )

    def get_server_capabilities(self) -> Any:
        self._core.enter("get_server_capabilities")
        t = self._core.types
        ops = {
            "available": True,
            "max_batch_size": None,
            "max_tokens_per_request": self.max_tokens_per_request,
            "max_seq_len": self.max_seq_len,
        }
        return t.GetServerCapabilitiesResponse(
            supported_models=[
                t.SupportedModel(
                    model_name=m,
                    max_context_length=None,
                    training=t.ModelOperationCapabilities(**ops),
                    sampling=t.ModelOperationCapabilities(**ops),
                )
                for m in self.models
            ]
        )

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
    ) -> _PyTrioTraining:
        self._core.enter("create_lora_training_client", base_model=base_model, rank=rank, seed=seed)
        self._core.check_lora(base_model, rank, 4, 64)
        return _PyTrioTraining(self._core, base_model, self._limits())

    def _from_state(self, path: str, *, optimizer: bool) -> _PyTrioTraining:
        if path not in self._core.paths:
            raise self._core.fail(f"unknown checkpoint path {path!r}; pass a path returned by save_state")
        client = _PyTrioTraining(self._core, "stub", self._limits())
        self._core.restore(path, optimizer=optimizer)
        return client

    def create_training_client_from_state(self, path: str) -> _PyTrioTraining:
        self._core.enter("create_training_client_from_state", path=path)
        return self._from_state(path, optimizer=False)

    def create_training_client_from_state_with_optimizer(self, path: str) -> _PyTrioTraining:
        self._core.enter("create_training_client_from_state_with_optimizer", path=path)
        return self._from_state(path, optimizer=True)


# ------------------------------------------------------------------------------------------------ Tinker
class _TinkerSampling(_StubSampling):
    def _response(self, res: Any) -> Any:
        t = self._core.types
        return t.SampleResponse(
            sequences=[
                t.SampledSequence(
                    stop_reason=s.stop_reason,
                    sequence_id=str(i),
                    tokens_np=np.asarray(s.tokens, dtype=np.int64),
                    logprobs_np=np.asarray(s.logprobs, dtype=np.float32),
                )
                for i, s in enumerate(res.sequences)
            ]
        )

    def sample(self, prompt: Any, num_samples: int, sampling_params: Any, **kwargs: Any) -> _Future:
        hang = self._core.enter("sample", num_samples=num_samples)
        if "return_text" in kwargs:
            raise self._core.fail("tinker's sample has no return_text argument")
        ids, n, sp = self._core.check_sample(prompt, num_samples, sampling_params)
        return _Future(hang=True) if hang else _Future(self._response(self._local.sample(ids, n, sp)))

    async def sample_async(self, prompt: Any, num_samples: int, sampling_params: Any, **kwargs: Any) -> Any:
        warnings.warn(
            "DEPRECATED: SamplingClient.sample_async() is deprecated (tinker 0.38); use `await sample(...)`",
            FutureWarning,
            stacklevel=2,
        )
        return await self.sample(prompt, num_samples, sampling_params, **kwargs)

    async def compute_logprobs_async(self, prompt: Any) -> list[float | None]:
        warnings.warn(
            "DEPRECATED: SamplingClient.compute_logprobs_async() is deprecated (tinker 0.38); use "
            "`await compute_logprobs(...)`",
            FutureWarning,
            stacklevel=2,
        )
        out: list[float | None] = await self.compute_logprobs(prompt)
        return out


class _TinkerTraining:
    """tinker.TrainingClient's API and state rules over the delegate."""

    def __init__(self, core: _Core) -> None:
        self._core = core
        self._run = core.new_run()

    def forward_backward(self, data: Any, loss_fn: str, loss_fn_config: Any = None) -> _Future:
        hang = self._core.enter(
            "forward_backward", n=len(data) if isinstance(data, list) else -1, loss_fn=loss_fn
        )
        ours = self._core.check_datums(data, loss_fn, loss_fn_config)
        self._run.started = True
        if hang:
            return _Future(hang=True)
        out = self._core.local.forward_backward(ours, loss_fn, loss_fn_config)
        return _Future(
            self._core.types.ForwardBackwardOutput(
                loss_fn_output_type="stub", loss_fn_outputs=[], metrics={"loss:sum": out.loss}
            )
        )

    def optim_step(self, optim_params: Any = None, *, adam_params: Any = None) -> _Future:
        hang = self._core.enter("optim_step")
        if optim_params is not None:
            raise self._core.fail(
                "tempo-rl passes adam_params= (tinker's optim_params is for other optimizers)"
            )
        ap = self._core.our_adam(adam_params)
        self._run.started = True
        if hang:
            return _Future(hang=True)
        self._core.local.optim_step(ap)
        return _Future(self._core.types.OptimStepResponse(metrics={}))

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> _Future:
        self._core.enter("save_state", name=name)
        uri = self._core.save(self._run, name, overwrite, "tinker")
        return _Future(self._core.types.SaveWeightsResponse(path=uri))

    def _load(self, method: str, path: str, *, optimizer: bool) -> _Future:
        warnings.warn(_TINKER_LOAD_STATE_DEPRECATED, FutureWarning, stacklevel=3)
        self._core.enter(method, path=path)
        self._core.restore(path, optimizer=optimizer)
        return _Future(self._core.types.LoadWeightsResponse(path=path))

    def load_state(self, path: str, weights_access_token: str | None = None) -> _Future:
        return self._load("load_state", path, optimizer=False)

    def load_state_with_optimizer(self, path: str, weights_access_token: str | None = None) -> _Future:
        return self._load("load_state_with_optimizer", path, optimizer=True)

    def save_weights_and_get_sampling_client(self, name: str | None = None, **kwargs: Any) -> _Future:
        if name is not None:
            warnings.warn(
                "The 'name' parameter of save_weights_and_get_sampling_client() is deprecated and has no "
                "effect (tinker 0.38)",
                DeprecationWarning,
                stacklevel=2,
            )
        self._core.enter("save_weights_and_get_sampling_client", name=name)
        self._run.started = True
        return _Future(_TinkerSampling(self._core, self._core.local.save_weights_and_get_sampling_client()))

    def get_tokenizer(self) -> Any:
        self._core.enter("get_tokenizer")
        return self._core.local.get_tokenizer()


class RecordingTinkerService(_StubService):
    """A stub ``tinker.ServiceClient`` on the real tinker types, delegating to a local training client."""

    def __init__(self, local: Any) -> None:
        from tempo_rl._optional import require

        self._core = _Core(local, require("tinker", "tinker").types, "tinker")

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        **kwargs: Any,
    ) -> _Future:
        self._core.enter("create_lora_training_client", base_model=base_model, rank=rank, seed=seed)
        self._core.check_lora(base_model, rank, 1, None)
        return _Future(_TinkerTraining(self._core))

    def _from_state(self, path: str, *, optimizer: bool) -> _Future:
        if path not in self._core.paths:
            raise self._core.fail(f"unknown checkpoint path {path!r}")
        client = _TinkerTraining(self._core)
        self._core.restore(path, optimizer=optimizer)
        return _Future(client)

    def create_training_client_from_state(self, path: str, **kwargs: Any) -> _Future:
        self._core.enter("create_training_client_from_state", path=path)
        return self._from_state(path, optimizer=False)

    def create_training_client_from_state_with_optimizer(self, path: str, **kwargs: Any) -> _Future:
        self._core.enter("create_training_client_from_state_with_optimizer", path=path)
        return self._from_state(path, optimizer=True)


def summarize(calls: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    """Count calls per method (handy in assertions)."""
    out: dict[str, int] = {}
    for m, _ in calls:
        out[m] = out.get(m, 0) + 1
    return out
