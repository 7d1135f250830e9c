"""Env steps in a worker pool: many branches step concurrently, and a hung or crashed env fails one call only.

The trainer drives N branches with ``asyncio``; every env call (``reset``, ``step``, ``snapshot``, restore
helpers...) goes through :meth:`EnvWorkerPool.call` so that sampling for one branch overlaps env work for the
others, at most ``max_workers`` env calls run at once, and each call has a deadline.

Failure contract (both pools):

* a call that raises, exceeds ``step_timeout_s`` or loses its worker raises :class:`EnvWorkerError` (with
  ``kind`` = ``"error"`` / ``"timeout"`` / ``"crash"``) for **that call only**; the pool counts it in
  :attr:`EnvWorkerPool.stats` and carries on;
* a worker that hung or died is **replaced**; the env it held is gone or untrustworthy, so its handle gets a
  fresh env from its factory (handles made by :meth:`make_env`; the env must then be reset or restored before
  use, see :attr:`EnvHandle.generation`) or, for a wrapped env without a factory, is marked broken and every
  later call on it raises ``EnvWorkerError(kind="broken")``.

Threads (:class:`EnvWorkerPool`, the default) suit envs that release the GIL or spend their time in I/O
and C code; a Python thread cannot be killed, so a hung thread is abandoned (daemon) and a new one takes its
place. :class:`RayEnvWorkerPool` (the ``ray`` extra) runs each env in its own Ray actor, on the local host or a
cluster, and kills hung actors for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, NoReturn

from tempo_rl._optional import require

__all__ = [
    "EnvHandle",
    "EnvWorkerError",
    "EnvWorkerPool",
    "RayEnvWorkerPool",
    "RemoteEnv",
    "WorkerPoolStats",
]

FailureKind = Literal["error", "timeout", "crash", "broken"]


class EnvWorkerError(RuntimeError):
    """One env call failed (raised, timed out, lost its worker, or hit a broken handle); the pool goes on.

    Attributes:
        kind: ``"error"`` (the env method raised), ``"timeout"`` (over ``step_timeout_s``), ``"crash"`` (the
            worker process died), ``"broken"`` (the handle lost its env earlier and has no factory).
        method: the env method that was called.
    """

    def __init__(self, message: str, *, kind: FailureKind, method: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.method = method


@dataclass
class WorkerPoolStats:
    """Counters since the pool was created. ``env_seconds`` is wall time spent inside env calls."""

    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    crashes: int = 0
    replaced: int = 0
    env_seconds: float = 0.0

    @property
    def failures(self) -> int:
        """All failed calls (errors + timeouts + crashes)."""
        return self.errors + self.timeouts + self.crashes

    def as_metrics(self, prefix: str = "workers/") -> dict[str, float]:
        """The counters as slash-namespaced metrics (``{prefix}{field}``, in field order)."""
        return {f"{prefix}{f.name}": float(getattr(self, f.name)) for f in fields(self)}


class EnvHandle:
    """An env living in a pool. Create with :meth:`EnvWorkerPool.make_env` (or ``wrap`` an existing env).

    Attributes:
        generation: incremented each time the env is replaced after a failure; a caller that remembers the
            generation it reset/restored at can tell that the env is a fresh one.
        broken: why the handle can no longer be used (None while usable).
    """

    def __init__(self, factory: Callable[[], Any] | None) -> None:
        self.factory = factory
        self.generation = 0
        self.broken: str | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    def _call_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock


class _LocalHandle(EnvHandle):
    def __init__(self, env: Any, factory: Callable[[], Any] | None) -> None:
        super().__init__(factory)
        self.env = env


class _ThreadWorker:
    """A daemon thread running submitted callables one at a time."""

    _ids = itertools.count()

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.abandoned = False
        self.thread = threading.Thread(
            target=self._run, name=f"tempo-env-worker-{next(self._ids)}", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fn, loop, future = job
            try:
                outcome: tuple[bool, Any] = (True, fn())
            except BaseException as exc:  # delivered to the caller
                outcome = (False, exc)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for this result
                loop.call_soon_threadsafe(_settle, future, outcome)
            if self.abandoned:
                return

    def abandon(self) -> None:
        """Let the thread exit after its current job; its result will be dropped."""
        self.abandoned = True
        self.jobs.put(None)


def _invoke(env: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``env.name(*args, **kwargs)``, or the attribute's value when it is not callable (no args given)."""
    attr = getattr(env, name)
    if callable(attr):
        return attr(*args, **kwargs)
    if args or kwargs:
        raise TypeError(f"{type(env).__name__}.{name} is not callable; it takes no arguments")
    return attr


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class EnvWorkerPool:
    """Runs env calls on up to ``max_workers`` threads, each with a per-call timeout.

    Args:
        max_workers: the most env calls in flight at once (>= 1).
        step_timeout_s: the deadline of one call in seconds (None = no deadline).
    """

    def __init__(self, max_workers: int = 4, step_timeout_s: float | None = 60.0) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        if step_timeout_s is not None and not step_timeout_s > 0:
            raise ValueError(f"step_timeout_s must be > 0 or None, got {step_timeout_s}")
        self.max_workers = max_workers
        self.step_timeout_s = step_timeout_s
        self.stats = WorkerPoolStats()
        self._idle: list[_ThreadWorker] = []
        self._all: list[_ThreadWorker] = []
        self._slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None
        self._wrapped: weakref.WeakKeyDictionary[Any, _LocalHandle] = weakref.WeakKeyDictionary()
        self._closed = False

    # ---- handles
    def wrap(self, env: Any) -> EnvHandle:
        """A handle for an env built elsewhere (no factory: after a hang it is marked broken)."""
        try:
            handle = self._wrapped.get(env)
            if handle is None:
                handle = self._wrapped[env] = _LocalHandle(env, None)
            return handle
        except TypeError:  # not weak-referenceable: a fresh handle each time
            return _LocalHandle(env, None)

    async def make_env(self, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> EnvHandle:
        """Build an env with ``factory(*args, **kwargs)`` on a worker; it is rebuilt the same way if lost."""
        bound = functools.partial(factory, *args, **kwargs)
        handle = _LocalHandle(None, bound)
        handle.env = await self._run(handle, "factory", bound)
        return handle

    def _handle(self, env_handle: Any) -> _LocalHandle:
        if isinstance(env_handle, _LocalHandle):
            return env_handle
        if isinstance(env_handle, EnvHandle):
            raise TypeError(f"{type(env_handle).__name__} belongs to another kind of pool")
        handle = self.wrap(env_handle)
        assert isinstance(handle, _LocalHandle)
        return handle

    # ---- calls
    async def call(self, env_handle: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``env.method(*args, **kwargs)`` on a worker thread and return its result.

        ``method`` may also name a plain attribute or property (e.g. ``"last_observation"``): its value is
        returned. ``env_handle`` is a handle from :meth:`make_env` / :meth:`wrap` or a bare env object
        (wrapped on the fly). Calls on one env are serialised; calls on different envs run concurrently.

        Raises:
            EnvWorkerError: the call raised, timed out, or the handle is broken (see the module docstring).
            AttributeError: the env has no such method (a programming error, not a worker failure).
        """
        handle = self._handle(env_handle)
        async with handle._call_lock():
            if handle.broken is not None:
                self.stats.errors += 1
                raise EnvWorkerError(
                    f"env handle is broken ({handle.broken}); build a new env with make_env()",
                    kind="broken",
                    method=method,
                )
            if handle.env is None:  # lost after a failure: rebuild from the factory first
                assert handle.factory is not None
                handle.env = await self._run(handle, "factory", handle.factory)
            if not hasattr(handle.env, method):
                raise AttributeError(f"{type(handle.env).__name__} has no method or attribute {method!r}")
            return await self._run(
                handle, method, functools.partial(_invoke, handle.env, method, args, kwargs)
            )

    async def _run(self, handle: _LocalHandle, method: str, fn: Callable[[], Any]) -> Any:
        if self._closed:
            raise RuntimeError("the EnvWorkerPool is closed")
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots, self._slots_loop = asyncio.Semaphore(self.max_workers), loop
        async with self._slots:
            worker = self._idle.pop() if self._idle else self._spawn()
            future: asyncio.Future[Any] = loop.create_future()
            self.stats.calls += 1
            start = time.perf_counter()
            worker.jobs.put((fn, loop, future))
            try:
                result = await asyncio.wait_for(future, self.step_timeout_s)
            except (TimeoutError, asyncio.CancelledError) as exc:
                # the thread is still inside the env: abandon it and the env it touches
                self._retire(worker)
                self._lose_env(handle)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                self.stats.timeouts += 1
                raise EnvWorkerError(
                    f"env call {method!r} exceeded step_timeout_s={self.step_timeout_s}; the worker was "
                    f"replaced and the env must be restored",
                    kind="timeout",
                    method=method,
                ) from None
            except Exception as exc:
                self._idle.append(worker)
                self.stats.errors += 1
                raise EnvWorkerError(
                    f"env call {method!r} raised {type(exc).__name__}: {exc}", kind="error", method=method
                ) from exc
            finally:
                self.stats.env_seconds += time.perf_counter() - start
            self._idle.append(worker)
            return result

    def _spawn(self) -> _ThreadWorker:
        worker = _ThreadWorker()
        self._all.append(worker)
        return worker

    def _retire(self, worker: _ThreadWorker) -> None:
        worker.abandon()
        self._all.remove(worker)
        self.stats.replaced += 1  # a fresh thread is spawned on demand by the next call

    @staticmethod
    def _lose_env(handle: _LocalHandle) -> None:
        handle.generation += 1
        if handle.factory is None:
            handle.broken = "its env hung in a worker and there is no factory to rebuild it"
        handle.env = None

    def close(self) -> None:
        """Stop the idle worker threads (idempotent). Abandoned hung threads exit when their call returns."""
        self._closed = True
        for worker in self._all:
            worker.abandon()
        self._all.clear()
        self._idle.clear()

    def __enter__(self) -> EnvWorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- Ray


class _RayHandle(EnvHandle):
    def __init__(self, actor: Any, factory: Callable[[], Any]) -> None:
        super().__init__(factory)
        self.actor = actor
        self.starting = True  # the actor's env is still being built (not covered by the step timeout)


@functools.lru_cache(maxsize=1)
def _env_actor_class() -> Any:
    ray = require("ray", "ray")

    class _EnvActor:
        def __init__(self, factory: Callable[[], Any]) -> None:
            self.env = factory()

        def ready(self) -> bool:
            return True

        def call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            return _invoke(self.env, method, args, kwargs)

    return ray.remote(_EnvActor)


class RayEnvWorkerPool:
    """Envs as Ray actors (the ``ray`` extra): one actor per env, calls awaited with a deadline.

    A call that times out kills its actor; an actor that dies (the env crashed the process) is detected.
    Either way the handle gets a new actor with a fresh env from the factory (``generation`` += 1) and the
    call raises :class:`EnvWorkerError`. ``max_workers`` bounds the calls in flight, as for threads.

    Args:
        max_workers: the most env calls in flight at once.
        step_timeout_s: the deadline of one call in seconds (None = no deadline).
        num_cpus_per_env: the CPUs Ray reserves per env actor (0 lets many light envs share a core).
        start_timeout_s: the deadline for starting an actor and building its env (separate from the step
            deadline: a worker process can take seconds to start on a busy machine).
        init_kwargs: passed to ``ray.init`` when Ray is not initialised yet (e.g. ``{"address": "auto"}``).
    """

    def __init__(
        self,
        max_workers: int = 4,
        step_timeout_s: float | None = 60.0,
        *,
        num_cpus_per_env: float = 0.0,
        start_timeout_s: float = 120.0,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        if step_timeout_s is not None and not step_timeout_s > 0:
            raise ValueError(f"step_timeout_s must be > 0 or None, got {step_timeout_s}")
        self.ray = require("ray", "ray")
        if not self.ray.is_initialized():
            self.ray.init(**(init_kwargs or {}))
        self.max_workers = max_workers
        self.step_timeout_s = step_timeout_s
        self.num_cpus_per_env = num_cpus_per_env
        self.start_timeout_s = start_timeout_s
        self.stats = WorkerPoolStats()
        self._handles: list[_RayHandle] = []
        self._slots: asyncio.Semaphore | None = None
        self._slots_loop: asyncio.AbstractEventLoop | None = None

    def _new_actor(self, factory: Callable[[], Any]) -> Any:
        return _env_actor_class().options(num_cpus=self.num_cpus_per_env).remote(factory)

    async def make_env(self, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> EnvHandle:
        """Start an actor holding ``factory(*args, **kwargs)`` (the factory must be picklable)."""
        bound = functools.partial(factory, *args, **kwargs)
        handle = _RayHandle(self._new_actor(bound), bound)
        self._handles.append(handle)
        await self._started(handle)
        return handle

    async def _started(self, handle: _RayHandle) -> None:
        if handle.starting:
            await self._await(handle, "factory", handle.actor.ready.remote(), self.start_timeout_s)
            handle.starting = False

    async def call(self, env_handle: EnvHandle, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``env.method(*args, **kwargs)`` in the env's actor; see :meth:`EnvWorkerPool.call`."""
        if isinstance(env_handle, RemoteEnv):
            env_handle = env_handle.handle
        if not isinstance(env_handle, _RayHandle):
            raise TypeError("RayEnvWorkerPool.call needs a handle from make_env or a RemoteEnv")
        async with env_handle._call_lock():
            await self._started(env_handle)
            ref = env_handle.actor.call.remote(method, args, kwargs)
            return await self._await(env_handle, method, ref, self.step_timeout_s)

    async def _await(self, handle: _RayHandle, method: str, ref: Any, timeout: float | None) -> Any:
        ray = self.ray
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots_loop is not loop:
            self._slots, self._slots_loop = asyncio.Semaphore(self.max_workers), loop
        async with self._slots:
            self.stats.calls += 1
            start = time.perf_counter()
            try:
                return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout)
            except (TimeoutError, ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                self._fail(handle, method, exc, timeout)
            finally:
                self.stats.env_seconds += time.perf_counter() - start

    # ---- synchronous construction and access (for code that holds env objects, e.g. the trainer)

    def make_remote(self, factory: Callable[..., Any], *args: Any, **kwargs: Any) -> RemoteEnv:
        """Start an env actor (blocking until its env is built) and return a :class:`RemoteEnv` proxy."""
        bound = functools.partial(factory, *args, **kwargs)
        handle = _RayHandle(self._new_actor(bound), bound)
        self._handles.append(handle)
        self.ray.get(handle.actor.ready.remote(), timeout=self.start_timeout_s)
        handle.starting = False
        return RemoteEnv(self, handle)

    def make_at_reset(self, spec: Any, seed: int | None) -> RemoteEnv:
        """A remote :class:`~tempo_rl.envs.RecordedEnv` of ``spec`` reset with ``seed``."""
        return self.make_remote(_make_at_reset, spec, seed)

    def restore_branches(self, snapshot: Any, n: int, *, verify: bool = True) -> list[RemoteEnv]:
        """``n`` remote envs at ``snapshot``'s state, each restored (verified replay) in its own actor, in
        parallel. A divergence raises the envs layer's ``ReplayDivergenceError`` here."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        handles = []
        for _ in range(n):
            bound = functools.partial(_restore_env, snapshot, verify)
            handles.append(_RayHandle(self._new_actor(bound), bound))
        self._handles.extend(handles)
        try:
            self.ray.get([h.actor.ready.remote() for h in handles], timeout=self.start_timeout_s)
        except self.ray.exceptions.RayTaskError as exc:
            for h in handles:
                self.release(h)
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, Exception) else exc) from exc
        for h in handles:
            h.starting = False
        return [RemoteEnv(self, h) for h in handles]

    def call_sync(self, env: RemoteEnv | EnvHandle, method: str, *args: Any, **kwargs: Any) -> Any:
        """Blocking ``env.method(*args, **kwargs)`` in the actor (with the step deadline)."""
        handle = env.handle if isinstance(env, RemoteEnv) else env
        if not isinstance(handle, _RayHandle):
            raise TypeError("call_sync needs a RemoteEnv or a handle of this pool")
        ref = handle.actor.call.remote(method, args, kwargs)
        ray = self.ray
        try:
            return ray.get(ref, timeout=self.step_timeout_s)
        except (
            ray.exceptions.GetTimeoutError,
            ray.exceptions.RayActorError,
            ray.exceptions.RayTaskError,
        ) as exc:
            self._fail(handle, method, exc, self.step_timeout_s)

    def _fail(self, handle: _RayHandle, method: str, exc: BaseException, timeout: float | None) -> NoReturn:
        """Count a failed call and raise it as :class:`EnvWorkerError`; a timed-out or dead actor is replaced.

        ``exc`` is a timeout (asyncio's, or ray's ``GetTimeoutError``), ``RayActorError`` (the actor died) or
        ``RayTaskError`` (the env raised; its cause is reported, even when the cause is itself a timeout).
        """
        ray = self.ray
        task_error = isinstance(exc, ray.exceptions.RayTaskError)
        if isinstance(exc, ray.exceptions.GetTimeoutError) or (
            isinstance(exc, TimeoutError) and not task_error
        ):
            self.stats.timeouts += 1
            self._replace(handle)
            raise EnvWorkerError(
                f"env call {method!r} exceeded its timeout of {timeout} s; the actor was replaced and the env "
                "must be restored",
                kind="timeout",
                method=method,
            ) from None
        if isinstance(exc, ray.exceptions.RayActorError):
            self.stats.crashes += 1
            self._replace(handle)
            raise EnvWorkerError(
                f"the env actor died during {method!r}; it was replaced and the env must be restored",
                kind="crash",
                method=method,
            ) from exc
        self.stats.errors += 1
        cause = getattr(exc, "cause", None)
        cause = exc if cause is None else cause
        raise EnvWorkerError(
            f"env call {method!r} raised {type(cause).__name__}: {cause}", kind="error", method=method
        ) from exc

    def release(self, handle: EnvHandle) -> None:
        """Kill one env's actor (its env is closed with its process)."""
        if isinstance(handle, _RayHandle):
            with contextlib.suppress(Exception):
                self.ray.kill(handle.actor, no_restart=True)
            if handle in self._handles:
                self._handles.remove(handle)

    def _replace(self, handle: _RayHandle) -> None:
        with contextlib.suppress(Exception):  # already dead
            self.ray.kill(handle.actor, no_restart=True)
        assert handle.factory is not None
        handle.actor = self._new_actor(handle.factory)
        handle.starting = True
        handle.generation += 1
        self.stats.replaced += 1

    def close(self) -> None:
        """Kill every env actor (idempotent). Ray itself stays initialised."""
        for handle in self._handles:
            with contextlib.suppress(Exception):  # already dead
                self.ray.kill(handle.actor, no_restart=True)
        self._handles.clear()

    def __enter__(self) -> RayEnvWorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _make_at_reset(spec: Any, seed: int | None) -> Any:
    from tempo_rl.envs import make

    env = make(spec)
    env.reset(seed)
    return env


def _restore_env(snapshot: Any, verify: bool) -> Any:
    from tempo_rl.envs import restore

    return restore(snapshot, verify=verify)


class RemoteEnv:
    """A synchronous stand-in for an env living in a Ray actor of a :class:`RayEnvWorkerPool`.

    Steps go through ``await pool.call(remote_env, "step", action)`` (concurrent, with deadlines); anything
    else the caller does on an env object (``snapshot()``, ``last_observation``, ``privileged_info()``,
    ``close()``) is forwarded to the actor with a blocking round trip, so code written for local envs (such
    as the trainer's episode runner) works unchanged.
    """

    def __init__(self, pool: RayEnvWorkerPool, handle: _RayHandle) -> None:
        self._pool = pool
        self.handle = handle

    @property
    def generation(self) -> int:
        """Incremented when the actor was replaced after a failure (the env is then a fresh one)."""
        return self.handle.generation

    @property
    def last_observation(self) -> Any:
        """The env's last observation (a round trip to the actor)."""
        return self._pool.call_sync(self, "last_observation")

    def close(self) -> None:
        """Kill the actor (idempotent)."""
        self._pool.release(self.handle)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def forward(*args: Any, **kwargs: Any) -> Any:
            return self._pool.call_sync(self, name, *args, **kwargs)

        forward.__name__ = name
        return forward
