"""An in-process PyTRIO service at the HTTP transport, under the **real** pytrio 0.2.9 client code.

:func:`install_http` replaces ``httpx.AsyncHTTPTransport.handle_async_request`` (the transport of every
``httpx.AsyncClient`` pytrio opens) with :class:`HttpService`, which speaks pytrio's wire protocol: Control
(JSON under ``api/openapi/v1/...``: API-key check, SDK bootstrap, service session, model catalogue, training and
sampling runs, checkpoint lookups) and the Actor (``v1/events`` MessagePack envelopes answered with event
responses, ``v1/sampling-runs/<id>/sample``, ``v1/client/heartbeat``). Everything above the transport is
pytrio's own: ``ServiceClient()`` (authentication, session), ``create_lora_training_client`` and
``create_training_client_from_state_with_optimizer``, ``TrainingClient``'s lazy trainer initialisation and its
``load_state`` rule (``validation.already_initialized``), ``plan_training_batch`` (vocabulary, per-sample limits,
normalisation totals), the payload builders (checkpoint-name rule), the run coordinators, and the response
parsing (strict protocol models for event, forward, save and sample results). The trainer and sampler
(:class:`FakeTrainer`, :class:`FakeSampler`) delegate the maths to a
:class:`~tempo_rl.backends.local.LocalTrainingClient`.

The service rules it adds are the server's: a checkpoint name is unique within a training run unless
``overwrite``; an init from a checkpoint restores Adam only with ``load_optimizer``.
"""

from __future__ import annotations

import itertools
import json
import threading
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from tempo_rl.backends.types import AdamParams, Datum, SamplingParams

_NOW = datetime(2026, 1, 1, tzinfo=UTC)


class ServiceRejected(RuntimeError):
    """What the fake server answers to a request the real one refuses (non-retryable)."""

    status_code = 409
    retryable = False


def _done(value: Any) -> Any:
    from pytrio.types.future.api_future import APIFuture

    f: Future[Any] = Future()
    f.set_result(value)
    return APIFuture(f)


def _failed(error: BaseException) -> Any:
    from pytrio.types.future.api_future import APIFuture

    f: Future[Any] = Future()
    f.set_exception(error)
    return APIFuture(f)


def _late(value: Any, delay_s: float) -> Any:
    from pytrio.types.future.api_future import APIFuture

    f: Future[Any] = Future()
    timer = threading.Timer(delay_s, f.set_result, args=(value,))
    timer.daemon = True
    timer.start()
    out = APIFuture(f)
    out._late_s = delay_s  # type: ignore[attr-defined]
    return out


def _ids(wire: Any) -> list[int]:
    return [int(t) for chunk in wire.chunks for t in chunk.tokens]


class FakeServer:
    """The server side: runs, checkpoints, limits, and the call log ``events`` (``(kind, detail)``)."""

    def __init__(self, local: Any, *, model: str = "Qwen/Qwen3-4B", max_seq_len: int | None = None) -> None:
        self.local = local
        self.model = model
        self.max_seq_len = max_seq_len
        self.events: list[tuple[str, Any]] = []
        #: seconds by which the next save's answer is late (the save itself is done at once)
        self.late_next_save = 0.0
        self.checkpoints: dict[str, dict[str, Any]] = {}  # uri -> {"file", "run", "lora"}
        self.run_names: dict[str, set[str]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)

    def next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"


