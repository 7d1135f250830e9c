"""Knights and KeyDoor: rules pinned on hand-checked cases, seeded determinism, solvability, no leaks."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tempo_rl.envs import make
from tempo_rl.envs.keydoor import KeyDoorEnv, Room
from tempo_rl.envs.knights import KnightsEnv, knight_attacks, square_name


# ---------------------------------------------------------------- knights
def test_knight_attacks_pinned():
    assert knight_attacks((0, 0), (1, 2)) and knight_attacks((0, 0), (2, 1))
    assert knight_attacks((3, 3), (1, 2)) and knight_attacks((3, 3), (5, 4))
    assert not knight_attacks((0, 0), (1, 1)) and not knight_attacks((0, 0), (2, 2))
    assert not knight_attacks((0, 0), (0, 0)) and not knight_attacks((0, 0), (0, 3))
    assert square_name((2, 0)) == "c1" and square_name((5, 5)) == "f6"


def _knights_with(fixed, **kwargs) -> KnightsEnv:
    env = KnightsEnv(**kwargs)
    env.reset(seed=0)
    env._fixed = frozenset(fixed)  # a hand-made instance for pinned texts
    env._solution = ()
    return env


def test_knights_immediate_feedback_texts():
    env = _knights_with({(0, 0)}, size=5, preplaced=1, place=2, max_steps=6)
    r = env.step("place b3")  # (1, 2) is a knight's move from a1
    assert r.observation.text.startswith("Rejected: two pieces conflict.") and r.reward == 0 and not r.done
    r = env.step("place a1")
    assert r.observation.text.startswith("Rejected: a1 is taken.")
    r = env.step("remove a1")
    assert r.observation.text.startswith("Rejected: a1 is fixed.")
    r = env.step("jump around")
    assert r.observation.text.startswith("Rejected: unknown action.")
    r = env.step("place   C3 ")  # normalised
    assert r.observation.text.startswith("Placed c3.") and "Placed 1 of 2" in r.observation.text
    r = env.step("place e5")
    assert r.terminated and not r.truncated and r.reward == 1.0
    assert r.observation.text == "Placed e5. Solved. Fixed: a1. Placed: c3 e5. Placed 2 of 2. Steps left: 0."
    after = env.step("place a2")
    assert after.observation.text.startswith("The episode is over.") and after.reward == 0.0


def test_knights_final_feedback_and_truncation():
    env = _knights_with({(0, 0)}, size=5, preplaced=1, place=2, max_steps=4, feedback="final")
    assert env.step("place b3").observation.text.startswith("Placed b3.")  # accepted although it conflicts
    r = env.step("place e5")
    assert "Not solved: some pieces conflict." in r.observation.text and not r.done
    r = env.step("remove b3")
    assert r.observation.text.startswith("Removed b3.")
    r = env.step("place c2")  # (2, 1) is a knight's move from a1: the verdict fails and the 4 steps are used
    assert "Not solved" in r.observation.text
    assert r.truncated and not r.terminated and r.reward == 0.0


def test_knights_solve_beats_truncation_on_the_last_step():
    env = _knights_with({(0, 0)}, size=5, preplaced=1, place=1, max_steps=1)
    r = env.step("place e5")
    assert r.terminated and not r.truncated and r.reward == 1.0


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), size=st.integers(5, 7), place=st.integers(1, 7))
def test_knights_instances_are_solvable_and_walkthrough_solves(seed, size, place):
    env = KnightsEnv(size=size, preplaced=2, place=place)
    first = env.reset(seed)
    assert first == KnightsEnv(size=size, preplaced=2, place=place).reset(seed)  # deterministic
    fixed = sorted(env._fixed)
    assert len(fixed) == 2 and not knight_attacks(fixed[0], fixed[1])
    result = None
    for action in env.walkthrough() or ():
        assert action in env._admissible()
        result = env.step(action)
    assert result is not None and result.terminated and result.reward == 1.0


def test_knights_privileged_info_never_in_observations():
    for seed in range(5):
        env = make("knights")
        obs = env.reset(seed)
        info = env.privileged_info() or ""
        assert "knight" in info and "One solution" in info
        observations = [obs]
        rng = random.Random(seed)
        while not env.done:
            observations.append(
                env.step(rng.choice(env.last_observation.admissible_actions or ("x",))).observation
            )
        for o in observations:
            text = o.text
            assert "knight" not in text.lower() and "solution" not in text.lower() and "colour" not in text
            assert len(text.split()) <= 60
            # the critic-only conflict note never leaks into the text
            assert o.privileged_state is not None and o.privileged_state not in text


def test_knights_bad_arguments():
    for kwargs in (
        {"size": 9},
        {"place": 0},
        {"preplaced": -1},
        {"size": 4, "place": 8},
        {"feedback": "soon"},
    ):
        with pytest.raises(ValueError):
            KnightsEnv(**kwargs)


def test_knights_expert_action_recovers_from_wrong_placements():
    env = KnightsEnv(size=6, preplaced=2, place=4, max_steps=40)
    obs = env.reset(7)
    rng = random.Random(0)
    for _ in range(3):  # place some random legal pieces first
        env.step(rng.choice([a for a in obs.admissible_actions or () if a.startswith("place")]))
    result = None
    while not env._done:
        action = env.expert_action()
        assert action is not None
        result = env.step(action)
    assert result is not None and result.terminated


# ---------------------------------------------------------------- keydoor
def _corridor(*rooms: Room, horizon: int = 20) -> KeyDoorEnv:
    env = KeyDoorEnv(horizon=horizon, keys=1, colours=2)
    env.reset(0)
    env._rooms = rooms
    env._taken = [False] * len(rooms)
    env._opened = [False] * len(rooms)
    return env


HAND = (
    Room("clue", 0, "blue"),
    Room("key", 0, "blue", ("red", "blue")),
    Room("plain"),
    Room("lock", 0, "blue"),
    Room("exit"),
)


def test_keydoor_pinned_walk_with_the_right_key():
    env = _corridor(*HAND)
    texts = []
    for action in ("go on", "take blue", "go on", "go on", "open door", "go on"):
        r = env.step(action)
        texts.append(r.observation.text)
        assert r.reward == 0.0 and not r.done
    assert texts[0] == "You go on. Room 2 of 5. Keys here: red, blue. You carry nothing. Steps left: 19."
    assert texts[1] == (
        "You take the blue key. The other keys vanish. Room 2 of 5. An empty key rack. "
        "You carry blue key. Steps left: 18."
    )
    assert texts[3] == "You go on. Room 4 of 5. A locked door. You carry blue key. Steps left: 16."
    assert (
        texts[4]
        == "The blue key opens the door. Room 4 of 5. An open door. You carry nothing. Steps left: 15."
    )
    last = env.step("go on")
    assert last.terminated and not last.truncated and last.reward == 1.0
    assert last.observation.text.startswith("You leave through the exit. You win.")


def test_keydoor_wrong_key_dooms_the_episode_silently():
    env = _corridor(*HAND, horizon=12)
    env.step("go on")
    assert env.solvable()
    env.step("take red")
    assert not env.solvable() and env.expert_action() is None
    texts = [env.step(a).observation.text for a in ("go on", "go on")]
    assert "lost" not in " ".join(texts).lower()
    r = env.step("open door")
    assert r.observation.text.startswith("The door stays locked.")
    assert env.step("go on").observation.text.startswith("The door is locked.")
    results = [env.step("go back") for _ in range(6)]  # steps 7..12 of 12
    assert results[-1].truncated and not results[-1].terminated and results[-1].reward == 0.0
    assert all(not r.done for r in results[:-1])


def test_keydoor_admissible_actions_and_refusals():
    env = _corridor(*HAND)
    assert env._admissible() == ("go on",)
    env.step("go on")
    assert env._admissible() == ("take red", "take blue", "go on", "go back")
    assert env.step("take green").observation.text.startswith("Nothing happens.")
    assert env.step("dance").observation.text.startswith("Nothing happens.")
    env.step("go on")
    env.step("go on")
    assert env._admissible() == ("open door", "go back")


def test_keydoor_skipped_key_can_be_fetched_by_going_back():
    env = _corridor(*HAND, horizon=30)
    for action in ("go on", "go on", "go on"):
        env.step(action)  # walked past the key room without a key
    assert env.solvable()
    plan = env._expert_plan()
    assert plan == ["go back", "go back", "take blue", "go on", "go on", "open door", "go on", "go on"]


@pytest.mark.parametrize("horizon", [30, 40, 50, 60])
def test_keydoor_layouts_walkthrough_wins_and_fits_the_horizon(horizon):
    for seed in range(20):
        env = KeyDoorEnv(horizon=horizon)
        obs = env.reset(seed)
        assert obs == KeyDoorEnv(horizon=horizon).reset(seed)
        rooms = env.layout()
        kinds = [r.kind for r in rooms]
        assert kinds[-1] == "exit" and kinds.count("lock") == env.keys == kinds.count("key") == kinds.count(
            "clue"
        )
        for i in range(env.keys):
            clue = next(j for j, r in enumerate(rooms) if r.kind == "clue" and r.lock == i)
            key = next(j for j, r in enumerate(rooms) if r.kind == "key" and r.lock == i)
            lock = next(j for j, r in enumerate(rooms) if r.kind == "lock" and r.lock == i)
            assert clue < key < lock and lock - key >= 3  # the key is picked up rooms before its lock
            assert rooms[key].colour in rooms[key].offered and rooms[clue].colour == rooms[lock].colour
        walk = env.walkthrough() or ()
        assert horizon - max(3, horizon // 8) == len(walk) >= 30 * 0.8
        result = None
        for action in walk:
            assert action in (env._admissible())
            result = env.step(action)
        assert result is not None and result.terminated and result.reward == 1.0


def test_keydoor_random_play_rarely_wins_and_expert_always_wins():
    wins_random = wins_expert = 0
    for seed in range(40):
        env = KeyDoorEnv(horizon=40)
        obs = env.reset(seed)
        rng = random.Random(seed)
        while True:
            r = env.step(rng.choice(obs.admissible_actions or ("go on",)))
            obs = r.observation
            if r.done:
                break
        wins_random += int(r.reward)
        env.reset(seed)
        while not env._done:
            r = env.step(env.expert_action() or "go on")
        wins_expert += int(r.reward)
    assert wins_random == 0 and wins_expert == 40


def test_keydoor_observations_are_compact_and_leak_nothing():
    for seed in range(5):
        env = make("keydoor", horizon=50)
        obs = env.reset(seed)
        assert obs.info["task"] in obs.text
        secret = env.privileged_info() or ""
        assert "needs the" in secret and "walkthrough" in secret.lower()
        rng = random.Random(seed)
        texts = [obs.text]
        while not env.done:
            texts.append(
                env.step(rng.choice(env.last_observation.admissible_actions or ("go on",))).observation.text
            )
        for text in texts:
            assert len(text.split()) <= 40
            assert "needs" not in text and "lock 1" not in text and "walkthrough" not in text.lower()


def test_keydoor_bad_arguments():
    for kwargs in (
        {"horizon": 5},
        {"horizon": 40, "keys": 0},
        {"colours": 1},
        {"colours": 9},
        {"horizon": 20, "keys": 4},
    ):
        with pytest.raises(ValueError):
            KeyDoorEnv(**kwargs)


@pytest.mark.parametrize("gap", [0, 2])
def test_keydoor_clue_gap_fixes_the_memory_distance(gap):
    for seed in range(10):
        env = KeyDoorEnv(horizon=40, clue_gap=gap)
        env.reset(seed)
        rooms = env.layout()
        for i in range(env.keys):
            clue = next(j for j, r in enumerate(rooms) if r.kind == "clue" and r.lock == i)
            key = next(j for j, r in enumerate(rooms) if r.kind == "key" and r.lock == i)
            assert key - clue == gap + 1
        assert len(env.walkthrough() or ()) == 40 - 5
    with pytest.raises(ValueError, match="clue_gap"):
        KeyDoorEnv(horizon=40, clue_gap=7)


@pytest.mark.parametrize(("keys", "gap"), [(1, 0), (1, 2), (2, 1)])
def test_keydoor_lock_gap_puts_the_consequence_right_after_the_choice(keys, gap):
    horizon = 24
    for seed in range(10):
        env = KeyDoorEnv(horizon=horizon, keys=keys, colours=2, clue_gap=0, lock_gap=gap)
        env.reset(seed)
        rooms = env.layout()
        last_key = max(j for j, r in enumerate(rooms) if r.kind == "key")
        first_lock = min(j for j, r in enumerate(rooms) if r.kind == "lock")
        last_lock = max(j for j, r in enumerate(rooms) if r.kind == "lock")
        assert first_lock - last_key == gap + 1
        assert all(r.kind == "plain" for r in rooms[last_lock + 1 : -1]) and rooms[-1].kind == "exit"
        assert len(env.walkthrough() or ()) == horizon - 3  # the step budget is unchanged
        if keys == 1:  # a wrong key shows its consequence when the door is tried, long before the step limit
            plan = list(env.walkthrough() or ())
            wrong = "blue" if plan[1] == "take red" else "red"
            for action in ["go on", f"take {wrong}"] + ["go on"] * (gap + 1):
                env.step(action)
            result = env.step("open door")
            assert "The door stays locked." in result.observation.text
            assert not (result.terminated or result.truncated) and not env.solvable()


def test_keydoor_lock_gap_bad_values():
    for bad in (-1, 99, 1.5):
        with pytest.raises(ValueError, match="lock_gap"):
            KeyDoorEnv(horizon=16, keys=1, colours=2, clue_gap=0, lock_gap=bad)


def test_keydoor_clue_at_key_repeats_the_sign_in_the_key_room_only():
    for seed in range(10):
        plain = KeyDoorEnv(horizon=24, keys=2, colours=3)
        shown = KeyDoorEnv(horizon=24, keys=2, colours=3, clue_at_key=True)
        texts = []
        for env in (plain, shown):
            obs = env.reset(seed)
            run = [obs.text]
            reward = 0.0
            for action in env.walkthrough() or ():
                result = env.step(action)
                run.append(result.observation.text)
                reward += result.reward
            texts.append(run)
            assert reward == 1.0  # the walkthrough still wins: only the text changed
        assert plain.layout() == shown.layout()
        rooms = shown.layout()
        clues = {r.lock: r.colour for r in rooms if r.kind == "clue"}
        seen = 0
        for before, after in zip(*texts):
            if "Keys here:" in after:  # an untaken key rack: its own lock's clue, right before the keys
                room = rooms[int(re.search(r"Room (\d+) of", after).group(1)) - 1]
                assert room.kind == "key"
                sign = f"A sign shows a {clues[room.lock]} key. "
                assert sign + "Keys here:" in after and after.replace(sign, "") == before
                seen += 1
            else:
                assert after == before
        assert seen == shown.keys
    with pytest.raises(ValueError, match="clue_at_key"):
        KeyDoorEnv(horizon=16, clue_at_key="yes")  # type: ignore[arg-type]


def _kinds(env: KeyDoorEnv) -> list[tuple[str, int, tuple[str, ...]]]:
    return [(r.kind, r.lock, r.offered) for r in env.layout()]


def _plays(env: KeyDoorEnv, actions: list[str]) -> float:
    return sum(env.step(a).reward for a in actions)


def _last_text(env: KeyDoorEnv, actions: list[str]) -> str:
    text = ""
    for a in actions:
        text = env.step(a).observation.text
    return text


def test_keydoor_a_fixed_lock_colour_needs_that_key_in_every_game():
    for seed in range(12):
        drawn = KeyDoorEnv(horizon=24, keys=2, colours=3)
        blue = KeyDoorEnv(horizon=24, keys=2, colours=3, lock_colour="blue")
        drawn.reset(seed)
        blue.reset(seed)
        assert _kinds(blue) == _kinds(drawn)  # the same corridor and the same key racks
        assert {r.colour for r in blue.layout() if r.kind in ("clue", "key", "lock")} == {"blue"}
        plan = list(blue.walkthrough() or ())
        assert [a for a in plan if a.startswith("take ")] == ["take blue", "take blue"]
        assert _plays(blue, plan) == 1.0
        blue.reset(seed)  # red for the first lock: it stays locked, silently, and the exit is out of reach
        wrong = [("take red" if a.startswith("take ") else a) for a in plan]
        assert _last_text(blue, wrong[: wrong.index("open door") + 1]).startswith("The door stays locked.")
        assert blue.oracle_value(100) == 0.0


def test_keydoor_independent_lock_colours_make_the_signs_say_nothing():
    agree, games = 0, 60
    for seed in range(games):
        env = KeyDoorEnv(
            horizon=16, keys=1, colours=2, clue_gap=0, lock_gap=0, clue_at_key=True, lock_colour="independent"
        )
        obs = env.reset(seed)
        rooms = env.layout()
        sign = next(r.colour for r in rooms if r.kind == "clue")
        lock = next(r.colour for r in rooms if r.kind == "lock")
        assert next(r.colour for r in rooms if r.kind == "key") == lock  # the right key is the lock's
        assert f"A sign shows a {sign} key." in obs.text
        assert f"the right key is {lock}" in (env.privileged_info() or "")
        agree += sign == lock
        assert _plays(env, list(env.walkthrough() or ())) == 1.0  # the walkthrough takes the lock's key
        # the rest of the layout is the one the sign's colour draws
        random_env = KeyDoorEnv(horizon=16, keys=1, colours=2, clue_gap=0, lock_gap=0, clue_at_key=True)
        random_env.reset(seed)
        assert _kinds(random_env) == _kinds(env)
        assert next(r.colour for r in random_env.layout() if r.kind == "clue") == sign
    assert 15 <= agree <= 45  # about half: the sign carries no information about the lock


@pytest.mark.parametrize("bad", ["purple", "yellow", "", None])
def test_keydoor_lock_colour_bad_values_name_the_choices(bad):
    with pytest.raises(
        ValueError, match="lock_colour must be 'random', 'independent' or one of the 2 colours"
    ):
        KeyDoorEnv(horizon=16, keys=1, colours=2, lock_colour=bad)  # type: ignore[arg-type]
