"""Retries with exponential backoff and a timeout on every wait, for remote backends.

Every remote call goes through :func:`call_with_retry` (or :func:`call_with_retry_async`): the call returns a
future-like object (``.result(timeout=...)``) or a value; each wait is bounded by ``result_timeout_s`` so
nothing hangs forever; transient failures (timeouts, connection errors, HTTP 408/429/5xx, errors a service
marks ``retryable``) are retried up to ``max_attempts`` times with delays ``min(backoff_max_s,
backoff_initial_s * 2**k)`` times ``1 +- jitter``; other errors propagate at once.

Non-idempotent operations (``forward_backward``, ``optim_step``) pass ``idempotent=False``: they are retried
only when the request provably did not reach the service (a connection error), never after a timeout, since
the service may have applied it; a timeout then raises :class:`BackendTimeoutError` naming the operation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tempo_rl.backends.config import RetryConfig

__all__ = [
    "BackendTimeoutError",
    "RetryStats",
    "RetryingSamplingClient",
    "RetryingTrainingClient",
    "backoff_delays",
    "call_with_retry",
    "call_with_retry_async",
    "is_transient",
    "optim_step_count",
]

T = TypeVar("T")

_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_TRANSIENT_NAMES = frozenset(
    {"APIConnectionError", "APITimeoutError", "RateLimitError", "InternalServerError"}
)
_CONNECTION_NAMES = frozenset({"APIConnectionError"})


class BackendTimeoutError(TimeoutError):
    """A remote operation did not finish within ``result_timeout_s`` (after any allowed retries)."""


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, (TimeoutError, concurrent.futures.TimeoutError, asyncio.TimeoutError)) or (
        type(exc).__name__ == "APITimeoutError"
    )


def _is_connection(exc: BaseException) -> bool:
    return (isinstance(exc, ConnectionError) or type(exc).__name__ in _CONNECTION_NAMES) and not _is_timeout(
        exc
    )


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: timeouts, connection errors, HTTP 408/425/429/5xx, ``retryable``."""
    if _is_timeout(exc) or _is_connection(exc):
        return True
    if getattr(exc, "retryable", False) is True:
        return True
    if getattr(exc, "status_code", None) in _TRANSIENT_STATUS:
        return True
    return any(c.__name__ in _TRANSIENT_NAMES for c in type(exc).__mro__)


def backoff_delays(cfg: RetryConfig, rng: random.Random | None = None) -> list[float]:
    """The ``max_attempts - 1`` delays (seconds) slept between attempts."""
    r = rng or random.Random()
    out = []
    for k in range(cfg.max_attempts - 1):
        base = min(cfg.backoff_max_s, cfg.backoff_initial_s * 2.0**k)
        out.append(max(0.0, base * (1.0 + cfg.jitter * (2.0 * r.random() - 1.0))))
    return out


def _retryable(exc: BaseException, idempotent: bool) -> bool:
    return is_transient(exc) if idempotent else _is_connection(exc)


def _raise_unless_retryable(
    exc: Exception, attempt: int, cfg: RetryConfig, *, what: str, idempotent: bool
) -> None:
    """Return when attempt ``attempt`` (0-based) that failed with ``exc`` may be retried; otherwise raise: a
    timeout as :class:`BackendTimeoutError` naming ``what`` and the fix, any other error as it is."""
    if attempt < cfg.max_attempts - 1 and _retryable(exc, idempotent):
        return
    if _is_timeout(exc):
        raise BackendTimeoutError(
            f"{what} did not finish within {cfg.result_timeout_s} s after {attempt + 1} attempt(s); "
            "raise RetryConfig.result_timeout_s or check the service status"
        ) from exc
    raise exc