class FakeControl:
    """pytrio's ``ControlHTTPClient`` methods the SDK calls, answered with pytrio's own response models."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server

    def _actor(self) -> tuple[Any, Any]:
        from pytrio.protocol.control.actor.credentials import ActorConnectionInfo, ActorJWT

        return (
            ActorConnectionInfo(
                actor_cuid="a1", endpoint="actor.invalid", connect_mode="direct", tls_enabled=False
            ),
            ActorJWT(token="jwt", expires_at=_NOW + timedelta(days=365)),
        )

    def _cap(self) -> dict[str, Any]:
        return {
            "max_batch_size": None,
            "max_tokens_per_request": None,
            "max_seq_len": self.server.max_seq_len,
        }

    async def get_models(self) -> list[Any]:
        from pytrio.protocol.control.model.list import ModelInfo

        self.server.events.append(("control", "get_models"))
        return [
            ModelInfo(
                cuid="m1",
                alias=self.server.model,
                model_id=self.server.model,
                train_available=True,
                sample_available=True,
                trainer=self._cap(),
                sampler=self._cap(),
                created_at=_NOW,
                updated_at=_NOW,
            )
        ]

    async def create_training_run(self, service_session_cuid: str, **kw: Any) -> Any:
        from pytrio.protocol.control.training_run.create import TrainingRunCreateResponse

        s = self.server
        self.server.events.append(("control", ("create_training_run", kw)))
        source = kw.get("source_checkpoint_uri") or ""
        if source and source not in s.checkpoints:
            raise ServiceRejected(f"unknown checkpoint {source}")
        model = s.checkpoints[source]["lora"]["base_model"] if source else kw["base_model"]
        if model != s.model:
            raise ServiceRejected(f"model {model} is not served")
        run = s.next_id("tr")
        s.runs[run] = {
            "lora": {
                "base_model": model,
                **{k: kw[k] for k in ("lora_rank", "train_mlp", "train_attn", "train_unembed")},
                "seed": kw.get("seed"),
            }
        }
        s.run_names[run] = set()
        actor, jwt = self._actor()
        return TrainingRunCreateResponse(
            training_run_cuid=run,
            service_session_cuid=service_session_cuid,
            workspace_cuid="w1",
            status="RUNNING",
            run_index=1,
            model_spec_cuid="ms1",
            model_alias=model,
            model_id=model,
            trainer=self._cap(),
            actor=actor,
            actor_jwt=jwt,
            created_at=_NOW,
        )

    async def find_training_run_by_checkpoint_uri(self, path: str) -> Any:
        from pytrio.protocol.control.training_run.find_by_checkpoint_uri import (
            TrainingRunFindByCheckpointURIResponse,
        )

        self.server.events.append(("control", ("find_training_run_by_checkpoint_uri", path)))
        if path not in self.server.checkpoints:
            raise ServiceRejected(f"unknown checkpoint {path}")
        return TrainingRunFindByCheckpointURIResponse(**self.server.checkpoints[path]["lora"])

    async def update_training_run(self, service_session_cuid: str, training_run_cuid: str, **kw: Any) -> Any:
        from pytrio.protocol.control.training_run.update import TrainingRunUpdateResponse

        self.server.events.append(("control", ("update_training_run", kw)))
        actor, jwt = self._actor()
        return TrainingRunUpdateResponse(
            source_checkpoint_uri=kw["source_checkpoint_uri"],
            restore_optimizer=kw["restore_optimizer"],
            trainer=self._cap(),
            actor=actor,
            actor_jwt=jwt,
        )

    async def create_sampling_run(self, service_session_cuid: str, **kw: Any) -> Any:
        from pytrio.protocol.control.sampling_run.create import SamplingRunCreateResponse

        self.server.events.append(("control", ("create_sampling_run", kw)))
        uri = kw.get("source_checkpoint_uri") or ""
        if uri and uri not in self.server.checkpoints:
            raise ServiceRejected(f"unknown sampler weights {uri}")
        actor, jwt = self._actor()
        run = self.server.next_id("sr")
        self.server.runs[run] = {"weights": uri}
        return SamplingRunCreateResponse(
            sampling_run_cuid=run,
            service_session_cuid=service_session_cuid,
            workspace_cuid="w1",
            status="RUNNING",
            run_index=1,
            model_spec_cuid="ms1",
            model_alias=self.server.model,
            model_id=self.server.model,
            sampler=self._cap(),
            actor=actor,
            actor_jwt=jwt,
            created_at=_NOW,
        )

    async def renew_training_run(self, *a: Any, **k: Any) -> None:  # leases never expire here
        return None

    async def renew_sampling_run(self, *a: Any, **k: Any) -> None:
        return None

    async def close_service_session(self, *a: Any, **k: Any) -> None:
        return None

    async def aclose(self) -> None:
        return None


class FakeTrainer:
    """An Actor training-run coordinator: pytrio's real payloads in, actor result dicts out."""

    def __init__(self, server: FakeServer, run: str) -> None:
        self.server = server
        self.run = run
        self.actor_client = None

    async def submit(self, event_type: Any, payload: Any) -> Any:
        return self._handle(event_type, payload)

    async def submit_group(self, event_type: Any, payloads: list[Any]) -> Any:
        outs = [self._handle(event_type, p).result() for p in payloads]
        return _done(outs)

    def _handle(self, event_type: Any, payload: Any) -> Any:
        from pytrio.protocol.actor.events.event import EventType

        s = self.server
        s.events.append(("actor", (self.run, event_type.value)))
        if event_type == EventType.TRAINER_INIT_RUN:
            if payload.checkpoint_uri:
                s.local.load_state(s.checkpoints[payload.checkpoint_uri]["file"])
                if not payload.load_optimizer:
                    s.local._optimizer = None  # weights only: Adam starts over
            return _done({"result": {}})
        if event_type in (EventType.TRAINER_FORWARD_BACKWARD, EventType.TRAINER_FORWARD):
            datums = []
            for d in payload.data:
                ids = _ids(d.model_input)
                inputs: dict[str, np.ndarray] = {"target_tokens": np.asarray(d.target_ids, np.int64)}
                for key in ("weights", "logprobs", "advantages"):
                    value = getattr(d, key)
                    if value is not None:
                        inputs[key] = np.asarray(value, np.float32)
                datums.append(Datum(model_input=tuple(ids), loss_fn_inputs=inputs))
            loss_cfg = dict(payload.loss.config) or None
            out = s.local.forward_backward(datums, payload.loss.type, loss_cfg)
            tokens = sum(len(d.model_input) for d in datums)
            return _done(
                {
                    "result": {
                        "loss_fn_outputs": [{} for _ in datums],
                        "metrics": {
                            "loss_sum": float(out.loss),
                            "loss_mean": float(out.loss) / tokens,
                            "token_count": tokens,
                        },
                    }
                }
            )
        if event_type == EventType.TRAINER_OPTIMIZE_STEP:
            s.local.optim_step(AdamParams(**payload.adam_params.model_dump()))
            return _done({"result": {"metrics": {}}})
        if event_type in (EventType.TRAINER_SAVE_STATE, EventType.TRAINER_SAVE_WEIGHTS):
            names = s.run_names[self.run]
            if payload.name in names and not payload.overwrite:
                return _failed(
                    ServiceRejected(f"checkpoint {payload.name!r} already exists in run {self.run}")
                )
            names.add(payload.name)
            kind = "state" if event_type == EventType.TRAINER_SAVE_STATE else "weights"
            uri = f"trio://{self.run}/{kind}/{payload.name}"
            s.checkpoints[uri] = {
                "file": s.local.save_state(f"{self.run}-{kind}-{payload.name}"),
                "lora": s.runs[self.run]["lora"],
            }
            answer = {"result": {"checkpoint": {"uri": uri, "model_id": s.model, "size_bytes": 1}}}
            if event_type == EventType.TRAINER_SAVE_STATE and s.late_next_save > 0:
                delay, s.late_next_save = s.late_next_save, 0.0
                return _late(answer, delay)
            return _done(answer)
        raise AssertionError(f"unexpected trainer event {event_type}")


