"""Recording stubs of the PyTRIO and Tinker service clients, for offline tests and CI examples.

PyTRIO and Tinker have no offline mode (their ``ServiceClient`` authenticates over HTTPS when constructed), so
tempo-rl is tested against these stubs, which:

* expose the SDKs' method names and signatures (``create_lora_training_client``, ``forward_backward(data,
  loss_fn, loss_fn_config, auto_shift)``, ``optim_step``, ``save_state``, ``sample(prompt, num_samples,
  sampling_params, ...)``, futures with ``.result(timeout)``, ...);
* accept only the SDKs' *real* pydantic types (``Datum``, ``ModelInput``, ``TensorData``, ``SamplingParams``,
  ``AdamParams``) and check every call's shapes and arguments like the service would (dtypes, lengths
  ``== len(model_input)``, the inputs each loss needs, token ids ``< len(tokenizer)``, LoRA rank bounds,
  checkpoint-name rule, ``max_tokens`` set, ``auto_shift=False``), raising :class:`StubCallError` otherwise;
* record every call in ``service.calls`` as ``(method, summary)``;
* delegate the maths to a :class:`~tempo_rl.backends.local.LocalTrainingClient`, so a whole training loop
  ("ALFWorld on PyTRIO") runs offline with real learning;
* can inject failures: ``service.fail_next("sample", ConnectionError("reset"))`` makes the next ``sample``
  raise, and ``service.hang_next("forward_backward")`` returns a future that never completes.

Usage::

    training, sampling = create_clients(PyTrioBackendConfig(base_model="stub"), service_client=
                                        RecordingPyTrioService(local_training_client))
"""

from __future__ import annotations

import concurrent.futures
import re
from collections import defaultdict, deque
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from tempo_rl.backends.remote import from_service_datum
from tempo_rl.backends.types import AdamParams, SamplingParams
from tempo_rl.backends.validation import LOSS_INPUTS

__all__ = ["RecordingPyTrioService", "RecordingTinkerService", "StubCallError"]

_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_-])?$")


class StubCallError(AssertionError):
    """A call the real service would reject (wrong type, shape, argument); the message says which."""


class _Future:
    """A completed (or never-completing) future with the SDKs' ``result(timeout)`` API."""

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


class _Core:
    """State shared by one stub service and its clients: the delegate, the call log and injected faults."""

    def __init__(self, local: Any, types: ModuleType, name: str) -> None:
        self.local = local
        self.types = types
        self.name = name
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.faults: defaultdict[str, deque[BaseException | None]] = defaultdict(deque)
        self.paths: dict[str, str] = {}
        self.vocab_size = len(local.get_tokenizer())

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
        return AdamParams(
            learning_rate=ap.learning_rate,
            beta1=ap.beta1,
            beta2=ap.beta2,
            eps=ap.eps,
            weight_decay=ap.weight_decay,
            grad_clip_norm=ap.grad_clip_norm,
        )

    def check_name(self, name: Any) -> str:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise self.fail(f"checkpoint name {name!r} does not match {_NAME_RE.pattern}")
        return name


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


# ------------------------------------------------------------------------------------------------ PyTRIO
class _PyTrioSampling:
    def __init__(self, core: _Core, local_sampler: Any) -> None:
        self._core, self._local = core, local_sampler

    def _sample(
        self, prompt: Any, num_samples: Any, sampling_params: Any, return_text: Any
    ) -> tuple[list[int], int, SamplingParams]:
        ids = self._core.check_model_input(prompt, "prompt")
        if not isinstance(num_samples, int) or num_samples < 1:
            raise self._core.fail(f"num_samples must be a positive int, got {num_samples!r}")
        if return_text is not True:
            raise self._core.fail("tempo-rl must request return_text=True")
        return ids, num_samples, self._core.our_sampling_params(sampling_params)

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
        ids, n, sp = self._sample(prompt, num_samples, sampling_params, return_text)
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
        ids, n, sp = self._sample(prompt, num_samples, sampling_params, return_text)
        if hang:
            import asyncio

            await asyncio.Event().wait()
        return self._response(await self._local.sample_async(ids, n, sp))

    def compute_logprobs(self, prompt: Any) -> _Future:
        hang = self._core.enter("compute_logprobs")
        ids = self._core.check_model_input(prompt, "prompt")
        return _Future(hang=True) if hang else _Future(self._local.compute_logprobs(ids))

    async def compute_logprobs_async(self, prompt: Any) -> list[float | None]:
        self._core.enter("compute_logprobs_async")
        ids = self._core.check_model_input(prompt, "prompt")
        result: list[float | None] = await self._local.compute_logprobs_async(ids)
        return result

    def get_tokenizer(self) -> Any:
        return self._core.local.get_tokenizer()