def call_with_retry(
    fn: Callable[[], Any],
    cfg: RetryConfig,
    *,
    what: str,
    idempotent: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> Any:
    """Call ``fn()``; resolve a future-like result with ``.result(timeout=cfg.result_timeout_s)``; retry.

    Args:
        fn: issues the request; returns a value or an object with ``result(timeout=...)``.
        cfg: timeouts and retry policy.
        what: operation name for error messages, e.g. ``"pytrio forward_backward"``.
        idempotent: whether the operation may be repeated after a timeout.
        sleep: the sleep function (tests pass a fake).
    """
    delays = backoff_delays(cfg)
    for attempt in range(cfg.max_attempts):
        try:
            out = fn()
            if hasattr(out, "result") and callable(out.result):
                out = out.result(timeout=cfg.result_timeout_s)
            return out
        except Exception as exc:
            _raise_unless_retryable(exc, attempt, cfg, what=what, idempotent=idempotent)
            sleep(delays[attempt])
    raise AssertionError("unreachable")  # pragma: no cover


async def call_with_retry_async(
    fn: Callable[[], Awaitable[T]],
    cfg: RetryConfig,
    *,
    what: str,
    idempotent: bool = True,
) -> T:
    """Async twin of :func:`call_with_retry`: each attempt is bounded by ``asyncio.wait_for``."""
    delays = backoff_delays(cfg)
    for attempt in range(cfg.max_attempts):
        try:
            return await asyncio.wait_for(fn(), timeout=cfg.result_timeout_s)
        except Exception as exc:
            _raise_unless_retryable(exc, attempt, cfg, what=what, idempotent=idempotent)
            await asyncio.sleep(delays[attempt])
    raise AssertionError("unreachable")  # pragma: no cover


# ---------------------------------------------------------------------------------------------- clients
#
# Wrappers that give ANY training / sampling client the retry policy above (tempo_rl.backends.factory applies
# them to every backend), with one extra rule for the optimizer step: it is applied exactly once per call, even
# when its acknowledgement is lost, whenever the client exposes an optimizer step counter.

#: HTTP statuses that mean "the service refused the request before doing any work" (safe to resend).
_REJECTED_STATUS = frozenset({429, 503})


def _rejected(exc: BaseException) -> bool:
    """True when ``exc`` proves the request was not applied: a connection error, HTTP 429 / 503, or an
    error carrying ``applied=False``."""
    if getattr(exc, "applied", None) is False:
        return True
    return _is_connection(exc) or getattr(exc, "status_code", None) in _REJECTED_STATUS


def optim_step_count(client: Any) -> int | None:
    """The client's count of applied optimizer steps (``optim_step_count``, else an int ``step`` attribute as on
    :class:`~tempo_rl.backends.local.LocalTrainingClient`), or None when it has none."""
    for name in ("optim_step_count", "step"):
        value = getattr(client, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


class RetryStats:
    """Counters of a :class:`RetryingTrainingClient` and its sampling clients.

    Attributes:
        retries: resent requests, by operation name.
        failures: errors re-raised to the caller (retries exhausted or not retryable), by operation name.
        optim_acknowledged: ``optim_step`` calls that raised but whose step the counter shows as applied
            (the error was treated as a lost acknowledgement and the step was NOT sent again).
    """

    def __init__(self) -> None:
        self.retries: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.optim_acknowledged = 0

    def as_metrics(self, prefix: str = "backend/") -> dict[str, float]:
        """Slash-namespaced totals: ``retries``, ``failures``, ``optim_acknowledged``."""
        return {
            f"{prefix}retries": float(sum(self.retries.values())),
            f"{prefix}failures": float(sum(self.failures.values())),
            f"{prefix}optim_acknowledged": float(self.optim_acknowledged),
        }


def _raise_final(exc: Exception, what: str, cfg: RetryConfig, attempts: int) -> None:
    if _is_timeout(exc) and not isinstance(exc, BackendTimeoutError):
        raise BackendTimeoutError(
            f"{what} did not finish after {attempts} attempt(s); raise the backend's retry.result_timeout_s "
            "or check the service status"
        ) from exc
    raise exc


def _retry_counted(
    what: str,
    fn: Callable[[], T],
    retryable: Callable[[BaseException], bool],
    cfg: RetryConfig,
    stats: RetryStats,
    sleep: Callable[[float], None],
) -> T:
    """Call ``fn()`` up to ``cfg.max_attempts`` times with backoff while ``retryable(exc)``; count retries and
    final failures in ``stats`` under ``what``; the final error is raised through :func:`_raise_final`."""
    delays = backoff_delays(cfg)
    for attempt in range(cfg.max_attempts):
        try:
            return fn()
        except Exception as exc:
            if attempt == cfg.max_attempts - 1 or not retryable(exc):
                stats.failures[what] = stats.failures.get(what, 0) + 1
                _raise_final(exc, what, cfg, attempt + 1)
            stats.retries[what] = stats.retries.get(what, 0) + 1
            sleep(delays[attempt])
    raise AssertionError("unreachable")  # pragma: no cover


class RetryingSamplingClient:
    """A sampling client whose calls are retried with backoff (sampling is idempotent: every transient error,
    timeouts included, is retried). Other attributes are forwarded to ``inner``.

    Args:
        inner: the wrapped :class:`~tempo_rl.backends.types.SamplingClient`.
        cfg: the retry policy (``max_attempts``, backoff); ``result_timeout_s`` is the remote client's concern.
        stats: counters shared with the training client that made this sampler.
        sleep: blocking sleep (tests pass a fake); the async methods use ``asyncio.sleep`` with the same delays.
    """

    def __init__(
        self,
        inner: Any,
        cfg: RetryConfig,
        stats: RetryStats | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.inner = inner
        self.retry = cfg
        self.stats = stats if stats is not None else RetryStats()
        self._sleep = sleep

    def _sync(self, what: str, fn: Callable[[], T]) -> T:
        return _retry_counted(what, fn, is_transient, self.retry, self.stats, self._sleep)

    async def _async(self, what: str, fn: Callable[[], Awaitable[T]]) -> T:
        delays = backoff_delays(self.retry)
        for attempt in range(self.retry.max_attempts):
            try:
                return await fn()
            except Exception as exc:
                if attempt == self.retry.max_attempts - 1 or not is_transient(exc):
                    self.stats.failures[what] = self.stats.failures.get(what, 0) + 1
                    _raise_final(exc, what, self.retry, attempt + 1)
                self.stats.retries[what] = self.stats.retries.get(what, 0) + 1
                await asyncio.sleep(delays[attempt])
        raise AssertionError("unreachable")  # pragma: no cover

    def sample(self, prompt: Any, num_samples: int, params: Any) -> Any:
        """``inner.sample`` with retries."""
        return self._sync("sample", lambda: self.inner.sample(prompt, num_samples, params))

    async def sample_async(self, prompt: Any, num_samples: int, params: Any) -> Any:
        """``inner.sample_async`` with retries."""
        return await self._async("sample", lambda: self.inner.sample_async(prompt, num_samples, params))

    def compute_logprobs(self, tokens: Any) -> Any:
        """``inner.compute_logprobs`` with retries."""
        return self._sync("compute_logprobs", lambda: self.inner.compute_logprobs(tokens))

    async def compute_logprobs_async(self, tokens: Any) -> Any:
        """``inner.compute_logprobs_async`` (or the sync call in a thread) with retries."""
        fn = getattr(self.inner, "compute_logprobs_async", None)
        if fn is None:
            return await self._async(
                "compute_logprobs", lambda: asyncio.to_thread(self.inner.compute_logprobs, tokens)
            )
        return await self._async("compute_logprobs", lambda: fn(tokens))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class RetryingTrainingClient:
    """A training client whose calls are retried with backoff, and whose ``optim_step`` is applied exactly once.

    Rules (``inner`` is any :class:`~tempo_rl.backends.types.TrainingClient`):

    * ``optim_step``: when ``inner`` exposes an optimizer step counter (:func:`optim_step_count`), the counter
      is read before the call; after a failure a counter at ``before + 1`` means the step WAS applied and only
      its acknowledgement was lost: the call returns without resending (counted in
      ``stats.optim_acknowledged``); a counter still at ``before`` proves it was not applied, so any transient
      error is retried. Without a counter only errors that prove non-application (:func:`_rejected`) are
      retried. Either way at most one optimizer step is applied per call.
    * ``forward_backward`` accumulates gradients (not idempotent): retried only on errors that prove the
      request was not applied (connection errors, HTTP 429 / 503); a timeout is re-raised.
    * ``save_state``, ``load_state``, ``save_weights_and_get_sampling_client``: idempotent, every transient error
      is retried; the returned sampling client is a :class:`RetryingSamplingClient` sharing ``stats``.

    Args:
        inner: the wrapped training client (reachable as ``.inner``; other attributes are forwarded to it).
        cfg: the retry policy.
        sleep: blocking sleep between attempts (tests pass a fake).
    """

    def __init__(
        self, inner: Any, cfg: RetryConfig | None = None, *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.inner = inner
        self.retry = cfg if cfg is not None else RetryConfig()
        self.stats = RetryStats()
        self._sleep = sleep

    def _call(self, what: str, fn: Callable[[], T], retryable: Callable[[BaseException], bool]) -> T:
        return _retry_counted(what, fn, retryable, self.retry, self.stats, self._sleep)

    def wrap_sampler(self, sampler: Any) -> RetryingSamplingClient:
        """``sampler`` with this client's retry policy and stats (an already wrapped one is re-wrapped)."""
        if isinstance(sampler, RetryingSamplingClient):
            sampler = sampler.inner
        return RetryingSamplingClient(sampler, self.retry, self.stats, sleep=self._sleep)

    def forward_backward(self, datums: Any, loss_fn: Any, loss_fn_config: Any = None) -> Any:
        """``inner.forward_backward``, resent only when the service provably did not apply it."""
        return self._call(
            "forward_backward",
            lambda: self.inner.forward_backward(datums, loss_fn, loss_fn_config),
            _rejected,
        )

    def optim_step(self, adam_params: Any) -> None:
        """``inner.optim_step`` applied exactly once (see the class docstring)."""
        before = optim_step_count(self.inner)
        delays = backoff_delays(self.retry)
        for attempt in range(self.retry.max_attempts):
            try:
                self.inner.optim_step(adam_params)
                return
            except Exception as exc:
                now = optim_step_count(self.inner) if before is not None else None
                if before is not None and now == before + 1:
                    self.stats.optim_acknowledged += 1  # applied; only the acknowledgement was lost
                    return
                if before is not None and now != before:
                    raise RuntimeError(
                        f"optim_step failed and the optimizer step counter moved from {before} to {now}; "
                        "another process is training this model, refusing to retry"
                    ) from exc
                proven = before is not None and is_transient(exc)
                if attempt == self.retry.max_attempts - 1 or not (proven or _rejected(exc)):
                    self.stats.failures["optim_step"] = self.stats.failures.get("optim_step", 0) + 1
                    _raise_final(exc, "optim_step", self.retry, attempt + 1)
                self.stats.retries["optim_step"] = self.stats.retries.get("optim_step", 0) + 1
                self._sleep(delays[attempt])

    def save_state(self, name: str) -> Any:
        """``inner.save_state`` with retries (the local backend overwrites its file; the remote adapters send a
        new unique name on every call, so a retry after a timeout is never refused as a duplicate)."""
        return self._call("save_state", lambda: self.inner.save_state(name), is_transient)

    def load_state(self, path: str) -> None:
        """``inner.load_state`` with retries."""
        self._call("load_state", lambda: self.inner.load_state(path), is_transient)

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> RetryingSamplingClient:
        """A retrying sampling client over ``inner``'s current weights."""
        sampler = self._call(
            "save_weights_and_get_sampling_client",
            lambda: self.inner.save_weights_and_get_sampling_client(name),
            is_transient,
        )
        return self.wrap_sampler(sampler)

    def get_tokenizer(self) -> Any:
        """``inner.get_tokenizer()``."""
        return self.inner.get_tokenizer()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