class FakeSampler:
    """An Actor sampling-run coordinator over a snapshot of the weights it was created on."""

    def __init__(self, server: FakeServer, weights: str) -> None:
        self.server = server
        if weights:
            current = server.local.save_state("fake-sampler-swap")
            server.local.load_state(server.checkpoints[weights]["file"])
            self.local = server.local.save_weights_and_get_sampling_client()
            server.local.load_state(current)
        else:
            self.local = server.local.save_weights_and_get_sampling_client()

    async def submit(self, request: Any) -> Any:
        from pytrio.protocol.actor.sampling_run.sample import ActorSampleResponse

        self.server.events.append(("actor", ("sample", request.num_samples)))
        ids = _ids(request.prompt)
        if request.return_prompt_logprobs:
            return _done(ActorSampleResponse(prompt_logprobs=self.local.compute_logprobs(ids)))
        sp = request.sampling_params
        stop = sp.get("stop")
        res = await self.local.sample_async(
            ids,
            request.num_samples,
            SamplingParams(
                max_tokens=int(sp["max_tokens"]),
                temperature=float(sp.get("temperature", 1.0)),
                top_p=float(sp.get("top_p", 1.0)),
                top_k=int(sp.get("top_k", -1)),
                seed=sp.get("seed"),
                stop=tuple(stop) if stop else None,
            ),
        )
        return _done(
            ActorSampleResponse(
                sequences=[
                    {
                        "tokens": list(q.tokens),
                        "text": q.text,
                        "logprobs": list(q.logprobs),
                        "stop_reason": q.stop_reason,
                    }
                    for q in res.sequences
                ]
            )
        )


