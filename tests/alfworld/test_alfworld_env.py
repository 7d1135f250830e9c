"""AlfworldEnv on real ALFWorld games: contract, walkthroughs, canonicalisation, limits, processes, argv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from alfworld_testlib import ONE_PER_TYPE, needs_alfworld

from tempo_rl.envs.alfworld.walkthrough import has_raw_ids


def _children() -> set[int]:
    """PIDs of this process's live child processes (from /proc, no psutil needed)."""
    me = os.getpid()
    kids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z":
            kids.add(int(entry.name))
    return kids


@pytest.mark.parametrize("task_type", sorted(ONE_PER_TYPE))
def test_walkthrough_wins_one_game_per_task_type(task_type: str, games_root: Path) -> None:
    needs_alfworld()
    from tempo_rl.envs.alfworld.env import AlfworldEnv

    game = next((games_root / "json_2.1.1" / ONE_PER_TYPE[task_type]).rglob("game.tw-pddl"))
    raw = json.loads(game.read_text())["walkthrough"]
    env = AlfworldEnv(game, max_steps=50)
    try:
        obs = env.reset()
        assert obs.info["task"] and obs.info["task"].endswith(".")
        assert "Your task is to: " + obs.info["task"] in obs.text
        walkthrough = env.walkthrough()
        assert walkthrough is not None and len(walkthrough) == len(raw)
        assert not has_raw_ids(walkthrough)
        if game.parts[-4] == "valid_unseen":
            assert has_raw_ids(raw), "valid_unseen walkthroughs are stored with raw PDDL ids"
        privileged = env.privileged_info()
        assert privileged is not None and walkthrough[0] in privileged
        assert privileged not in obs.text and walkthrough[0] not in obs.text
        result = None
        for i, command in enumerate(walkthrough):
            assert command in (obs.admissible_actions or ()), f"step {i}: {command!r} not admissible"
            result = env.step(command)
            obs = result.observation
            if i < len(walkthrough) - 1:
                assert result.reward == 0.0 and not result.done
        assert result is not None
        assert result.reward == 1.0 and result.terminated and not result.truncated and result.info["won"]
        with pytest.raises(RuntimeError, match="episode is over"):
            env.step("look")
    finally:
        env.close()


def test_inadmissible_odd_case_and_step_limit(small_game: Path) -> None:
    from tempo_rl.envs.alfworld.env import AlfworldEnv, canonicalize_action

    env = AlfworldEnv(small_game, max_steps=3)
    try:
        obs = env.reset()
        first = obs.admissible_actions[0]
        odd = "  " + "  ".join(w.upper() for w in first.split()) + "\t"
        assert canonicalize_action(odd) == first
        r1 = env.step(odd)
        assert (
            r1.info["admissible"] and r1.info["action"] == first and r1.observation.text != "Nothing happens."
        )
        r2 = env.step("dance with the desklamp 1")
        assert r2.observation.text == "Nothing happens." and r2.info["admissible"] is False
        assert not r2.done and r2.reward == 0.0
        r3 = env.step("look")
        assert r3.truncated and not r3.terminated and r3.reward == 0.0
        assert env.steps_taken == 3
    finally:
        env.close()


def test_fingerprint_tracks_the_pddl_state(small_game: Path) -> None:
    from tempo_rl.envs.alfworld.env import AlfworldEnv

    env = AlfworldEnv(small_game)
    try:
        env.reset()
        f0 = env.state_fingerprint()
        env.step("dance")  # inadmissible: "Nothing happens.", no fact changes
        assert env.state_fingerprint() == f0
        env.step("look")  # adds the fact checked(<location>)
        assert env.state_fingerprint() != f0
        go = next(a for a in env.reset().admissible_actions if a.startswith("go to"))
        assert env.state_fingerprint() == f0
        env.step(go)
        assert env.state_fingerprint() != f0
    finally:
        env.close()


def test_no_process_left_and_argv_untouched(small_game: Path) -> None:
    from tempo_rl.envs.alfworld.env import AlfworldEnv
    from tempo_rl.envs.alfworld.fast import get_pool

    before = _children()
    argv_obj, argv = sys.argv, list(sys.argv)
    get_pool().clear()
    env = AlfworldEnv(small_game)  # a fresh engine: PDDL translation runs (it rewrites sys.argv inside)
    env.reset()
    env.step("look")
    env.close()
    env.close()  # idempotent
    assert sys.argv is argv_obj and sys.argv == argv
    assert _children() <= before
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


_ASYNC_SCRIPT = """
import functools, json, os, sys
from pathlib import Path
import textworld, textworld.gym
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
from tempo_rl.envs.alfworld import compat

def children():
    me, kids = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                kids.add(int(entry.name))
    return kids

argv = list(sys.argv)
assert not compat._PATCHED  # this process never patches: only the wrapper inside each worker does
env_id = textworld.gym.register_games(
    [sys.argv[1]], textworld.EnvInfos(admissible_commands=True), batch_size=2, asynchronous=True,
    auto_reset=False, max_episode_steps=5,
    wrappers=[compat.CompatWrapper, functools.partial(AlfredDemangler, shuffle=False), AlfredInfos],
)
env = textworld.gym.make(env_id)
obs, _ = env.reset()
during = len(children())
compat.close_batch_env(env)
print(json.dumps({"obs": list(obs), "during": during, "after": len(children()), "argv": sys.argv == argv,
                  "patched_here": compat._PATCHED}))
"""


