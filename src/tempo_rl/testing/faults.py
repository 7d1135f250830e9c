"""Test-only fault injection: wrap envs and backend clients so that they fail the way real runs fail.

Nothing here changes the wrapped objects; every fault is decided by a :class:`FaultPlan` from a seed and the
*content* of the call, so a run with the same seed meets the same faults whatever the thread scheduling:

=====================  =====================================================================================
fault (``FaultRates``)  what the wrapper does
=====================  =====================================================================================
``env_crash``          ``env.step`` raises :class:`InjectedEnvCrash` (the env worker "died" mid-rollout)
``env_hang``           ``env.step`` sleeps ``hang_s`` (longer than the pool's per-step timeout) first
``replay_divergence``  ``restore_branches`` of a stored state (>= 1 action) gets a snapshot whose recorded
                       observation digest at a random step no longer matches what the env replays, so the
                       real verified restore raises ``ReplayDivergenceError`` with its diff
``backend_timeout``    ``sample_async`` / ``compute_logprobs`` raise :class:`InjectedTimeout` (before work)
``backend_transient``  ``forward_backward`` / ``sample_async`` raise :class:`InjectedServerError` (HTTP 503:
                       the service refused the request, nothing was applied)
``optim_fail``         ``optim_step`` raises :class:`InjectedServerError` before the step is applied
``optim_lost_ack``     ``optim_step`` APPLIES the step, then raises :class:`InjectedTimeout` (the answer was
                       lost: a naive retry would apply a second optimizer step)
``garbage``            a sampled sequence's text is replaced by model-output garbage (:data:`GARBAGE`):
                       broken / nested / repeated tags, ``1e309``, ``NaN``, ``-0.0``, ``0.5.5``, unicode, a
                       huge output; the tokens and logprobs are kept (the sampler did sample them)
=====================  =====================================================================================

A decision is ``u < rate`` with ``u = BLAKE2b(seed | site | key | n) / 2**64`` uniform in [0, 1), where ``key``
is the content of the call (the env's identity and step, the prompt and seed of a request, ...) and ``n``
counts earlier decisions with the same site and key (so a retried call gets a fresh draw).
:attr:`FaultPlan.injected` counts the faults injected, by kind.

Use :func:`inject_faults` on a built trainer (it puts the faulty layer *under* the production retry layer), or
:func:`faulty_build_trainer` to patch :func:`tempo_rl.training.run.build_trainer` for a whole ``train_run``.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = [
    "FAULT_KINDS",
    "GARBAGE",
    "FaultPlan",
    "FaultRates",
    "FaultyEnv",
    "FaultySamplingClient",
    "FaultyTrainingClient",
    "InjectedEnvCrash",
    "InjectedFault",
    "InjectedServerError",
    "InjectedTimeout",
    "corrupt_snapshot",
    "faulty_build_trainer",
    "faulty_restore_branches",
    "inject_faults",
]


#: Model-output garbage: every string is an invalid tool call and an unusable critic answer.
GARBAGE: tuple[str, ...] = (
    "",
    "<value>1e309</value>",
    "<value>NaN</value>",
    "<value>0.5.5</value>",
    "<value><value>0.3</value",
    "<tool_call><tool_call>look</tool_call></tool_call>",
    '<tool_call>{"name": "env_step", "arguments": {"action": NaN}}</tool_call>',
    "<tool_call><function=env_step><parameter=action>-0.0</parameter></function></tool_call> trailing",
    "\u202e\u0000\ufeff\U0001f600 <tool_call>" + "\u00e9" * 50,
    "<tool_call>" * 200 + "x" * 20_000,
    "<value>-0.0</value><value>inf</value>",
    "</tool_call><tool_call>{}</tool_call>",
)


class InjectedFault(Exception):
    """Base class of every injected failure (never raised by production code)."""


class InjectedEnvCrash(InjectedFault, RuntimeError):
    """The env (its worker) crashed during a step."""


class InjectedTimeout(InjectedFault, TimeoutError):
    """A backend call timed out (a transient error by :func:`tempo_rl.backends.retry.is_transient`)."""


class InjectedServerError(InjectedFault, RuntimeError):
    """The service refused a request (HTTP 503, ``retryable``): nothing was applied."""

    status_code = 503
    retryable = True
    applied = False


@dataclass(frozen=True)
class FaultRates:
    """Probability of each fault per eligible call (each in [0, 1]); see the module table."""

    env_crash: float = 0.0
    env_hang: float = 0.0
    replay_divergence: float = 0.0
    backend_timeout: float = 0.0
    backend_transient: float = 0.0
    optim_fail: float = 0.0
    optim_lost_ack: float = 0.0
    garbage: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"FaultRates.{f.name} must be a probability in [0, 1], got {value!r}")

    @classmethod
    def uniform(cls, rate: float) -> FaultRates:
        """The same ``rate`` for every kind of fault."""
        return cls(**{name: rate for name in FAULT_KINDS})


#: the kinds of fault, in the order of :class:`FaultRates`' fields
FAULT_KINDS: tuple[str, ...] = tuple(f.name for f in fields(FaultRates))


class FaultPlan:
    """Decides, deterministically from ``seed`` and the call's content, which calls fail.

    Args:
        rates: per-kind probabilities.
        seed: the plan's seed.
        hang_s: how long an injected hang sleeps (seconds; make it exceed the pool's ``step_timeout_s``).
        max_faults: at most this many faults of a kind (e.g. ``{"optim_fail": 1}`` with rate 1.0: exactly the
            first ``optim_step`` fails).
    """

    def __init__(
        self,
        rates: FaultRates,
        seed: int = 0,
        *,
        hang_s: float = 1.0,
        max_faults: Mapping[str, int] | None = None,
    ) -> None:
        if hang_s < 0:
            raise ValueError(f"hang_s must be >= 0 seconds, got {hang_s}")
        unknown = set(max_faults or {}) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(
                f"max_faults has unknown fault kinds {sorted(unknown)}; use names from {FAULT_KINDS}"
            )
        self.max_faults = dict(max_faults or {})
        self.rates = rates
        self.seed = seed
        self.hang_s = hang_s
        self.injected: Counter[str] = Counter()
        #: snapshot ids whose restore was given a corrupted snapshot
        self.diverged_states: list[str] = []
        #: one ``(snapshot id, clock at the restore, detected)`` per corrupted restore; ``detected`` is False
        #: when the restore returned envs anyway (a wrongly restored state that could be trained on)
        self.divergence_log: list[tuple[str, int | None, bool]] = []
        #: injected garbage on sequences that held a valid tool call / anything else
        self.garbage_actor = 0
        self.garbage_other = 0
        self._seen: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def uniform(self, site: str, key: str) -> float:
        """The next uniform draw in [0, 1) for ``(site, key)`` (advances that pair's counter)."""
        with self._lock:
            n = self._seen[(site, key)]
            self._seen[(site, key)] += 1
        digest = hashlib.blake2b(f"{self.seed}|{site}|{key}|{n}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2.0**64

    def fires(self, kind: str, key: str) -> bool:
        """Whether fault ``kind`` hits the call identified by ``key`` (counted in :attr:`injected`)."""
        rate = float(getattr(self.rates, kind))
        if rate <= 0.0:
            return False
        hit = self.uniform(kind, key) < rate
        if hit:
            with self._lock:
                cap = self.max_faults.get(kind)
                if cap is not None and self.injected[kind] >= cap:
                    return False
                self.injected[kind] += 1
        return hit

    def pick(self, site: str, key: str, n: int) -> int:
        """A deterministic index in ``range(n)`` for ``(site, key)``."""
        return min(n - 1, int(self.uniform(site, key) * n))


# ---------------------------------------------------------------------------------------------- envs


class FaultyEnv:
    """Wraps a live env; ``step`` may crash or hang (see :class:`FaultRates`). Everything else is forwarded.

    Args:
        env: the wrapped env (e.g. a :class:`~tempo_rl.envs.RecordedEnv`).
        plan: the fault plan.
        key: the env's identity for the plan (e.g. ``"restore:<snapshot id>:<branch index>"``).
    """

    def __init__(self, env: Any, plan: FaultPlan, key: str) -> None:
        self.inner = env
        self.plan = plan
        self.key = key
        self.steps = 0

    def step(self, action: str) -> Any:
        """``inner.step(action)``, unless a crash or hang is injected first."""
        key = f"{self.key}|{self.steps}|{action}"
        self.steps += 1
        if self.plan.fires("env_crash", key):
            raise InjectedEnvCrash(f"injected env crash at step {self.steps} of {self.key}")
        if self.plan.fires("env_hang", key):
            time.sleep(self.plan.hang_s)
        return self.inner.step(action)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "plan", "key", "steps"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def corrupt_snapshot(snapshot: Any, step: int) -> Any:
    """``snapshot`` with the recorded observation digest after action ``step`` (1-based) replaced: a replay
    now reproduces an observation that differs from the record, as when the env is not deterministic."""
    digests = list(snapshot.observation_digests)
    if not 1 <= step < len(digests):
        raise ValueError(f"step must be in [1, {len(digests) - 1}] for this snapshot, got {step}")
    digests[step] = "0" * len(digests[step]) if digests[step] != "0" * len(digests[step]) else "f" * 32
    update: dict[str, Any] = {"observation_digests": tuple(digests)}
    texts = getattr(snapshot, "observation_texts", None)
    if texts is not None:
        texts = list(texts)
        texts[step] = texts[step] + " [recorded by another env]"
        update["observation_texts"] = tuple(texts)
        if step == len(digests) - 1:
            update["last_observation"] = texts[step]
    return snapshot.model_copy(update=update)


def faulty_restore_branches(
    restore: Callable[[Any, int], list[Any]],
    plan: FaultPlan,
    *,
    clock: Callable[[], int] | None = None,
) -> Callable[[Any, int], list[Any]]:
    """Wrap ``restore(snapshot, n)``: stored states (>= 1 action) may get a corrupted snapshot (replay
    divergence, to be detected by the real verification), and every returned env is a :class:`FaultyEnv`.

    Args:
        restore: the real ``(snapshot, n) -> envs``.
        plan: the fault plan (records every corruption in :attr:`FaultPlan.divergence_log`).
        clock: e.g. ``lambda: trainer.state.update``, recorded with each corruption.
    """

    def wrapped(snapshot: Any, n: int) -> list[Any]:
        key = str(snapshot.id)
        corrupted = len(snapshot.actions) >= 1 and plan.fires("replay_divergence", key)
        if corrupted:
            step = 1 + plan.pick("divergence_step", key, len(snapshot.actions))
            snapshot = corrupt_snapshot(snapshot, step)
        when = clock() if clock is not None else None
        try:
            envs = restore(snapshot, n)
        except BaseException:
            if corrupted:
                with plan._lock:
                    plan.diverged_states.append(key)
                    plan.divergence_log.append((key, when, True))
            raise
        if corrupted:
            with plan._lock:
                plan.diverged_states.append(key)
                plan.divergence_log.append((key, when, False))
        return [FaultyEnv(env, plan, f"restore:{key}:{i}") for i, env in enumerate(envs)]

    return wrapped


def _faulty_make_env(make_env: Callable[[Any, int], Any], plan: FaultPlan) -> Callable[[Any, int], Any]:
    def wrapped(spec: Any, seed: int) -> Any:
        return FaultyEnv(make_env(spec, seed), plan, f"fresh:{spec.key()}:{seed}")

    return wrapped


# ---------------------------------------------------------------------------------------------- backend


def _prompt_key(prompt: Sequence[int], params: Any = None) -> str:
    digest = hashlib.blake2b(repr(tuple(int(t) for t in prompt)).encode(), digest_size=8).hexdigest()
    return f"{digest}|{getattr(params, 'seed', None)}"


class FaultySamplingClient:
    """Wraps a sampling client: timeouts and transient errors before the work, garbage in the output text."""

    def __init__(
        self, inner: Any, plan: FaultPlan, *, is_actor_text: Callable[[str], bool] | None = None
    ) -> None:
        self.inner = inner
        self.plan = plan
        self._is_actor = is_actor_text or _looks_like_tool_call

    def _before(self, site: str, key: str) -> None:
        if self.plan.fires("backend_timeout", f"{site}|{key}"):
            raise InjectedTimeout(f"injected timeout of {site}")
        if site == "sample" and self.plan.fires("backend_transient", f"{site}|{key}"):
            raise InjectedServerError(f"injected HTTP 503 on {site}")

    def _garble(self, result: Any, key: str) -> Any:
        seqs = []
        for i, seq in enumerate(result.sequences):
            if self.plan.fires("garbage", f"{key}|{i}"):
                if self._is_actor(seq.text):
                    self.plan.garbage_actor += 1
                else:
                    self.plan.garbage_other += 1
                text = GARBAGE[self.plan.pick("garbage_text", f"{key}|{i}", len(GARBAGE))]
                seq = replace(seq, text=text)
            seqs.append(seq)
        return replace(result, sequences=tuple(seqs))

    def sample(self, prompt: Sequence[int], num_samples: int, params: Any) -> Any:
        """``inner.sample`` with injected faults."""
        key = _prompt_key(prompt, params)
        self._before("sample", key)
        return self._garble(self.inner.sample(prompt, num_samples, params), key)

    async def sample_async(self, prompt: Sequence[int], num_samples: int, params: Any) -> Any:
        """``inner.sample_async`` with injected faults."""
        key = _prompt_key(prompt, params)
        self._before("sample", key)
        return self._garble(await self.inner.sample_async(prompt, num_samples, params), key)

    def compute_logprobs(self, tokens: Sequence[int]) -> Any:
        """``inner.compute_logprobs`` with injected timeouts."""
        self._before("compute_logprobs", _prompt_key(tokens))
        return self.inner.compute_logprobs(tokens)

    async def compute_logprobs_async(self, tokens: Sequence[int]) -> Any:
        """``inner.compute_logprobs_async`` with injected timeouts."""
        self._before("compute_logprobs", _prompt_key(tokens))
        fn = getattr(self.inner, "compute_logprobs_async", None)
        return await fn(tokens) if fn is not None else self.inner.compute_logprobs(tokens)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "plan"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def _looks_like_tool_call(text: str) -> bool:
    from tempo_rl.rollout.tool_call import ToolCallParser

    return ToolCallParser().parse(text).valid


class FaultyTrainingClient:
    """Wraps a training client: refused ``forward_backward`` / ``optim_step`` requests, and optimizer steps that
    are applied but whose acknowledgement is lost. Sampling clients it returns are :class:`FaultySamplingClient`.

    Attributes:
        optim_calls: ``optim_step`` requests received; ``optim_applied``: steps passed on to ``inner``.
    """

    def __init__(self, inner: Any, plan: FaultPlan) -> None:
        self.inner = inner
        self.plan = plan
        self.optim_calls = 0
        self.optim_applied = 0
        self._fb = 0

    def forward_backward(self, datums: Any, loss_fn: Any, loss_fn_config: Any = None) -> Any:
        """``inner.forward_backward`` unless a refusal (HTTP 503) is injected first."""
        self._fb += 1
        if self.plan.fires("backend_transient", f"forward_backward|{self._fb}"):
            raise InjectedServerError("injected HTTP 503 on forward_backward (not applied)")
        return self.inner.forward_backward(datums, loss_fn, loss_fn_config)

    def optim_step(self, adam_params: Any) -> None:
        """``inner.optim_step`` with an injected refusal before, or a lost acknowledgement after, the step."""
        self.optim_calls += 1
        key = f"optim_step|{self.optim_calls}"
        if self.plan.fires("optim_fail", key):
            raise InjectedServerError("injected HTTP 503 on optim_step (not applied)")
        self.inner.optim_step(adam_params)
        self.optim_applied += 1
        if self.plan.fires("optim_lost_ack", key):
            raise InjectedTimeout("injected timeout after optim_step was applied (acknowledgement lost)")

    def save_weights_and_get_sampling_client(self, name: str | None = None) -> FaultySamplingClient:
        """A faulty sampler over ``inner``'s current weights."""
        return FaultySamplingClient(self.inner.save_weights_and_get_sampling_client(name), self.plan)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "plan"):
            raise AttributeError(name)
        return getattr(self.inner, name)


# ---------------------------------------------------------------------------------------------- trainer


def inject_faults(trainer: Any, plan: FaultPlan, *, retry: Any = None) -> Any:
    """Put the faulty layer into a built trainer, *under* its retry layer; returns the trainer.

    The training client becomes ``Retrying(Faulty(inner))`` (a trainer whose client is not a
    :class:`~tempo_rl.backends.retry.RetryingTrainingClient` gets the faulty client with no retry layer, so a
    test can show what breaks without it); the sampler, ``make_env`` and ``restore_branches`` are wrapped. A
    critic with weights of its own (``tempo.critic_weights = "own"``) gets the same layer on its client pair.

    Args:
        trainer: a :class:`~tempo_rl.training.trainer.MacroStepTrainer`.
        plan: the fault plan.
        retry: a :class:`~tempo_rl.backends.config.RetryConfig` to use instead of the client's (e.g. tiny
            backoffs in tests).
    """
    c = trainer.c
    c.training_client, c.sampler = _faulty_clients(c.training_client, c.sampler, plan, retry)
    if c.critic_training_client is not None:
        c.critic_training_client, c.critic_sampler = _faulty_clients(
            c.critic_training_client, c.critic_sampler, plan, retry
        )
    c.make_env = _faulty_make_env(c.make_env, plan)
    c.restore_branches = faulty_restore_branches(c.restore_branches, plan, clock=lambda: trainer.state.update)
    return trainer


def _faulty_clients(client: Any, sampler: Any, plan: FaultPlan, retry: Any) -> tuple[Any, Any]:
    """``(client, sampler)`` with the faulty layer under the retry layer (see :func:`inject_faults`)."""
    from tempo_rl.backends.retry import RetryingSamplingClient, RetryingTrainingClient

    if not isinstance(client, RetryingTrainingClient):
        return FaultyTrainingClient(client, plan), FaultySamplingClient(sampler, plan)
    client.inner = FaultyTrainingClient(client.inner, plan)
    if retry is not None:
        client.retry = retry
    inner_sampler = sampler.inner if isinstance(sampler, RetryingSamplingClient) else sampler
    return client, client.wrap_sampler(FaultySamplingClient(inner_sampler, plan))


@contextmanager
def faulty_build_trainer(
    plan: FaultPlan, *, retry: Any = None, before: Callable[[Any], None] | None = None
) -> Iterator[list[Any]]:
    """Patch :func:`tempo_rl.training.run.build_trainer` so that every trainer ``train_run`` builds gets
    :func:`inject_faults`; yields the list of trainers built (for inspection after the run).

    Args:
        plan: the fault plan.
        retry: passed to :func:`inject_faults`.
        before: called with each built trainer before the faults go in (e.g. to swap in a scripted sampler).
    """
    from tempo_rl.training import run as run_module

    original = run_module.build_trainer
    built: list[Any] = []

    def build(*args: Any, **kwargs: Any) -> Any:
        trainer = original(*args, **kwargs)
        if before is not None:
            before(trainer)
        inject_faults(trainer, plan, retry=retry)
        built.append(trainer)
        return trainer

    run_module.build_trainer = build  # type: ignore[assignment]
    try:
        yield built
    finally:
        run_module.build_trainer = original  # type: ignore[assignment]