# ------------------------------------------------------------------------------------------- HTTP transport
class HttpService:
    """The same :class:`FakeServer` behind pytrio's HTTP wire protocol: Control (JSON, ``openapi/v1/...``) and
    the Actor (``v1/events`` MessagePack envelopes answered with JSON event responses, ``v1/sampling-runs/
    <id>/sample``, ``v1/client/heartbeat``). With :func:`install_http` pytrio's own ``ServiceClient()`` runs
    unchanged, authentication, session, coordinators and heartbeats included."""

    ACTOR_HOST = "actor.test"

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.control = FakeControl(server)
        self.trainers: dict[str, FakeTrainer] = {}
        self.samplers: dict[str, FakeSampler] = {}
        self.errors: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.control._actor = self._actor  # type: ignore[method-assign]

    def _actor(self) -> tuple[Any, Any]:
        from pytrio.protocol.control.actor.credentials import ActorConnectionInfo, ActorJWT

        return (
            ActorConnectionInfo(
                actor_cuid="a1",
                endpoint=f"http://{self.ACTOR_HOST}",
                connect_mode="direct",
                tls_enabled=False,
            ),
            ActorJWT(token="jwt", expires_at=_NOW + timedelta(days=365)),
        )

    async def handle(self, request: Any) -> Any:
        import httpx

        path = request.url.path.lstrip("/")
        self.requests.append((request.method, path))
        try:
            if request.url.host == self.ACTOR_HOST:
                status, body = await self._actor_route(request, path)
            else:
                status, body = await self._control_route(request, path.removeprefix("api/"))
        except ServiceRejected as exc:
            return httpx.Response(409, json={"code": "conflict", "message": str(exc)}, request=request)
        except Exception as exc:  # a bug of the fake: answer 400 so that pytrio does not retry it
            self.errors.append(f"{request.method} {path}: {type(exc).__name__}: {exc}")
            return httpx.Response(400, json={"code": "fake_error", "message": repr(exc)}, request=request)
        return httpx.Response(status, json=body, request=request)

    async def _control_route(self, request: Any, path: str) -> tuple[int, Any]:
        from pytrio.protocol.control.model.list import ModelListResponse

        body = json.loads(request.content) if request.content else {}
        parts = path.split("/")
        if path.endswith("api-key/verify"):
            return 200, {
                "api_key_tid": "k1", "api_key_name": "test", "user_cuid": "u1", "username": "tester",
                "display_name": None, "workspace_cuid": "w1", "workspace_name": "test", "workspace_type": "personal",
                "expires_at": None,
            }  # fmt: skip
        if path.endswith("sdk/bootstrap"):
            version = request.url.params.get("sdk_version", "0")
            return 200, {"compatibility": {"status": "compatible", "sdk_version": version}, "notices": []}
        if path.endswith("models"):
            models = await self.control.get_models()
            return 200, ModelListResponse(items=models, total=len(models), limit=100, offset=0).model_dump(
                mode="json"
            )
        if path.endswith("service-sessions") and request.method == "POST":
            return 200, {
                "service_session_cuid": "ss1",
                "workspace_cuid": "w1",
                "status": "ACTIVE",
                "created_at": _NOW.isoformat(),
            }
        if path.endswith("training-runs/by-checkpoint-uri"):
            out = await self.control.find_training_run_by_checkpoint_uri(request.url.params["checkpoint_uri"])
            return 200, out.model_dump(mode="json")
        if len(parts) >= 6 and parts[-2] == "training-runs" and request.method == "PATCH":
            out = await self.control.update_training_run(parts[-3], parts[-1], **body)
            return 200, out.model_dump(mode="json")
        if path.endswith("/training-runs") and request.method == "POST":
            out = await self.control.create_training_run(parts[-2], **body)
            self.trainers[out.training_run_cuid] = FakeTrainer(self.server, out.training_run_cuid)
            return 200, out.model_dump(mode="json")
        if path.endswith("/sampling-runs") and request.method == "POST":
            out = await self.control.create_sampling_run(parts[-2], **body)
            run = out.sampling_run_cuid
            self.samplers[run] = FakeSampler(self.server, self.server.runs[run]["weights"])
            return 200, out.model_dump(mode="json")
        if path.endswith("/close"):
            return 200, {"service_session_cuid": parts[-2], "status": "ENDED"}
        raise AssertionError(f"no control route for {request.method} {path}")

    async def _actor_route(self, request: Any, path: str) -> tuple[int, Any]:
        import msgpack
        from pytrio.protocol.actor.events.event import EventType
        from pytrio.protocol.actor.events.trainer.forward import TrainerForwardBackwardPayload
        from pytrio.protocol.actor.events.trainer.init_run import TrainerInitRunPayload
        from pytrio.protocol.actor.events.trainer.optimize_step import TrainerOptimizeStepPayload
        from pytrio.protocol.actor.events.trainer.save import TrainerSavePayload
        from pytrio.protocol.actor.sampling_run.sample import SampleRequest

        if path == "v1/client/heartbeat":
            return 200, {"status": "ok"}
        if path.startswith("v1/sampling-runs/") and path.endswith("/sample"):
            sampler = self.samplers[path.split("/")[2]]
            request_model = SampleRequest.model_validate(json.loads(request.content))
            answer = await sampler.submit(request_model)
            return 200, answer.result().model_dump(mode="json")
        if path == "v1/events":
            envelope = msgpack.unpackb(request.content, raw=False)
            event_type = EventType(envelope["type"])
            models = {
                EventType.TRAINER_INIT_RUN: TrainerInitRunPayload,
                EventType.TRAINER_FORWARD_BACKWARD: TrainerForwardBackwardPayload,
                EventType.TRAINER_FORWARD: TrainerForwardBackwardPayload,
                EventType.TRAINER_OPTIMIZE_STEP: TrainerOptimizeStepPayload,
                EventType.TRAINER_SAVE_STATE: TrainerSavePayload,
                EventType.TRAINER_SAVE_WEIGHTS: TrainerSavePayload,
            }
            payload = models[event_type].model_validate(envelope["payload"])
            trainer = self.trainers[envelope["metadata"]["run_id"]]
            base = {
                "version": envelope["version"],
                "event_id": envelope["event_id"],
                "type": event_type.value,
            }
            usage = {"input_tokens": 0, "output_tokens": 0}
            future = trainer._handle(event_type, payload)
            delay = getattr(future, "_late_s", 0.0)
            if delay:
                import asyncio

                await asyncio.sleep(delay)
            try:
                answer = future.result(timeout=delay + 5.0)
            except ServiceRejected as exc:
                return 200, {
                    **base,
                    "status": "failed",
                    "error": {"code": "conflict", "message": str(exc)},
                    "usage": usage,
                }
            return 200, {**base, "status": "succeeded", "result": answer["result"], "usage": usage}
        raise AssertionError(f"no actor route for {request.method} {path}")


def install_http(monkeypatch: Any, server: FakeServer) -> HttpService:
    """Route every ``httpx.AsyncClient`` request of this process to ``server`` (pytrio's transport)."""
    import httpx

    service = HttpService(server)

    async def handle_async_request(self: Any, request: Any) -> Any:
        await request.aread()
        return await service.handle(request)

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", handle_async_request)
    return service
