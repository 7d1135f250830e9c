"""``tempo-rl data alfworld --plan``: planner walkthroughs for games without one (ALFWorld's train split).

The real planner runs on the vendored train games; the fakes in ``plan_fakes.py`` stand in for a planner that
hangs, crashes, raises or finds nothing, so that every failure path runs in the real worker processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from alfworld_testlib import SMALL_GAME, TRAIN_GAMES, copy_game, needs_alfworld

from tempo_rl.cli import main
from tempo_rl.envs.alfworld.planning import content_key, plan_walkthroughs
from tempo_rl.envs.alfworld.walkthrough import load_cached_walkthrough

FAKE = "plan_fakes:fake_planner"
HERE = Path(__file__).resolve().parent


def _fake_game(root: Path, name: str) -> Path:
    """A minimal valid game file (no walkthrough) in ``root/name/``; its content is unique to ``name``."""
    folder = root / name
    folder.mkdir(parents=True)
    game = folder / "game.tw-pddl"
    game.write_text(json.dumps({"pddl_domain": "d", "grammar": "g", "pddl_problem": f"p {name}"}))
    return game


def test_failures_are_counted_listed_and_skipped_and_a_hang_times_out(tmp_path: Path) -> None:
    names = ["ok-1", "hang-1", "crash-1", "raise-1", "noplan-1", "ok-2"]
    games = [_fake_game(tmp_path / "games", n) for n in names]
    cache = tmp_path / "cache"
    seen: list[str] = []
    t0 = time.monotonic()
    report = plan_walkthroughs(
        games,
        cache_dir=cache,
        workers=2,
        timeout=2.0,
        planner=FAKE,
        on_outcome=lambda o: seen.append(o.status),
    )
    elapsed = time.monotonic() - t0
    statuses = {Path(o.game_file).parent.name: o.status for o in report.outcomes}
    assert statuses == {
        "ok-1": "planned",
        "hang-1": "timeout",
        "crash-1": "crashed",
        "raise-1": "error",
        "noplan-1": "no_plan",
        "ok-2": "planned",
    }
    assert [Path(o.game_file).parent.name for o in report.outcomes] == names  # input order
    assert sorted(seen) == sorted(statuses.values())  # every outcome reported once, as it happened
    assert len(report.failures) == 4 and report.with_walkthrough == 2
    assert report.summary() == "6 games: 2 planned, 1 crashed, 1 error, 1 no_plan, 1 timeout; 4 failed"
    by_name = {Path(o.game_file).parent.name: o for o in report.outcomes}
    assert "2 s" in by_name["hang-1"].detail and "exit code 3" in by_name["crash-1"].detail
    assert "RuntimeError: the planner broke" in by_name["raise-1"].detail
    assert 2.0 <= by_name["hang-1"].seconds < 10
    assert elapsed < 60  # the hung worker was killed, not waited for an hour
    for name in ("ok-1", "ok-2"):
        assert load_cached_walkthrough(cache, content_key(games[names.index(name)])) == ("look",)
    for name in ("hang-1", "crash-1", "raise-1", "noplan-1"):
        assert load_cached_walkthrough(cache, content_key(games[names.index(name)])) is None


def test_one_worker_goes_on_after_a_hang(tmp_path: Path) -> None:
    games = [_fake_game(tmp_path, n) for n in ("hang-a", "ok-a", "ok-b")]
    report = plan_walkthroughs(games, cache_dir=tmp_path / "c", workers=1, timeout=1.0, planner=FAKE)
    assert [o.status for o in report.outcomes] == ["timeout", "planned", "planned"]


def test_a_slow_worker_start_does_not_count_against_a_game(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-game clock starts when the worker begins the game, not when it was spawned."""
    monkeypatch.setenv("PLAN_FAKES_IMPORT_DELAY_S", "1.5")  # inherited by the spawned workers
    games = [_fake_game(tmp_path, n) for n in ("ok-a", "ok-b")]
    report = plan_walkthroughs(games, cache_dir=tmp_path / "c", workers=2, timeout=0.5, planner=FAKE)
    assert [o.status for o in report.outcomes] == ["planned", "planned"]


def test_cached_games_are_not_planned_again(tmp_path: Path) -> None:
    games = [_fake_game(tmp_path, n) for n in ("ok-a", "ok-b")]
    cache = tmp_path / "c"
    first = plan_walkthroughs(games, cache_dir=cache, planner=FAKE)
    assert [o.status for o in first.outcomes] == ["planned", "planned"]
    # a planner that fails every game proves no worker is asked: the cache by content hash answers
    again = plan_walkthroughs(games, cache_dir=cache, planner="plan_fakes:cached_only", timeout=0.5)
    assert [o.status for o in again.outcomes] == ["cached", "cached"]
    assert [o.steps for o in again.outcomes] == [1, 1]
    games[0].write_text(games[0].read_text().replace("p ok-a", "p ok-a changed"))  # new content, new key
    changed = plan_walkthroughs(games, cache_dir=cache, planner=FAKE)
    assert [o.status for o in changed.outcomes] == ["planned", "cached"]