class _PyTrioTraining:
    def __init__(self, core: _Core) -> None:
        self._core = core

    def forward_backward(
        self, data: Any, loss_fn: str = "cross_entropy", loss_fn_config: Any = None, auto_shift: bool = False
    ) -> _Future:
        hang = self._core.enter(
            "forward_backward", n=len(data) if isinstance(data, list) else -1, loss_fn=loss_fn
        )
        if auto_shift is not False:
            raise self._core.fail("tempo-rl shifts tokens itself: auto_shift must be False")
        ours = self._core.check_datums(data, loss_fn, loss_fn_config)
        if hang:
            return _Future(hang=True)
        out = self._core.local.forward_backward(ours, loss_fn, loss_fn_config)
        t = self._core.types
        return _Future(t.ForwardBackwardOutput(loss_fn_outputs=[], metrics={"loss:sum": out.loss}))

    def optim_step(self, adam_params: Any) -> _Future:
        hang = self._core.enter("optim_step")
        ap = self._core.our_adam(adam_params)
        if hang:
            return _Future(hang=True)
        self._core.local.optim_step(ap)
        return _Future(self._core.types.OptimStepResponse(metrics={}))

    def save_state(self, name: str, ttl_seconds: int | None = None, overwrite: bool = False) -> _Future:
        self._core.enter("save_state", name=name)
        self._core.check_name(name)
        local_path = self._core.local.save_state(name)
        uri = f"trio://stub-run/state/{name}"
        self._core.paths[uri] = local_path
        return _Future(self._core.types.SaveWeightsResponse(path=uri, model="stub", size=1))

    def load_state(self, path: str) -> _Future:
        self._core.enter("load_state", path=path)
        if path not in self._core.paths:
            raise self._core.fail(f"unknown checkpoint path {path!r}; pass a path returned by save_state")
        self._core.local.load_state(self._core.paths[path])
        return _Future({"path": path})

    def save_weights_and_get_sampling_client(self) -> _PyTrioSampling:
        self._core.enter("save_weights_and_get_sampling_client")
        return _PyTrioSampling(self._core, self._core.local.save_weights_and_get_sampling_client())

    def get_tokenizer(self) -> Any:
        self._core.enter("get_tokenizer")
        return self._core.local.get_tokenizer()


class RecordingPyTrioService(_StubService):
    """A stub ``pytrio.ServiceClient`` on the real pytrio types, delegating to a local training client.

    Args:
        local: a :class:`~tempo_rl.backends.local.LocalTrainingClient` that does the maths.
    """

    def __init__(self, local: Any) -> None:
        from tempo_rl.backends.pytrio import import_pytrio

        self._core = _Core(local, import_pytrio().types, "pytrio")

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
        if not isinstance(base_model, str) or not base_model:
            raise self._core.fail("base_model must be a non-empty model id")
        if not isinstance(rank, int) or not 4 <= rank <= 64:
            raise self._core.fail(f"LoRA rank must be an int in [4, 64], got {rank!r}")
        return _PyTrioTraining(self._core)


# ------------------------------------------------------------------------------------------------ Tinker
class _TinkerSampling:
    def __init__(self, core: _Core, local_sampler: Any) -> None:
        self._core, self._local = core, local_sampler

    def _args(
        self, prompt: Any, num_samples: Any, sampling_params: Any
    ) -> tuple[list[int], int, SamplingParams]:
        ids = self._core.check_model_input(prompt, "prompt")
        if not isinstance(num_samples, int) or num_samples < 1:
            raise self._core.fail(f"num_samples must be a positive int, got {num_samples!r}")
        return ids, num_samples, self._core.our_sampling_params(sampling_params)

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
        ids, n, sp = self._args(prompt, num_samples, sampling_params)
        return _Future(hang=True) if hang else _Future(self._response(self._local.sample(ids, n, sp)))

    async def sample_async(self, prompt: Any, num_samples: int, sampling_params: Any, **kwargs: Any) -> Any:
        self._core.enter("sample_async", num_samples=num_samples)
        if "return_text" in kwargs:
            raise self._core.fail("tinker's sample_async has no return_text argument")
        ids, n, sp = self._args(prompt, num_samples, sampling_params)
        return self._response(await self._local.sample_async(ids, n, sp))

    def compute_logprobs(self, prompt: Any) -> _Future:
        self._core.enter("compute_logprobs")
        return _Future(self._local.compute_logprobs(self._core.check_model_input(prompt, "prompt")))

    async def compute_logprobs_async(self, prompt: Any) -> list[float | None]:
        self._core.enter("compute_logprobs_async")
        out: list[float | None] = await self._local.compute_logprobs_async(
            self._core.check_model_input(prompt, "prompt")
        )
        return out


class _TinkerTraining:
    def __init__(self, core: _Core) -> None:
        self._core = core

    def forward_backward(self, data: Any, loss_fn: str, loss_fn_config: Any = None) -> _Future:
        hang = self._core.enter(
            "forward_backward", n=len(data) if isinstance(data, list) else -1, loss_fn=loss_fn
        )
        ours = self._core.check_datums(data, loss_fn, loss_fn_config)
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
        if hang:
            return _Future(hang=True)
        self._core.local.optim_step(ap)
        return _Future(self._core.types.OptimStepResponse(metrics={}))

    def save_state(self, name: str, ttl_seconds: int | None = None, **kwargs: Any) -> _Future:
        self._core.enter("save_state", name=name)
        self._core.check_name(name)
        uri = f"tinker://stub-run/weights/{name}"
        self._core.paths[uri] = self._core.local.save_state(name)
        return _Future(self._core.types.SaveWeightsResponse(path=uri))

    def load_state(self, path: str, weights_access_token: str | None = None) -> _Future:
        self._core.enter("load_state", path=path)
        if path not in self._core.paths:
            raise self._core.fail(f"unknown checkpoint path {path!r}")
        self._core.local.load_state(self._core.paths[path])
        return _Future(self._core.types.LoadWeightsResponse(path=path))

    def save_weights_and_get_sampling_client(self, name: str | None = None, **kwargs: Any) -> _Future:
        self._core.enter("save_weights_and_get_sampling_client", name=name)
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
        if not isinstance(base_model, str) or not base_model:
            raise self._core.fail("base_model must be a non-empty model id")
        if not isinstance(rank, int) or rank < 1:
            raise self._core.fail(f"LoRA rank must be a positive int, got {rank!r}")
        return _Future(_TinkerTraining(self._core))


def summarize(calls: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, int]:
    """Count calls per method (handy in assertions)."""
    out: dict[str, int] = {}
    for m, _ in calls:
        out[m] = out.get(m, 0) + 1
    return out
