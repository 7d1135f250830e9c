"""A recording wrapper: any :class:`ReplayableEnv` that can say, at any step, how to rebuild its state.

:class:`RecordedEnv` forwards ``reset``/``step`` to the wrapped env and records, as the episode goes, the
reset seed, every action, the digest of every observation (index 0 = the reset observation, index i = the
observation after action i), the observation texts (for divergence diffs) and, when the env offers one, its
hidden-state fingerprint after every step. :meth:`RecordedEnv.snapshot` turns that record into an immutable
:class:`~tempo_rl.envs.snapshot.Snapshot` at any point; :func:`tempo_rl.envs.restore.restore` rebuilds a live
env from it.

Cost: recording is O(1) per step (one SHA-256 over the observation); ``snapshot()`` is O(depth).
"""

from __future__ import annotations

from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult, require_reset
from tempo_rl.envs.snapshot import EnvSpec, Snapshot, observation_digest

__all__ = ["RecordedEnv"]


class RecordedEnv(ReplayableEnv):
    """Wraps an env and records what is needed to snapshot, restore and verify it.

    Args:
        env: the env to wrap (must not itself be stepped by anyone else while wrapped).
        spec: how to rebuild ``env`` (registered name + constructor kwargs). Required for :meth:`snapshot`;
            :func:`tempo_rl.envs.make` fills it in. ``None`` is allowed for ad-hoc use, but such an env cannot
            be snapshotted.

    The wrapper is itself a :class:`ReplayableEnv`: ``privileged_info``, ``walkthrough``,
    ``expert_action``, ``state_fingerprint``, ``oracle_value``, ``fork`` and ``close`` delegate to the wrapped env, and :meth:`fork` also copies
    the recorded history so the copy snapshots to the same state.
    """

    def __init__(self, env: ReplayableEnv, spec: EnvSpec | None = None) -> None:
        if not isinstance(env, ReplayableEnv):
            raise TypeError(
                f"RecordedEnv wraps a ReplayableEnv, got {type(env).__name__}; subclass "
                "tempo_rl.envs.ReplayableEnv and implement reset(seed) and step(action)"
            )
        if isinstance(env, RecordedEnv):
            raise TypeError("env is already a RecordedEnv; wrap the inner env (env.env) instead")
        self._env = env
        self._spec = spec
        self._spec_key = spec.key() if spec is not None else None
        self._seed: int | None = None
        self._started = False
        self._actions: list[str] = []
        self._digests: list[str] = []
        self._texts: list[str] = []
        self._states: list[str | None] | None = None
        self._last: Observation | None = None
        self._done = False

    # ------------------------------------------------------------------ recorded state
    @property
    def env(self) -> ReplayableEnv:
        """The wrapped env."""
        return self._env

    @property
    def spec(self) -> EnvSpec | None:
        """How to rebuild the wrapped env, or None for an ad-hoc wrapper."""
        return self._spec

    @property
    def spec_key(self) -> str | None:
        """``spec.key()``, computed once (None for an ad-hoc wrapper)."""
        return self._spec_key

    @property
    def seed(self) -> int | None:
        """The seed of the last ``reset``."""
        return self._seed

    @property
    def actions(self) -> tuple[str, ...]:
        """The actions applied since the last reset, in order."""
        return tuple(self._actions)

    @property
    def observation_digests(self) -> tuple[str, ...]:
        """``len(actions) + 1`` observation digests, the reset observation first."""
        return tuple(self._digests)

    @property
    def round_index(self) -> int:
        """How many actions have been applied since the last reset."""
        return len(self._actions)

    @property
    def last_observation(self) -> Observation:
        """The most recent observation (raises if the env was never reset)."""
        return require_reset(self._last)

    @property
    def last_state_fingerprint(self) -> str | None:
        """The hidden-state fingerprint recorded after the last reset/step (None when the env offers none)."""
        return self._states[-1] if self._states else None

    @property
    def done(self) -> bool:
        """True once a step returned ``terminated`` or ``truncated`` (until the next reset)."""
        return self._done

    # ------------------------------------------------------------------ env protocol
    def reset(self, seed: int | None = None) -> Observation:
        """Reset the wrapped env and start a new record."""
        observation = self._env.reset(seed)
        self._seed = seed
        self._started = True
        self._actions = []
        self._digests = [observation_digest(observation)]
        self._texts = [observation.text]
        fingerprint = self._env.state_fingerprint()
        self._states = [fingerprint] if fingerprint is not None else None
        self._last = observation
        self._done = False
        return observation

    def step(self, action: str) -> StepResult:
        """Step the wrapped env and record the action, the observation digest and the state fingerprint."""
        if not self._started:
            raise RuntimeError("step() before reset(); call reset(seed) first")
        if not isinstance(action, str):
            raise TypeError(f"actions are text; got {type(action).__name__}: {action!r}")
        result = self._env.step(action)
        self._record(action, result)
        return result

    def _record(self, action: str, result: StepResult) -> None:
        self._actions.append(action)
        self._digests.append(observation_digest(result.observation))
        self._texts.append(result.observation.text)
        if self._states is not None:
            self._states.append(self._env.state_fingerprint())
        self._last = result.observation
        self._done = self._done or result.done

    def privileged_info(self) -> str | None:
        return self._env.privileged_info()

    def walkthrough(self) -> tuple[str, ...] | None:
        return self._env.walkthrough()

    def expert_action(self) -> str | None:
        return self._env.expert_action()

    def state_fingerprint(self) -> str | None:
        return self._env.state_fingerprint()

    def oracle_value(self, steps_left: int) -> float | None:
        return self._env.oracle_value(steps_left)

    @property
    def supports_fork(self) -> bool:
        """True when the wrapped env can fork itself."""
        return self._env.supports_fork

    def fork(self) -> RecordedEnv:
        """An independent copy of the live state *and* of the recorded history (the env copy is O(1))."""
        if not self._env.supports_fork:
            raise NotImplementedError(
                f"{type(self._env).__name__} does not implement fork(); restore it by replay instead"
            )
        copy = RecordedEnv(self._env.fork(), self._spec)
        copy._seed = self._seed
        copy._started = self._started
        copy._actions = list(self._actions)
        copy._digests = list(self._digests)
        copy._texts = list(self._texts)
        copy._states = list(self._states) if self._states is not None else None
        copy._last = self._last
        copy._done = self._done
        return copy

    def close(self) -> None:
        self._env.close()

    # ------------------------------------------------------------------ snapshots
    def snapshot(self, *, include_texts: bool = True) -> Snapshot:
        """An immutable, JSON-serialisable description of the current state.

        Args:
            include_texts: also store every observation text (lets a replay divergence show a text diff at any
                step; costs the texts' size in the snapshot). Digests are stored either way.

        Raises:
            RuntimeError: the env was never reset, or it has no spec (build it with :func:`tempo_rl.envs.make`
                or pass ``spec=`` to :class:`RecordedEnv`).
        """
        if not self._started or self._last is None:
            raise RuntimeError("snapshot() before reset(); call reset(seed) first")
        if self._spec is None:
            raise RuntimeError(
                "this RecordedEnv has no EnvSpec, so its snapshot could not be rebuilt; build the env with "
                "tempo_rl.envs.make(name, **kwargs) or pass spec=EnvSpec(name=..., kwargs=...)"
            )
        last = self._last
        return Snapshot(
            env=self._spec,
            seed=self._seed,
            actions=tuple(self._actions),
            observation_digests=tuple(self._digests),
            state_digests=tuple(self._states) if self._states is not None else None,
            last_observation=last.text,
            last_admissible=last.admissible_actions,
            observation_texts=tuple(self._texts) if include_texts else None,
        )

    def adopt(self, snapshot: Snapshot, observation: Observation, done: bool = False) -> RecordedEnv:
        """Take over ``snapshot``'s record after the wrapped env was brought to its state by other means (an
        adapter's own fast replay); ``observation`` is the env's current observation. Returns ``self``.

        Raises:
            ValueError: the spec differs from the snapshot's, or ``observation`` (or the live state
                fingerprint, when the snapshot recorded one) does not match the snapshot's last digest.
        """
        if self._spec_key is not None and self._spec_key != snapshot.env.key():
            raise ValueError(
                f"cannot adopt a snapshot of {snapshot.env.key()} into an env of {self._spec_key}"
            )
        if observation_digest(observation) != snapshot.observation_digests[-1]:
            raise ValueError(
                f"cannot adopt snapshot {snapshot.id}: the env's observation {observation.text[:200]!r} "
                "does not match the snapshot's last observation digest"
            )
        expected_state = snapshot.state_digests[-1] if snapshot.state_digests is not None else None
        if expected_state is not None and self._env.state_fingerprint() != expected_state:
            raise ValueError(f"cannot adopt snapshot {snapshot.id}: the live state fingerprint differs")
        if self._spec is None:
            self._spec, self._spec_key = snapshot.env, snapshot.env.key()
        self._seed = snapshot.seed
        self._started = True
        self._actions = list(snapshot.actions)
        self._digests = list(snapshot.observation_digests)
        if snapshot.observation_texts is not None:
            self._texts = list(snapshot.observation_texts)
        else:  # texts of intermediate steps are unknown; the digests stay the source of truth
            self._texts = [""] * len(snapshot.actions) + [observation.text]
        self._states = list(snapshot.state_digests) if snapshot.state_digests is not None else None
        self._last = observation
        self._done = done
        return self

    def matches(self, snapshot: Snapshot) -> bool:
        """True when this env's record is exactly ``snapshot``'s (same spec, seed, actions and digests)."""
        return (
            self._started
            and self._spec_key is not None
            and self._spec_key == snapshot.env.key()
            and self._seed == snapshot.seed
            and tuple(self._actions) == snapshot.actions
            and tuple(self._digests) == snapshot.observation_digests
        )

    def __repr__(self) -> str:
        name = self._spec.name if self._spec is not None else type(self._env).__name__
        return f"RecordedEnv({name}, seed={self._seed}, round={len(self._actions)})"