@pytest.mark.slow
def test_async_batch_env_workers_get_the_fix_and_leave_no_process(small_game: Path) -> None:
    """TextWorld's async batch env (the reference restore's): the PEP 667 fix reaches the worker processes
    through CompatWrapper alone, and close_batch_env leaves no worker behind."""
    proc = subprocess.run(
        [sys.executable, "-c", _ASYNC_SCRIPT, str(small_game)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["obs"]) == 2 and out["obs"][0] == out["obs"][1] and "Your task is to" in out["obs"][0]
    assert out["during"] == 2 and out["after"] == 0
    assert out["argv"] and out["patched_here"] is False


def test_eval_symbol_fix_resolves_grammar_variables() -> None:
    needs_alfworld()
    from textworld.envs.pddl import textgen

    from tempo_rl.envs.alfworld.compat import patch_textworld

    patch_textworld()

    class Info:
        name = "cabinet 1"

    symbol = textgen.EvalSymbol("r.name + ' / ' + str(len(context['variables']))")
    out = symbol.derive({"variables": {"r": Info()}})
    assert [str(s) for s in out] == ["cabinet 1 / 1"]


_STOCK_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    if sys.version_info >= (3, 13):  # stock TextWorld cannot reset on 3.13 without the PEP 667 fix
        from tempo_rl.envs.alfworld.compat import patch_textworld
        patch_textworld()
    traces = []
    for game, actions in json.loads(sys.stdin.read()):
        env = textworld.start(game, textworld.EnvInfos(admissible_commands=True),
                              wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
        s = env.reset()
        out = [[s.feedback, s["admissible_commands"]]]
        for a in actions:
            s, _, _ = env.step(a)
            out.append([s.feedback, s["admissible_commands"]])
        traces.append(out)
    print(json.dumps(traces))
    """
)


def _ours_and_stock(jobs: list[tuple[Path, int]]) -> tuple[list[object], list[object]]:
    """Play each (game, n) with AlfworldEnv -- n > 0: n seeded random actions, n == 0: the walkthrough -- and
    the same actions in a fresh interpreter with stock TextWorld (none of our caches); return both traces."""
    import random

    from tempo_rl.envs.alfworld.env import AlfworldEnv

    ours, payload = [], []
    for game, n_random in jobs:
        env = AlfworldEnv(game, max_steps=200)
        rng = random.Random(3)
        try:
            obs = env.reset()
            trace = [[obs.text, list(obs.admissible_actions)]]
            actions: list[str] = []
            for i in range(n_random or len(env.walkthrough() or ())):
                if n_random:
                    actions.append(rng.choice([a for a in obs.admissible_actions if a != "help"] + ["jump"]))
                else:
                    actions.append((env.walkthrough() or ())[i])
                obs = env.step(actions[-1]).observation
                trace.append([obs.text, list(obs.admissible_actions)])
        finally:
            env.close()
        ours.append(trace)
        payload.append([str(game), actions])
    proc = subprocess.run(
        [sys.executable, "-c", _STOCK_SCRIPT],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return ours, json.loads(proc.stdout.strip().splitlines()[-1])


def _game(games_root: Path, task_type: str) -> Path:
    return next((games_root / "json_2.1.1" / ONE_PER_TYPE[task_type]).rglob("game.tw-pddl"))


def test_observations_match_stock_textworld(small_game: Path, games_root: Path) -> None:
    """Our caches leave every text and admissible list identical to a stock TextWorld process."""
    ours, stock = _ours_and_stock(
        [(small_game, 12), (_game(games_root, "pick_clean_then_place_in_recep"), 0)]
    )
    assert len(ours[1]) > 5
    assert stock == ours


@pytest.mark.slow
def test_heat_and_cool_texts_match_stock_textworld(games_root: Path) -> None:
    types = ("pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep")
    ours, stock = _ours_and_stock([(_game(games_root, t), 0) for t in types])
    assert stock == ours


def test_bad_arguments_are_clear(tmp_path: Path) -> None:
    from tempo_rl.envs.alfworld.data import AlfworldDataError
    from tempo_rl.envs.alfworld.env import AlfworldEnv

    with pytest.raises(AlfworldDataError, match="does not exist"):
        AlfworldEnv(tmp_path / "missing.tw-pddl")
    bad = tmp_path / "game.tw-pddl"
    bad.write_text("{")
    with pytest.raises(AlfworldDataError, match=r"corrupt game file .*game\.tw-pddl"):
        AlfworldEnv(bad)
    with pytest.raises(ValueError, match="max_steps"):
        AlfworldEnv(bad, max_steps=0)


@pytest.mark.slow
def test_train_game_without_walkthrough_gets_a_verified_cached_planner_one(tmp_path: Path) -> None:
    needs_alfworld()
    from alfworld_testlib import copy_game

    from tempo_rl.envs.alfworld.env import AlfworldEnv

    game = copy_game("valid_train/pick_and_place_simple-AlarmClock-None-Desk-307", tmp_path)
    assert "walkthrough" not in json.loads(game.read_text())
    cache = tmp_path / "cache"
    auto = AlfworldEnv(game, cache_dir=cache)
    try:
        assert auto.walkthrough() is None and auto.privileged_info() is None  # absent, not unusable
    finally:
        auto.close()
    env = AlfworldEnv(game, walkthrough="planner", cache_dir=cache)
    try:
        plan = env.walkthrough()
        assert plan and not has_raw_ids(plan)
        obs = env.reset()
        for command in plan:
            assert command in obs.admissible_actions
            result = env.step(command)
            obs = result.observation
        assert result.terminated and result.reward == 1.0
    finally:
        env.close()
    assert list(cache.rglob("*.json"))
    again = AlfworldEnv(game, cache_dir=cache)  # "auto" now finds the cached, verified plan
    try:
        assert again.walkthrough() == plan
    finally:
        again.close()
