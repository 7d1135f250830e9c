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
    "backoff_delays",
    "call_with_retry",
    "call_with_retry_async",
    "is_transient",
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
            last = attempt == cfg.max_attempts - 1
            if last or not _retryable(exc, idempotent):
                if _is_timeout(exc):
                    raise BackendTimeoutError(
                        f"{what} did not finish within {cfg.result_timeout_s} s after {attempt + 1} "
                        "attempt(s); "
                        "raise RetryConfig.result_timeout_s or check the service status"
                    ) from exc
                raise
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
            last = attempt == cfg.max_attempts - 1
            if last or not _retryable(exc, idempotent):
                if _is_timeout(exc):
                    raise BackendTimeoutError(
                        f"{what} did not finish within {cfg.result_timeout_s} s after {attempt + 1} "
                        "attempt(s); "
                        "raise RetryConfig.result_timeout_s or check the service status"
                    ) from exc
                raise
            await asyncio.sleep(delays[attempt])
    raise AssertionError("unreachable")  # pragma: no cover
