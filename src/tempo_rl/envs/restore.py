"""Restore a live env at exactly the state a :class:`~tempo_rl.envs.snapshot.Snapshot` describes, verified.

Two ways to get there, cheapest first:

1. **Fork** (O(1) in the depth): when a :class:`ForkCache` holds a live env at the snapshot's exact state (or
   at an *ancestor*: same spec and seed, a prefix of its action history), and the env supports ``fork()``,
   restore forks it and replays only the remaining suffix of actions.
2. **Replay** (O(depth)): build a fresh env (from an explicit ``factory`` or the registry, via the snapshot's
   spec), ``reset(seed)`` and replay the whole action history; or, when the adapter registered its own fast
   replay with :func:`register_restorer` (ALFWorld does), let it do that.

Verification (``verify=True``, the default) checks **every** replayed observation digest against the snapshot
(the reset observation and the observation after each action: the last one alone is often generic, e.g.
"Nothing happens."), and the hidden-state fingerprint at every step where the snapshot recorded one. A fork
of a cached env carries its history, which matches the snapshot by construction (the cache is keyed by
:attr:`Snapshot.id`, a hash of spec, seed, actions and digests); its live state fingerprint is still compared
with the snapshot's last one. Any mismatch raises :class:`ReplayDivergenceError` naming the step, the action
and a short diff of expected vs actual text.
"""

from __future__ import annotations

import difflib
import importlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from tempo_rl.envs.core import Observation, ReplayableEnv
from tempo_rl.envs.recorder import RecordedEnv
from tempo_rl.envs.snapshot import Snapshot, observation_digest

__all__ = [
    "ForkCache",
    "ReplayDivergenceError",
    "SnapshotMismatchError",
    "continue_replay",
    "register_restorer",
    "restore",
    "restore_branches",
    "snapshot_prefix",
    "text_diff",
]

#: Builds a fresh env for replay: a raw ReplayableEnv (wrapped with the snapshot's spec) or a RecordedEnv
#: (whose spec must then match the snapshot's).
EnvFactoryLike = Callable[[], ReplayableEnv]


#: ``restorer(snapshot, n, *, verify) -> list[RecordedEnv]``: an adapter's own fast way to rebuild ``n`` live
#: envs at a snapshot's state by replay (e.g. ALFWorld applies recorded PDDL operators without generating text
#: and checks the fact digest at every step and the observation digest at the end). It must verify at least
#: the per-step state digests and the final observation digest, and raise :class:`ReplayDivergenceError`.
Restorer = Callable[..., list[RecordedEnv]]

#: Process-wide registry: env name -> its restorer (a callable, or a lazy ``"module:attribute"`` path until first
#: use). Written by :func:`register_restorer` (user code or tests, usually at import time), and by
#: :func:`_restorer`, which replaces a lazy path with the callable it resolves to. Read on every cache miss of
#: :func:`restore` and :func:`restore_branches` (through ``_replay_n``). Process-wide like the env registry
#: (:mod:`tempo_rl.envs.registry`) it complements: a snapshot names its env, and any thread that restores it
#: must find the same restorer. An env class can also name its own (:attr:`ReplayableEnv.branch_restorer`),
#: which needs no entry here. Thread-safety: each access is a single dict get, set or pop (atomic under the
#: GIL); two threads resolving the same lazy path both import the same attribute and store equal values.
_RESTORERS: dict[str, Restorer | str] = {}


def register_restorer(name: str, restorer: Restorer | str | None) -> None:
    """Use ``restorer`` instead of generic reset + replay for snapshots of env ``name`` (``None`` removes it).

    ``restorer`` is ``restorer(snapshot, n, *, verify) -> list[RecordedEnv]`` or a lazy ``"module:attribute"``
    path. It is used on a cache miss when no explicit ``factory`` is given; fork-capable envs still restore
    through the :class:`ForkCache` first.
    """
    if restorer is None:
        _RESTORERS.pop(name, None)
        return
    if not callable(restorer) and not (isinstance(restorer, str) and ":" in restorer):
        raise TypeError(f"restorer for {name!r} must be a callable or a 'module:attribute' string")
    _RESTORERS[name] = restorer