def test_a_killed_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    names = [f"slow-{i:02d}" for i in range(12)]
    games = [_fake_game(tmp_path / "games", n) for n in names]
    cache = tmp_path / "cache"
    script = (
        "import sys; from tempo_rl.envs.alfworld.planning import plan_walkthroughs; "
        f"plan_walkthroughs(sys.argv[1:], cache_dir={str(cache)!r}, workers=1, planner={FAKE!r})"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    proc = subprocess.Popen([sys.executable, "-c", script, *map(str, games)], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(list((cache / "walkthroughs").glob("*.json"))) < 3:
            assert proc.poll() is None, "the planning run ended before it could be killed"
            assert time.monotonic() < deadline, "no plan was cached within 60 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its worker, mid-game
        proc.wait(10)
    done = len(list((cache / "walkthroughs").glob("*.json")))
    assert 3 <= done < len(names)
    report = plan_walkthroughs(games, cache_dir=cache, workers=2, planner=FAKE)
    counts = report.counts()
    assert counts == {"cached": done, "planned": len(names) - done}
    assert all(load_cached_walkthrough(cache, content_key(g)) == ("look",) for g in games)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    game = _fake_game(tmp_path, "ok-a")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        plan_walkthroughs([game], workers=0, planner=FAKE)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        plan_walkthroughs([game], timeout=0, planner=FAKE)
    with pytest.raises(ValueError, match="module:function"):
        plan_walkthroughs([game], planner="plan_fakes")
    with pytest.raises(AttributeError):
        plan_walkthroughs([game], planner="plan_fakes:no_such_planner")
    assert main(["data", "alfworld", "--plan", str(tmp_path / "nowhere")]) == 2


@pytest.mark.slow
def test_cli_plans_the_train_games_and_training_finds_the_plans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real planner on the vendored train games: plans verified and cached, then read by AlfworldEnv."""
    needs_alfworld()
    from tempo_rl.envs.alfworld.env import AlfworldEnv

    root = tmp_path / "data"
    train = [copy_game(rel, root) for rel in TRAIN_GAMES]
    copy_game(SMALL_GAME, root)  # has its own walkthrough: nothing to plan
    bad = root / "json_2.1.1" / "valid_train" / "broken-task" / "trial_1"
    bad.mkdir(parents=True)
    (bad / "game.tw-pddl").write_text(
        json.dumps({"pddl_domain": "(nonsense", "grammar": "g", "pddl_problem": "p", "solvable": True})
    )
    (bad / "traj_data.json").write_text(json.dumps({"task_type": "pick_and_place_simple"}))
    cache = tmp_path / "cache"
    args = ["data", "alfworld", "--plan", str(root), "--workers", "2", "--cache-dir", str(cache)]
    assert main(args) == 1  # one game could not be planned: listed, the others done
    out = capsys.readouterr().out
    assert "5 games: 3 planned, 1 has_walkthrough, 1 error; 1 failed" in out
    assert "FAILED error:" in out and "broken-task" in out
    for game in train:
        env = AlfworldEnv(game, cache_dir=cache)  # the default walkthrough="auto" reads the cache
        try:
            plan = env.walkthrough()
            assert plan and env.privileged_info() is not None
            obs = env.reset()
            for command in plan:
                assert command in obs.admissible_actions
                result = env.step(command)
                obs = result.observation
            assert result.terminated and result.reward == 1.0
        finally:
            env.close()
    assert main(args) == 1
    assert "5 games: 3 cached, 1 has_walkthrough, 1 error; 1 failed" in capsys.readouterr().out
    (bad / "game.tw-pddl").unlink()
    assert main(args) == 0


@pytest.mark.slow
def test_cli_counts_a_game_past_its_time_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A worker still busy at --plan-timeout is killed (a fresh worker cannot even load TextWorld in 0.2 s)."""
    needs_alfworld()
    copy_game(TRAIN_GAMES[0], tmp_path)
    cache = tmp_path / "cache"
    args = ["data", "alfworld", "--plan", str(tmp_path), "--plan-timeout", "0.2", "--cache-dir", str(cache)]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "1 game: 1 timeout; 1 failed" in out and "FAILED timeout:" in out and "0.2 s" in out
    assert not list(cache.rglob("*.json"))
