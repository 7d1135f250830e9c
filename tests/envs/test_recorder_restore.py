"""Recorder, snapshot, restore, ForkCache and the divergence error, on built-in envs and tiny test envs."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.envs import (
    EnvSpec,
    ForkCache,
    Observation,
    RecordedEnv,
    ReplayableEnv,
    ReplayDivergenceError,
    Snapshot,
    SnapshotMismatchError,
    StepResult,
    make,
    observation_digest,
    register,
    restore,
    restore_branches,
    unregister,
)
from tempo_rl.envs.restore import continue_replay, snapshot_prefix


def _play(env: RecordedEnv, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        if env.done:
            break
        env.step(rng.choice(env.last_observation.admissible_actions or ("look",)))


class Counter(ReplayableEnv):
    """Deterministic: the state is a counter; 'add k' adds k; anything else is refused with feedback."""

    def __init__(self, start: int = 0) -> None:
        self.start = start
        self.value = start

    def reset(self, seed: int | None = None) -> Observation:
        self.value = self.start + (seed or 0)
        return Observation(f"value {self.value}", ("add 1", "add 2"))

    def step(self, action: str) -> StepResult:
        if action.startswith("add ") and action[4:].isdigit():
            self.value += int(action[4:])
            return StepResult(Observation(f"value {self.value}", ("add 1", "add 2")))
        return StepResult(Observation(f"bad action; value {self.value}", ("add 1", "add 2")))


class Noisy(Counter):
    """Deliberately non-deterministic: a global RNG (not seeded by reset) leaks into observation 3."""

    _rng = random.Random()

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        if self.value >= 3:
            return StepResult(Observation(f"value {self.value} noise {self._rng.random():.6f}", ("add 1",)))
        return result


class HiddenNoise(Counter):
    """Same visible text every time; the hidden state drifts (only a state fingerprint can catch it)."""

    _rng = random.Random()

    def reset(self, seed: int | None = None) -> Observation:
        self.hidden = self._rng.random()
        return super().reset(seed)

    def step(self, action: str) -> StepResult:
        return StepResult(Observation("same", ("add 1",)))

    def state_fingerprint(self) -> str | None:
        return f"{self.hidden:.9f}"


@pytest.fixture(autouse=True)
def _test_envs():
    register("test-counter", Counter, overwrite=True)
    register("test-noisy", Noisy, overwrite=True)
    register("test-hidden", HiddenNoise, overwrite=True)
    yield
    for name in ("test-counter", "test-noisy", "test-hidden"):
        unregister(name)


# ---------------------------------------------------------------- recorder
def test_recorder_records_every_digest_and_snapshot_roundtrips_json():
    env = make("test-counter", start=5)
    first = env.reset(seed=2)
    assert first.text == "value 7"
    env.step("add 2")
    env.step("oops")
    snap = env.snapshot()
    assert snap.env == EnvSpec(name="test-counter", kwargs={"start": 5})
    assert snap.seed == 2 and snap.actions == ("add 2", "oops") and snap.round_index == 2
    assert snap.observation_digests == (
        observation_digest(Observation("value 7", ("add 1", "add 2"))),
        observation_digest(Observation("value 9", ("add 1", "add 2"))),
        observation_digest(Observation("bad action; value 9", ("add 1", "add 2"))),
    )
    assert snap.observation_texts == ("value 7", "value 9", "bad action; value 9")
    assert snap.last_observation == "bad action; value 9" and snap.last_admissible == ("add 1", "add 2")
    assert snap.state_digests is None  # Counter offers no fingerprint
    again = Snapshot.from_json(snap.to_json())
    assert again == snap and again.id == snap.id
    json.loads(snap.to_json())  # plain JSON


def test_snapshot_without_reset_or_spec_is_a_clear_error():
    with pytest.raises(RuntimeError, match="reset"):
        make("knights").snapshot()
    bare = RecordedEnv(Counter())
    bare.reset()
    with pytest.raises(RuntimeError, match="EnvSpec"):
        bare.snapshot()
    with pytest.raises(TypeError, match="ReplayableEnv"):
        RecordedEnv(object())  # type: ignore[arg-type]


def test_episode_state_before_the_first_reset_is_one_clear_error():
    from tempo_rl.envs.arc import ArcStubEnv
    from tempo_rl.envs.core import require_reset

    assert require_reset(0) == 0 and require_reset("") == ""  # only None means "not reset"
    arc = ArcStubEnv()
    for read in (lambda: make("knights").last_observation, lambda: arc.frame, lambda: arc.game):
        with pytest.raises(RuntimeError, match=r"not been reset yet; call reset\(seed\) first"):
            read()
    arc.reset(1)
    assert arc.frame is not None and arc.game is not None


def test_fork_copies_history_and_is_independent():
    env = make("keydoor", horizon=40)
    env.reset(seed=4)
    _play(env, 10)
    copy = env.fork()
    assert copy.snapshot() == env.snapshot()
    env.step(env.last_observation.admissible_actions[0])
    assert copy.round_index == 10 and env.round_index == 11
    assert copy.state_fingerprint() != env.state_fingerprint()


# ---------------------------------------------------------------- restore by replay
@pytest.mark.parametrize(
    "spec", ["knights", "knights:feedback=final,size=5", "keydoor:horizon=40", "keydoor:horizon=60"]
)
def test_restore_by_replay_reproduces_state(spec):
    env = make(spec)
    env.reset(seed=11)
    _play(env, 25, seed=3)
    snap = env.snapshot()
    restored = restore(Snapshot.from_json(snap.to_json()))
    assert restored.snapshot() == snap
    assert restored.state_fingerprint() == env.state_fingerprint()
    assert restored.last_observation == env.last_observation
    # and it lives on identically
    for action in (env.last_observation.admissible_actions or ())[:1]:
        assert restored.step(action) == env.step(action)


def test_restore_verifies_every_step_not_only_the_last():
    env = make("test-counter")
    env.reset(seed=0)
    for action in ("add 1", "add 2", "add 1"):
        env.step(action)
    snap = env.snapshot()
    # Tamper with an intermediate digest only: the last observation still matches.
    digests = list(snap.observation_digests)
    digests[2] = "0" * 32
    texts = list(snap.observation_texts or ())
    texts[2] = "value 99"
    tampered = snap.model_copy(
        update={"observation_digests": tuple(digests), "observation_texts": tuple(texts)}
    )
    with pytest.raises(ReplayDivergenceError) as info:
        restore(tampered)
    err = info.value
    assert err.step == 2 and err.action == "add 2"
    assert err.expected == "value 99" and err.actual == "value 3"
    assert "step 2" in str(err) and "'add 2'" in str(err) and "-99" in str(err) and "+3" in str(err)
    restore(tampered, verify=False)  # verification off: no error


def test_nondeterministic_env_raises_divergence_naming_step_and_action():
    env = make("test-noisy")
    env.reset(seed=0)
    for action in ("add 1", "add 1", "add 1", "add 1"):
        env.step(action)
    with pytest.raises(ReplayDivergenceError) as info:
        restore(env.snapshot())
    assert info.value.step == 3 and info.value.action == "add 1" and info.value.kind == "observation"
    assert "noise" in info.value.expected and "noise" in info.value.actual


def test_hidden_state_drift_is_caught_by_the_fingerprint():
    env = make("test-hidden")
    env.reset(seed=0)
    env.step("add 1")
    with pytest.raises(ReplayDivergenceError) as info:
        restore(env.snapshot())
    assert info.value.kind == "state" and info.value.step == 0 and info.value.action is None


def test_divergence_diff_without_stored_texts_names_the_digest():
    env = make("test-noisy")
    env.reset(seed=0)
    for _ in range(4):
        env.step("add 1")
    snap = env.snapshot(include_texts=False)
    with pytest.raises(ReplayDivergenceError, match="not stored in the snapshot"):
        restore(snap)


def test_snapshot_from_another_env_or_newer_format_is_rejected():
    env = make("knights", size=5)
    env.reset(seed=1)
    snap = env.snapshot()
    with pytest.raises(SnapshotMismatchError, match="knights"):
        restore(snap, factory=lambda: make("knights", size=6))
    with pytest.raises(SnapshotMismatchError):
        restore(snap, factory=lambda: make("keydoor"))
    data = json.loads(snap.to_json())
    data["format_version"] = 99
    with pytest.raises(ValueError, match="newer"):
        Snapshot.from_json(json.dumps(data))
    data["format_version"] = 1
    data["observation_digests"] = data["observation_digests"] + ["x"]
    with pytest.raises(ValueError, match="len\\(actions\\) \\+ 1"):
        Snapshot.from_json(json.dumps(data))


def test_restore_with_raw_factory_wraps_it_with_the_snapshot_spec():
    env = make("test-counter", start=1)
    env.reset(seed=1)
    env.step("add 2")
    restored = restore(env.snapshot(), factory=lambda: Counter(start=1))
    assert restored.spec == env.spec and restored.last_observation.text == "value 4"
    with pytest.raises(ReplayDivergenceError) as info:  # wrong constructor args -> caught at reset
        restore(env.snapshot(), factory=lambda: Counter(start=0))
    assert info.value.step == 0


# ---------------------------------------------------------------- branches and cache
def test_restore_branches_are_independent_for_fork_and_replay_envs():
    for spec in ("keydoor", "test-counter"):
        env = make(spec)
        env.reset(seed=3)
        _play(env, 6)
        snap = env.snapshot()
        branches = restore_branches(snap, 4)
        assert len(branches) == 4 and len({id(b.env) for b in branches}) == 4
        first_action = branches[0].last_observation.admissible_actions[0]
        branches[0].step(first_action)
        for other in branches[1:]:
            assert other.snapshot() == snap
            assert other.state_fingerprint() == env.state_fingerprint()
    with pytest.raises(ValueError, match="n >= 1"):
        restore_branches(snap, 0)


def test_fork_cache_exact_and_ancestor_hits():
    cache = ForkCache(capacity=4)
    env = make("keydoor", horizon=60)
    env.reset(seed=5)
    _play(env, 10)
    assert cache.put(env)
    shallow = env.snapshot()
    _play(env, 20, seed=1)
    deep = env.snapshot()
    a = restore(shallow, cache=cache)
    assert cache.stats.hits == 1 and a.snapshot() == shallow
    a.step(a.last_observation.admissible_actions[0])  # mutating the restored env leaves the cache intact
    b = restore(deep, cache=cache)  # forks the depth-10 ancestor and replays 20 steps
    assert cache.stats.ancestor_hits == 1 and b.snapshot() == deep
    assert b.state_fingerprint() == env.state_fingerprint()
    c = restore(deep, cache=cache)  # the restored deep state was cached
    assert cache.stats.hits == 2 and c.snapshot() == deep
    assert restore(shallow, cache=cache).snapshot() == shallow


def test_fork_cache_is_lru_and_skips_envs_without_fork():
    cache = ForkCache(capacity=2)
    env = make("knights")
    env.reset(seed=0)
    snaps = []
    for _ in range(3):
        env.step(env.last_observation.admissible_actions[0])
        cache.put(env)
        snaps.append(env.snapshot())
    assert len(cache) == 2 and cache.stats.evictions == 1
    assert snaps[0] not in cache and snaps[2] in cache and cache.discard(snaps[2]) and len(cache) == 1
    counter = make("test-counter")
    counter.reset()
    assert cache.put(counter) is False
    restored = restore(counter.snapshot(), cache=cache)  # replays from reset
    assert cache.stats.misses == 1 and restored.last_observation.text == "value 0"
    with pytest.raises(ValueError, match="capacity"):
        ForkCache(0)


def test_continue_replay_and_prefix():
    env = make("keydoor")
    env.reset(seed=2)
    _play(env, 12)
    full = env.snapshot()
    prefix = snapshot_prefix(full, 5)
    at5 = restore(prefix)
    assert at5.snapshot().id == prefix.id
    continue_replay(at5, full)
    assert at5.snapshot() == full
    other = make("keydoor")
    other.reset(seed=3)
    with pytest.raises(SnapshotMismatchError):
        continue_replay(other, full)
    with pytest.raises(ValueError, match="depth"):
        snapshot_prefix(full, 99)


@settings(max_examples=30)
@given(
    spec=st.sampled_from(["knights:size=5,place=4", "keydoor:horizon=30", "keydoor:horizon=50,colours=2"]),
    seed=st.integers(0, 1000),
    choices=st.lists(st.integers(0, 50), max_size=40),
    cut=st.integers(0, 40),
)
def test_property_restore_reproduces_any_prefix(spec, seed, choices, cut):
    """For any seed, any admissible action sequence and any cut point, replay and fork restores agree."""
    env = make(spec)
    env.reset(seed)
    for choice in choices:
        if env.done:
            break
        admissible = env.last_observation.admissible_actions or ("noop",)
        env.step(admissible[choice % len(admissible)])
    full = env.snapshot()
    snap = snapshot_prefix(full, min(cut, full.round_index))
    replayed = restore(snap)
    assert replayed.snapshot().id == snap.id  # (a prefix snapshot does not know its last admissible list)
    assert replayed.last_observation.text == snap.last_observation
    cache = ForkCache()
    cache.put(restore(snapshot_prefix(full, 0)))
    via_ancestor = restore(snap, cache=cache)  # fork of the reset state + replay of the prefix
    assert via_ancestor.state_fingerprint() == replayed.state_fingerprint()
    continue_replay(replayed, full)
    assert replayed.state_fingerprint() == env.state_fingerprint()


def test_adopt_takes_over_a_snapshot_record_and_checks_it():
    env = make("keydoor")
    env.reset(seed=1)
    _play(env, 5)
    snap = env.snapshot()
    twin = make("keydoor")
    inner_obs = None
    twin.env.reset(1)  # bring the inner env to the state by other means (here: stepping it directly)
    for action in snap.actions:
        inner_obs = twin.env.step(action).observation
    assert inner_obs is not None
    assert twin.adopt(snap, inner_obs) is twin and twin.snapshot() == snap
    other = make("keydoor")
    other.env.reset(2)
    with pytest.raises(ValueError, match="does not match"):
        other.adopt(snap, other.env.reset(2))
    with pytest.raises(ValueError, match="cannot adopt a snapshot of"):
        make("knights").adopt(snap, inner_obs)


def test_registered_restorer_is_used_on_a_miss_but_not_with_a_factory():
    from tempo_rl.envs.restore import register_restorer

    calls = []

    def fast(snapshot, n, *, verify):
        calls.append((n, verify))
        envs = []
        for _ in range(n):
            env = make(snapshot.env)
            observation = env.env.reset(snapshot.seed)
            for action in snapshot.actions:
                observation = env.env.step(action).observation
            envs.append(env.adopt(snapshot, observation))
        return envs

    env = make("test-counter")
    env.reset(seed=2)
    env.step("add 1")
    snap = env.snapshot()
    register_restorer("test-counter", fast)
    try:
        branches = restore_branches(snap, 3)
        assert calls == [(1, True), (2, True)] and all(b.snapshot().id == snap.id for b in branches)
        restore(snap, factory=Counter)
        assert len(calls) == 2  # an explicit factory means generic replay
    finally:
        register_restorer("test-counter", None)
    with pytest.raises(TypeError, match="callable"):
        register_restorer("x", 3)  # type: ignore[arg-type]


def test_divergence_error_pickles_with_its_fields():
    import pickle

    err = ReplayDivergenceError(step=3, action="go on", expected="a b", actual="a c", snapshot_id="x1")
    again = pickle.loads(pickle.dumps(err))
    assert (again.step, again.action, again.expected, again.actual, again.snapshot_id) == (
        3,
        "go on",
        "a b",
        "a c",
        "x1",
    )
    assert str(again) == str(err)


@given(st.lists(st.sampled_from(["go", "on", "red", "key", "room", "3"]), max_size=12), st.data())
def test_text_diff_properties(words, data):
    from tempo_rl.envs.restore import text_diff

    expected = " ".join(words)
    assert text_diff(expected, expected) == "(texts are identical)"
    assert text_diff(expected, expected + "  ").startswith("texts differ only in whitespace")
    other = data.draw(st.lists(st.sampled_from(["go", "back", "blue", "key", "4"]), max_size=12))
    actual = " ".join(other)
    diff = text_diff(expected, actual, max_chars=200)
    assert len(diff) <= 200
    if expected.split() != actual.split():
        assert diff.startswith("diff: ") and ("[-" in diff or "{+" in diff)
