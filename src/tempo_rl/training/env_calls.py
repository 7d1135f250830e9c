"""Env calls outside the rollouts (the tokenizer corpus, the warm start's demos), guarded like those inside.

Rollouts call envs through the worker pool (:meth:`tempo_rl.envs.workers.EnvWorkerPool.call`): each call has
the ``workers.step_timeout_s`` deadline, a failure (raise, time-out, crash) raises
:class:`~tempo_rl.envs.workers.EnvWorkerError` for that call only and is counted in the pool's stats, and
the branch is dropped. :class:`GuardedEnvCalls` gives synchronous code the same path: its callers drop the item
(a corpus game, a demonstration) on an ``EnvWorkerError`` and count it in :attr:`GuardedEnvCalls.failures`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tempo_rl.envs import ForkCache, make, restore_branches
from tempo_rl.envs.snapshot import EnvSpec, Snapshot
from tempo_rl.envs.workers import EnvWorkerPool

__all__ = ["FORK_CACHE_LOCK", "GuardedEnvCalls", "locked_restore_branches", "make_env_at_reset"]

T = TypeVar("T")

#: Restores that share one :class:`~tempo_rl.envs.ForkCache` are serialised: the cache is not thread-safe.
#: Env construction needs no lock (the TextWorld/ALFWorld adapters load games thread-safely), and steps on
#: live envs run concurrently in the worker pool.
FORK_CACHE_LOCK = threading.RLock()


def make_env_at_reset(spec: EnvSpec, seed: int) -> Any:
    """A live :class:`~tempo_rl.envs.RecordedEnv` of ``spec`` reset with ``seed`` (thread-safe)."""
    env = make(spec)
    env.reset(seed)
    return env


def locked_restore_branches(snapshot: Snapshot, n: int, cache: ForkCache | None = None) -> list[Any]:
    """:func:`tempo_rl.envs.restore_branches`, under :data:`FORK_CACHE_LOCK` when ``cache`` is given."""
    if cache is None:
        return restore_branches(snapshot, n)
    with FORK_CACHE_LOCK:
        return restore_branches(snapshot, n, cache=cache)


class GuardedEnvCalls:
    """Blocking env calls through a worker pool, for code outside the rollouts' event loop.

    Args:
        pool: an :class:`~tempo_rl.envs.workers.EnvWorkerPool` (or a Ray pool: its envs are remote proxies
            whose construction has the pool's own start deadline).

    Attributes:
        failures: items dropped so far (the caller increments it when it drops one).
    """

    def __init__(self, pool: Any, *, owned: bool = False) -> None:
        self.pool = pool
        self.failures = 0
        self._owned = owned
        self._loop = asyncio.new_event_loop()

    @classmethod
    def beside(cls, pool: Any) -> GuardedEnvCalls:
        """Calls on a pool of their own with ``pool``'s step deadline when ``pool`` is a thread pool (so the
        trainer's ``workers/*`` counters stay those of its rollouts), else (Ray) on ``pool`` itself."""
        if isinstance(pool, EnvWorkerPool):
            return cls(EnvWorkerPool(max_workers=1, step_timeout_s=pool.step_timeout_s), owned=True)
        return cls(pool)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def make(self, make_env: Callable[[EnvSpec, int], Any], spec: EnvSpec, seed: int) -> Any:
        """``make_env(spec, seed)`` on a worker, under the step deadline; returns the env (a pool handle).

        Raises:
            EnvWorkerError: the build or reset raised or timed out.
        """
        if isinstance(self.pool, EnvWorkerPool):
            return self._run(self.pool.make_env(make_env, spec, seed))
        return make_env(spec, seed)

    def call(self, env: Any, method: str, *args: Any) -> Any:
        """``env.method(*args)`` (or the attribute ``method``) through the pool.

        Raises:
            EnvWorkerError: the call raised, timed out or lost its worker.
        """
        return self._run(self.pool.call(env, method, *args))

    def close_env(self, env: Any) -> None:
        """Close ``env``, best effort (an env that failed may not close cleanly)."""
        with contextlib.suppress(Exception):
            self.call(env, "close")

    def close(self) -> None:
        """Close the event loop of these calls (idempotent)."""
        if not self._loop.is_closed():
            self._loop.close()
        if self._owned:
            self.pool.close()

    def __enter__(self) -> GuardedEnvCalls:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