def _restorer(name: str) -> Restorer | None:
    entry = _RESTORERS.get(name)
    if entry is None:
        from tempo_rl.envs.registry import UnknownEnvError, get_factory

        try:
            entry = getattr(get_factory(name), "branch_restorer", None)
        except UnknownEnvError:
            return None
        if entry is None:
            return None
    if isinstance(entry, str):
        module_name, _, attribute = entry.partition(":")
        resolved: Restorer = getattr(importlib.import_module(module_name), attribute)
        _RESTORERS[name] = resolved
        return resolved
    return entry


def _replay_n(
    snapshot: Snapshot, n: int, factory: EnvFactoryLike | None, *, verify: bool
) -> list[RecordedEnv]:
    """``n`` fresh envs at the snapshot's state by replay: the adapter's restorer when it has one (and no
    explicit factory was given), else reset + generic verified replay."""
    restorer = _restorer(snapshot.env.name) if factory is None else None
    if restorer is not None:
        return restorer(snapshot, n, verify=verify)
    envs: list[RecordedEnv] = []
    try:
        for _ in range(n):
            envs.append(_replay_from_reset(snapshot, factory, verify=verify))
    except BaseException:
        for env in envs:
            env.close()
        raise
    return envs


def _rebuild_divergence(kwargs: dict[str, Any]) -> ReplayDivergenceError:
    return ReplayDivergenceError(**kwargs)


class SnapshotMismatchError(ValueError):
    """The snapshot belongs to another env (its spec differs from the env it is being restored into)."""


