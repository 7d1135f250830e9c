"""An in-process Tinker service at the HTTP transport, under the **real** tinker 0.38.0 client code.

:func:`install` replaces ``httpx.AsyncHTTPTransport.handle_async_request`` (the transport every tinker client
sends through) with :class:`FakeTinker`'s handler, so everything above it is tinker's own: ``ServiceClient``,
its session and heartbeat, ``TrainingClient``'s request ordering and chunking, the protobuf encoding of
``forward_backward`` and the protobuf decoding of sample and forward results, the futures protocol
(``retrieve_future``), the deprecation warnings. The server's answers are the JSON / protobuf bodies tinker
parses; the maths is a :class:`~tempo_rl.backends.local.LocalTrainingClient`'s. Server rules it applies: a
checkpoint name is unique within a training run unless ``overwrite``; ``load_weights`` restores Adam only with
``optimizer``.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import numpy as np
from tinker.proto import tinker_public_pb2 as pb

from tempo_rl.backends.types import AdamParams, Datum, SamplingParams


class Proto:
    """A protobuf-encoded answer (tinker reads SampleResponse and ForwardBackwardOutput only as proto)."""

    def __init__(self, data: bytes) -> None:
        self.data = data


CLIENT_CONFIG = {
    "pjwt_auth_enabled": False,
    "credential_default_source": "api_key",
    "sample_dispatch_bytes_semaphore_size": 10**9,
    "inflight_response_bytes_semaphore_size": 10**9,
    "parallel_fwdbwd_chunks": False,
    "proto_compress_fwdbwd": False,
    "fwdbwd_max_chunk_len": 1024,
    "fwdbwd_max_chunk_bytes_count": 10**9,
    "fwdbwd_dispatch_bytes_semaphore_size": 10**9,
    "billing_exception_max_pause_duration_sec": 0,
    "sample_no_retries": False,
    "sample_enable_stuck_detection": False,
    "sample_max_concurrent_requests": 64,
    "use_pyqwest_transport": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": False,
}


def _ints(model_input: dict[str, Any]) -> list[int]:
    return [int(t) for c in model_input["chunks"] for t in c["tokens"]]


def _array(td: dict[str, Any]) -> np.ndarray:
    return np.asarray(td["data"], dtype=np.int64 if td["dtype"] == "int64" else np.float32)


class FakeTinker:
    """Answers tinker's REST calls; the maths is a LocalTrainingClient's. ``events``: ``(path, body)``."""

    def __init__(self, local: Any, model: str = "Qwen/Qwen3-4B-Instruct-2507") -> None:
        self.local = local
        self.model = model
        self.events: list[tuple[str, Any]] = []
        self.errors: list[str] = []
        self.results: dict[str, Any] = {}
        self.checkpoints: dict[str, str] = {}
        self.names: dict[str, set[str]] = {}
        self.samplers: dict[str, Any] = {}
        self._ids = itertools.count(1)

    def _future(self, result: Any, model_id: str | None = None, samples: int | None = None) -> dict[str, Any]:
        rid = f"req-{next(self._ids)}"
        self.results[rid] = result
        out: dict[str, Any] = {"request_id": rid, "model_id": model_id}
        if samples is not None:
            out["sample_sequence_ids"] = [f"{rid}-{i}" for i in range(samples)]
        return out

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api/v1/")
        ctype = request.headers.get("content-type", "")
        if "protobuf" in ctype and path == "forward_backward":
            body = self._forward_backward_body(request.content)
        elif request.content and "json" not in ctype:
            self.events.append((path, f"unexpected {ctype}"))
            return httpx.Response(415, json={"detail": f"fake tinker: {ctype}"}, request=request)
        else:
            body = json.loads(request.content) if request.content else {}
        self.events.append((path, body))
        if path.startswith("sessions/") and path.endswith("/finish"):
            path = "finish_session"
        out = getattr(self, "do_" + path.replace("/", "_"), None)
        if out is None:
            return httpx.Response(404, json={"detail": f"fake tinker: no {path}"}, request=request)
        try:
            payload = out(body)
        except Exception as exc:  # a bug of the fake: fail loudly, do not let tinker retry it forever
            self.errors.append(f"{path}: {type(exc).__name__}: {exc}")
            return httpx.Response(400, json={"detail": f"fake tinker: {exc!r}"}, request=request)
        if isinstance(payload, Proto):
            return httpx.Response(
                200, content=payload.data, headers={"content-type": "application/x-protobuf"}, request=request
            )
        return httpx.Response(200, json=payload, request=request)

    @staticmethod
    def _forward_backward_body(content: bytes) -> dict[str, Any]:
        """tinker sends forward_backward as protobuf: decoded into the JSON request's shape."""
        msg = pb.ForwardBackwardRequest()
        msg.ParseFromString(content)
        np_dtype = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}
        data = []
        for d in msg.data:
            tokens = [int(t) for c in d.model_input for t in np.frombuffer(c.encoded_text.tokens, np.int32)]
            inputs = {
                name: {
                    "data": np.frombuffer(t.dense, np_dtype[t.dtype]).tolist(),
                    "dtype": "int64" if t.dtype in (pb.DTYPE_INT64, pb.DTYPE_INT32) else "float32",
                }
                for name, t in d.loss_fn_inputs.items()
            }
            data.append({"model_input": {"chunks": [{"tokens": tokens}]}, "loss_fn_inputs": inputs})
        config = {k: v for k, v in msg.loss_fn_config.items()} or None
        return {
            "model_id": msg.model_id,
            "seq_id": msg.seq_id,
            "forward_backward_input": {"data": data, "loss_fn": msg.loss_fn, "loss_fn_config": config},
        }

    # ---- session
    def do_client_config(self, body: Any) -> Any:
        return CLIENT_CONFIG

    def do_client_dynamic_config(self, body: Any) -> Any:
        return {
            "refresh_interval_sec": 3600,
            "sample_cancel_enabled": False,
            "sample_cancel_max_batch_size": 1,
        }

    def do_create_session(self, body: Any) -> Any:
        return {"type": "create_session", "session_id": "sess-1"}

    def do_session_heartbeat(self, body: Any) -> Any:
        return {"type": "session_heartbeat"}

    def do_finish_session(self, body: Any) -> Any:
        return {}

    def do_telemetry(self, body: Any) -> Any:
        return {"status": "accepted"}

    def do_retrieve_future(self, body: Any) -> Any:
        result = self.results.pop(body["request_id"])
        if isinstance(result, Exception):
            return {"error": str(result), "category": "user"}
        return result

    @staticmethod
    def _proto(message: Any) -> Proto:
        return Proto(message.SerializeToString())

    # ---- models
    def do_create_model(self, body: Any) -> Any:
        model_id = f"{body['session_id']}:train:{body['model_seq_id']}"
        self.names[model_id] = set()
        return self._future({"model_id": model_id, "type": "create_model"}, model_id)

    def do_get_info(self, body: Any) -> Any:
        return {
            "type": "get_info",
            "model_data": {"arch": "qwen3", "model_name": self.model, "tokenizer_id": self.model},
            "model_id": body["model_id"],
            "is_lora": True,
            "lora_rank": 8,
            "model_name": self.model,
        }

    # ---- training
    def do_forward_backward(self, body: Any) -> Any:
        fb = body["forward_backward_input"]
        datums = [
            Datum(
                model_input=tuple(_ints(d["model_input"])),
                loss_fn_inputs={k: _array(v) for k, v in d["loss_fn_inputs"].items()},
            )
            for d in fb["data"]
        ]
        out = self.local.forward_backward(datums, fb["loss_fn"], fb.get("loss_fn_config"))
        msg = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
        msg.metrics["loss:sum"] = float(out.loss)
        return self._future(self._proto(msg))

    def do_optim_step(self, body: Any) -> Any:
        p = body.get("optim_params") or body["adam_params"]
        self.local.optim_step(
            AdamParams(
                **{
                    k: p[k]
                    for k in ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")
                    if k in p
                }
            )
        )
        return self._future({"metrics": {}})

    def do_save_weights(self, body: Any) -> Any:
        model_id, name = body["model_id"], body["path"]
        if name in self.names[model_id] and not body.get("overwrite"):
            return self._future(RuntimeError(f"checkpoint {name!r} already exists"))
        self.names[model_id].add(name)
        uri = f"tinker://{model_id}/weights/{name}"
        self.checkpoints[uri] = self.local.save_state(f"{model_id.replace(':', '-')}-{name}")
        return self._future({"path": uri, "type": "save_weights"})

    def do_load_weights(self, body: Any) -> Any:
        if "session_id" in body:  # a new training run from the checkpoint
            model_id = f"{body['session_id']}:train:{body['model_seq_id']}"
            self.names[model_id] = set()
        else:  # the deprecated in-place TrainingClient.load_state*
            model_id = body["model_id"]
        self.local.load_state(self.checkpoints[body["path"]])
        if not body.get("optimizer"):
            self.local._optimizer = None
        return self._future({"path": body["path"], "model_id": model_id, "type": "load_weights"})

    def do_save_weights_for_sampler(self, body: Any) -> Any:
        sid = f"samp-{next(self._ids)}"
        self.samplers[sid] = self.local.save_weights_and_get_sampling_client()
        return self._future({"path": None, "sampling_session_id": sid, "type": "save_weights_for_sampler"})

    # ---- sampling
    def do_create_sampling_session(self, body: Any) -> Any:
        sid = f"samp-{next(self._ids)}"
        self.samplers[sid] = self.local.save_weights_and_get_sampling_client()
        return {"type": "create_sampling_session", "sampling_session_id": sid}

    def do_asample(self, body: Any) -> Any:
        sampler = self.samplers[body["sampling_session_id"]]
        ids = _ints(body["prompt"])
        if body.get("prompt_logprobs"):
            lps = [float("nan") if x is None else x for x in sampler.compute_logprobs(ids)]
            msg = pb.SampleResponse(prompt_logprobs=np.asarray(lps, np.float32).tobytes())
            msg.sequences.add(stop_reason=pb.STOP_REASON_LENGTH, tokens=np.asarray([0], np.int32).tobytes())
            return self._future(self._proto(msg), samples=1)
        sp = body["sampling_params"]
        res = sampler.sample(
            ids,
            int(body.get("num_samples", 1)),
            SamplingParams(
                max_tokens=int(sp["max_tokens"]),
                temperature=float(sp.get("temperature", 1.0)),
                top_p=float(sp.get("top_p", 1.0)),
                top_k=int(sp.get("top_k", -1)),
                seed=sp.get("seed"),
            ),
        )
        msg = pb.SampleResponse()
        for q in res.sequences:
            msg.sequences.add(
                stop_reason=pb.STOP_REASON_STOP if q.stop_reason == "stop" else pb.STOP_REASON_LENGTH,
                tokens=np.asarray(q.tokens, np.int32).tobytes(),
                logprobs=np.asarray(q.logprobs, np.float32).tobytes(),
            )
        return self._future(self._proto(msg), samples=len(res.sequences))


def install(monkeypatch: Any, server: FakeTinker) -> None:
    async def handle_async_request(self: Any, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return server.handle(request)

    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", handle_async_request)