@dataclass(kw_only=True, eq=False, repr=False)
class ReplayDivergenceError(RuntimeError):
    """Replaying a snapshot's actions did not reproduce its recorded observations: the env is not
    deterministic (or its code, data or arguments changed since the snapshot was taken).

    Attributes:
        step: where it diverged: 0 = the reset observation, i >= 1 = the observation after the i-th action.
        action: the action applied at that step (None for the reset).
        expected: the recorded observation text (or a note with the digest when the text was not stored).
        actual: the observation text the env produced now.
        kind: ``"observation"`` (text / admissible actions differ) or ``"state"`` (hidden-state fingerprint).
        snapshot_id: :attr:`Snapshot.id` of the snapshot being restored.
        detail: what differs, when not the texts' diff (e.g. the admissible actions).
    """

    step: int
    action: str | None
    expected: str
    actual: str
    kind: str = "observation"
    snapshot_id: str = ""
    detail: str = ""

    def __post_init__(self) -> None:
        step, action = self.step, self.action
        where = "at reset (step 0)" if action is None else f"at step {step} after action {action!r}"
        diff = self.detail or text_diff(self.expected, self.actual)
        super().__init__(
            f"replay diverged {where} ({self.kind} mismatch) while restoring snapshot "
            f"{self.snapshot_id or '?'}: the env is not deterministic, or it changed since the snapshot was "
            f"taken.\n{diff}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by keyword arguments (so the error crosses process boundaries, e.g. env worker pools)."""
        return (_rebuild_divergence, ({f.name: getattr(self, f.name) for f in fields(self)},))


def text_diff(expected: str, actual: str, *, max_chars: int = 600) -> str:
    """A short inline word diff, ``[-removed-]`` / ``{+added+}`` with unchanged runs elided, cut to
    ``max_chars``.

    Example: ``text_diff("value 3 noise 0.1", "value 3 noise 0.8") == "... noise [-0.1-] {+0.8+}"``.
    """
    if expected == actual:
        return "(texts are identical)"
    old, new = expected.split(), actual.split()
    if old == new:
        return f"texts differ only in whitespace: expected {expected!r}, actual {actual!r}"[:max_chars]
    parts: list[str] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    opcodes = matcher.get_opcodes()
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal":
            run = old[i1:i2]
            if len(run) > 4:
                head = run[:2] if index > 0 else []  # context after the previous change
                tail = run[-2:] if index < len(opcodes) - 1 else []  # context before the next change
                run = [*head, "...", *tail]
            parts.extend(run)
            continue
        if i2 > i1:
            parts.append("[-" + " ".join(old[i1:i2]) + "-]")
        if j2 > j1:
            parts.append("{+" + " ".join(new[j1:j2]) + "+}")
    body = "diff: " + " ".join(parts)
    if len(body) > max_chars:
        body = body[: max_chars - 3] + "..."
    return body


def _expected_text(snapshot: Snapshot, step: int) -> str:
    if snapshot.observation_texts is not None:
        return snapshot.observation_texts[step]
    if step == len(snapshot.actions):
        return snapshot.last_observation
    return f"<text not stored in the snapshot; digest {snapshot.observation_digests[step]}>"


def _check_observation(snapshot: Snapshot, step: int, observation: Observation) -> None:
    expected_digest = snapshot.observation_digests[step]
    if observation_digest(observation) == expected_digest:
        return
    expected = _expected_text(snapshot, step)
    action = None if step == 0 else snapshot.actions[step - 1]
    detail = ""
    if snapshot.observation_texts is None and step != len(snapshot.actions):
        detail = (
            f"expected text not stored in the snapshot (digest {expected_digest}); actual text: "
            f"{observation.text[:300]!r}"
        )
    elif expected == observation.text:
        expected_admissible = snapshot.last_admissible if step == len(snapshot.actions) else None
        detail = (
            "texts are identical; the admissible actions differ: "
            f"expected {list(expected_admissible) if expected_admissible is not None else '(not stored)'}, "
            f"actual {list(observation.admissible_actions or ())}"
        )
    raise ReplayDivergenceError(
        step=step,
        action=action,
        expected=expected,
        actual=observation.text,
        snapshot_id=snapshot.id,
        detail=detail,
    )


def _check_state(snapshot: Snapshot, step: int, env: RecordedEnv, *, live: bool = True) -> None:
    """Compare the hidden-state fingerprint at ``step``: the env's live one, or (``live=False``, right after a
    replayed step) the one the recorder just took, which is the same value without computing it twice."""
    if snapshot.state_digests is None:
        return
    expected = snapshot.state_digests[step]
    if expected is None:
        return
    actual = env.state_fingerprint() if live else env.last_state_fingerprint
    if actual != expected:
        action = None if step == 0 else snapshot.actions[step - 1]
        raise ReplayDivergenceError(
            step=step,
            action=action,
            expected=f"state fingerprint {expected}",
            actual=f"state fingerprint {actual}",
            kind="state",
            snapshot_id=snapshot.id,
            detail=f"hidden-state fingerprint expected {expected}, got {actual} "
            "(the observation text matched; the env's hidden state did not)",
        )


def _replay_suffix(env: RecordedEnv, snapshot: Snapshot, start: int, *, verify: bool) -> None:
    """Apply ``snapshot.actions[start:]`` to ``env`` (which is at depth ``start``), verifying each step."""
    for index in range(start, len(snapshot.actions)):
        result = env.step(snapshot.actions[index])
        if verify:
            _check_observation(snapshot, index + 1, result.observation)
            _check_state(snapshot, index + 1, env, live=False)


def _check_spec(env: RecordedEnv, snapshot: Snapshot) -> None:
    if env.spec_key is not None and env.spec_key != snapshot.env.key():
        raise SnapshotMismatchError(
            f"snapshot is from env {snapshot.env.key()} but the env to restore into is {env.spec_key}; "
            "restore it with the factory of the env it was taken from (or factory=None to use the registry)"
        )


def _fresh(snapshot: Snapshot, factory: EnvFactoryLike | None) -> RecordedEnv:
    if factory is None:
        from tempo_rl.envs.registry import make

        return make(snapshot.env)
    built = factory()
    if isinstance(built, RecordedEnv):
        if built.spec is None:
            return RecordedEnv(built.env, snapshot.env)
        _check_spec(built, snapshot)
        return built
    if not isinstance(built, ReplayableEnv):
        raise TypeError(f"factory returned {type(built).__name__}, not a ReplayableEnv")
    return RecordedEnv(built, snapshot.env)


def _replay_from_reset(snapshot: Snapshot, factory: EnvFactoryLike | None, *, verify: bool) -> RecordedEnv:
    env = _fresh(snapshot, factory)
    try:
        observation = env.reset(snapshot.seed)
        if verify:
            _check_observation(snapshot, 0, observation)
            _check_state(snapshot, 0, env, live=False)
        _replay_suffix(env, snapshot, 0, verify=verify)
    except BaseException:
        env.close()
        raise
    return env


def snapshot_prefix(
    snapshot: Snapshot, depth: int, *, last_admissible: tuple[str, ...] | None = None
) -> Snapshot:
    """The snapshot of the same episode after its first ``depth`` actions (same :attr:`Snapshot.id` as the one
    the env would have produced at that depth). The admissible actions at that depth are not in ``snapshot``:
    pass them as ``last_admissible`` when known (the observation after action ``depth``)."""
    if not 0 <= depth <= len(snapshot.actions):
        raise ValueError(f"depth must be in 0..{len(snapshot.actions)}, got {depth}")
    if depth == len(snapshot.actions):
        return snapshot
    texts = snapshot.observation_texts
    return Snapshot(
        format_version=snapshot.format_version,
        env=snapshot.env,
        seed=snapshot.seed,
        actions=snapshot.actions[:depth],
        observation_digests=snapshot.observation_digests[: depth + 1],
        state_digests=snapshot.state_digests[: depth + 1] if snapshot.state_digests is not None else None,
        last_observation=texts[depth] if texts is not None else "",
        last_admissible=last_admissible,
        observation_texts=texts[: depth + 1] if texts is not None else None,
    )


def continue_replay(env: RecordedEnv, snapshot: Snapshot, *, verify: bool = True) -> RecordedEnv:
    """Bring ``env`` (whose record is a prefix of ``snapshot``'s) forward to ``snapshot`` by replaying the
    remaining actions, verifying each observation (and state fingerprint). Returns ``env``.

    Raises:
        SnapshotMismatchError: ``env`` is not at a prefix of ``snapshot`` (other spec, seed or history).
        ReplayDivergenceError: a replayed observation differs from the recorded one.
    """
    depth = env.round_index
    if depth > len(snapshot.actions) or not env.matches(snapshot_prefix(snapshot, depth)):
        raise SnapshotMismatchError(
            f"{env!r} is not at a prefix of snapshot {snapshot.id} (spec, seed or action history differ)"
        )
    if verify:
        _check_state(snapshot, depth, env)
    _replay_suffix(env, snapshot, depth, verify=verify)
    return env


@dataclass
class CacheStats:
    """Counters of a :class:`ForkCache`: exact hits, ancestor hits (fork + suffix replay), misses,
    evictions."""

    hits: int = 0
    ancestor_hits: int = 0
    misses: int = 0
    evictions: int = 0


_BucketKey = tuple[str, int | None, int, str]


@dataclass(eq=False)
class _Entry:
    spec_key: str
    seed: int | None
    actions: tuple[str, ...]
    digests: tuple[str, ...]
    env: RecordedEnv

    @property
    def bucket(self) -> _BucketKey:
        return (self.spec_key, self.seed, len(self.actions), self.digests[-1])

    def is_state_of(self, snapshot: Snapshot, spec_key: str) -> bool:
        return (
            self.spec_key == spec_key
            and self.seed == snapshot.seed
            and self.actions == snapshot.actions
            and self.digests == snapshot.observation_digests
        )


class ForkCache:
    """An LRU cache of live, never-stepped envs keyed by snapshot identity, for O(1) restores by ``fork()``.

    Identity is exactly what :attr:`Snapshot.id` hashes (spec, seed, actions, observation digests). Entries
    are bucketed by (spec, seed, depth, last digest) and confirmed by comparing the full histories, so a
    lookup costs O(1) hashing plus one C-level tuple comparison instead of a SHA-256 over the whole history.

    The cache owns private forks: :meth:`put` stores ``env.fork()`` (so the caller may keep stepping its env),
    and a restore hands out a further fork of the cached env. Envs that cannot fork are not cached (``put``
    returns False). Besides exact hits, :meth:`lookup` finds the deepest cached *ancestor* of a snapshot (same
    spec and seed, its actions and digests a prefix of the snapshot's), from which restore replays only the
    remaining suffix. Evicted envs are closed.

    Args:
        capacity: the most envs kept (least recently used evicted first).
    """

    def __init__(self, capacity: int = 64) -> None:
        if capacity < 1:
            raise ValueError(f"ForkCache capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.stats = CacheStats()
        self._lru: OrderedDict[int, _Entry] = OrderedDict()  # id(entry) -> entry, least recently used first
        self._buckets: dict[_BucketKey, list[_Entry]] = {}

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, snapshot: object) -> bool:
        return isinstance(snapshot, Snapshot) and self._find(snapshot) is not None

    def _find(self, snapshot: Snapshot) -> _Entry | None:
        spec_key = snapshot.env.key()
        bucket = (spec_key, snapshot.seed, len(snapshot.actions), snapshot.observation_digests[-1])
        for entry in self._buckets.get(bucket, ()):
            if entry.is_state_of(snapshot, spec_key):
                return entry
        return None

    def _remove(self, entry: _Entry) -> None:
        del self._lru[id(entry)]
        bucket = self._buckets[entry.bucket]
        bucket.remove(entry)
        if not bucket:
            del self._buckets[entry.bucket]
        entry.env.close()

    def put(self, env: RecordedEnv) -> bool:
        """Cache a private fork of ``env``'s current state; False (nothing cached) when it cannot fork."""
        if not isinstance(env, RecordedEnv):
            raise TypeError("ForkCache holds RecordedEnv objects (build envs with tempo_rl.envs.make)")
        env.last_observation  # noqa: B018 - raises a clear error when the env was never reset
        if not env.supports_fork or env.spec_key is None:
            return False
        entry = _Entry(env.spec_key, env.seed, env.actions, env.observation_digests, env)
        for existing in self._buckets.get(entry.bucket, ()):
            if existing.actions == entry.actions and existing.digests == entry.digests:
                self._lru.move_to_end(id(existing))
                return True
        entry.env = env.fork()
        self._lru[id(entry)] = entry
        self._buckets.setdefault(entry.bucket, []).append(entry)
        while len(self._lru) > self.capacity:
            self._remove(next(iter(self._lru.values())))  # the least recently used
            self.stats.evictions += 1
        return True

    def discard(self, snapshot: Snapshot) -> bool:
        """Drop (and close) the cached env at exactly ``snapshot``'s state; False when there is none."""
        entry = self._find(snapshot)
        if entry is None:
            return False
        self._remove(entry)
        return True

    def lookup(self, snapshot: Snapshot) -> tuple[RecordedEnv, int] | None:
        """The cached env at ``snapshot`` or at its deepest cached ancestor, with that env's depth; else None.

        Cost: O(1) hashing plus a tuple comparison for an exact hit, else O(capacity x depth) comparisons.
        """
        exact = self._find(snapshot)
        if exact is not None:
            self._lru.move_to_end(id(exact))
            return exact.env, len(snapshot.actions)
        spec_key = snapshot.env.key()
        best: _Entry | None = None
        for entry in self._lru.values():
            depth = len(entry.actions)
            if depth > len(snapshot.actions) or (best is not None and depth <= len(best.actions)):
                continue
            if entry.spec_key != spec_key or entry.seed != snapshot.seed:
                continue
            if (
                entry.actions == snapshot.actions[:depth]
                and entry.digests == snapshot.observation_digests[: depth + 1]
            ):
                best = entry
        if best is None:
            return None
        self._lru.move_to_end(id(best))
        return best.env, len(best.actions)

    def clear(self) -> None:
        """Close and drop every cached env."""
        for entry in self._lru.values():
            entry.env.close()
        self._lru.clear()
        self._buckets.clear()


def restore(
    snapshot: Snapshot,
    *,
    factory: EnvFactoryLike | None = None,
    cache: ForkCache | None = None,
    verify: bool = True,
) -> RecordedEnv:
    """A live env at exactly ``snapshot``'s state, verified step by step.

    Args:
        snapshot: the state to restore.
        factory: builds a fresh env for replay (zero arguments). ``None`` builds it from the registry with the
            snapshot's spec. A factory returning a :class:`RecordedEnv` with another spec is refused.
        cache: a :class:`ForkCache`; when it holds the state (or an ancestor) and the env supports ``fork()``,
            restore forks it (and replays only the suffix), then caches the restored state for next time.
            On a miss, the adapter's registered restorer (see :func:`register_restorer`) replays when there is
            one and no ``factory`` was given.
        verify: check every replayed observation digest and state fingerprint (strongly recommended).

    Returns:
        a :class:`RecordedEnv` at the snapshot's state, owned by the caller (close it when done).

    Raises:
        SnapshotMismatchError: the snapshot is from another env.
        ReplayDivergenceError: the replay did not reproduce the recorded observations.
        UnknownEnvError / TypeError / ValueError: the snapshot's spec cannot be built (see
            :func:`tempo_rl.envs.make`).
    """
    if not isinstance(snapshot, Snapshot):
        raise TypeError(f"restore() takes a Snapshot, got {type(snapshot).__name__}; see Snapshot.from_json")
    if cache is not None:
        found = cache.lookup(snapshot)
        if found is not None:
            cached, depth = found
            _check_spec(cached, snapshot)
            env = cached.fork()
            if depth == len(snapshot.actions):
                cache.stats.hits += 1
                if verify:
                    _check_state(snapshot, depth, env)
                return env
            cache.stats.ancestor_hits += 1
            try:
                if verify:
                    _check_state(snapshot, depth, env)
                _replay_suffix(env, snapshot, depth, verify=verify)
            except BaseException:
                env.close()
                raise
            cache.put(env)
            return env
        cache.stats.misses += 1
    env = _replay_n(snapshot, 1, factory, verify=verify)[0]
    if cache is not None:
        cache.put(env)
    return env


def restore_branches(
    snapshot: Snapshot,
    n: int,
    *,
    factory: EnvFactoryLike | None = None,
    cache: ForkCache | None = None,
    verify: bool = True,
) -> list[RecordedEnv]:
    """``n`` independent live envs, each at exactly ``snapshot``'s state.

    When the env supports ``fork()`` the state is restored once (see :func:`restore`) and forked ``n - 1``
    times; otherwise each branch is a separate verified replay. Stepping one branch never affects another.

    Raises:
        ValueError: ``n < 1``. Otherwise as :func:`restore`.
    """
    if n < 1:
        raise ValueError(f"restore_branches needs n >= 1 branches, got {n}")
    first = restore(snapshot, factory=factory, cache=cache, verify=verify)
    branches = [first]
    try:
        if first.supports_fork:
            for _ in range(n - 1):
                branch = first.fork()
                if verify:
                    _check_state(snapshot, len(snapshot.actions), branch)
                branches.append(branch)
        elif n > 1:
            branches.extend(_replay_n(snapshot, n - 1, factory, verify=verify))
    except BaseException:
        for branch in branches:
            branch.close()
        raise
    return branches
