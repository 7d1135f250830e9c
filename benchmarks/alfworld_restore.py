"""Restore N branches of an ALFWorld state at depth D: the reference procedure vs tempo-rl's fast path.

Both are measured side by side in one run, on the same real game and the same snapshot, and the script prints
exactly one JSON line.

* reference: ``textworld.gym.register_games([game], batch_size=N, asynchronous=True)`` + ``reset`` + lockstep
  replay of the whole action history in the N worker processes + compare the last observation + close (what
  the public TEMPO reference does). It runs in a fresh interpreter with stock TextWorld (only the PEP 667 fix,
  needed on 3.13), so none of tempo-rl's caches help it; only the procedure itself is timed.
* fast: ``tempo_rl.envs.restore_branches(snapshot, N, verify=True)`` (the generic API, which dispatches to
  ``tempo_rl.envs.alfworld.branching.restore_branches``): warm engines from the
  pool, recorded operators applied without text, PDDL fact digest checked every step, text + admissible list
  checked at the end. The one-off costs it relies on (pool warm-up, the first translation) are reported apart.
* fast_cold_memo: the same with the operator memo emptied first (a snapshot from another process): branches
  then replay with text until the memo is filled.

Usage: ``python benchmarks/alfworld_restore.py [--quick] [--game PATH] [--depth 40] [--branches 4]``.
Without ``--game`` it uses a real valid_seen game from ``../shared/alfworld`` next to the repository, or,
when that is absent, a generated kitchen game.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_GAME = (
    "valid_seen/look_at_obj_in_light-AlarmClock-None-DeskLamp-323/trial_T20190909_044715_250790/game.tw-pddl"
)


def _default_game(tmp: Path) -> tuple[Path, str]:
    """The real valid_seen game from ../shared when present, else a generated kitchen game."""
    path = REPO.parent / "shared" / "alfworld" / "json_2.1.1" / DEFAULT_GAME
    if path.is_file():
        return path, "real:" + str(Path(DEFAULT_GAME).parent)
    from tempo_rl.envs.alfworld.generator import generate_game

    game = generate_game("pick_heat_then_place_in_recep", 0, tmp / "generated")
    return game.game_file, "generated:pick_heat_then_place_in_recep:seed0"


def record_trajectory(game: Path, depth: int, seed: int) -> Any:
    """Random admissible non-help actions from reset, recorded; returns the snapshot at ``depth``."""
    from tempo_rl.envs.alfworld.env import AlfworldEnv
    from tempo_rl.envs.recorder import RecordedEnv
    from tempo_rl.envs.snapshot import EnvSpec

    for attempt in range(20):
        rng = random.Random(seed + attempt)
        env = RecordedEnv(
            AlfworldEnv(str(game), max_steps=depth + 10),
            EnvSpec(name="alfworld", kwargs={"game_file": str(game), "max_steps": depth + 10}),
        )
        try:
            obs = env.reset()
            ok = True
            for _ in range(depth):
                choices = [a for a in (obs.admissible_actions or ()) if a != "help"]
                result = env.step(rng.choice(choices))
                obs = result.observation
                if result.done:
                    ok = False
                    break
            if ok:
                return env.snapshot()
        finally:
            env.close()
    raise RuntimeError("could not record a non-terminal trajectory")


def reference_restore(game: Path, actions: tuple[str, ...], n: int, last_observation: str) -> float:
    """The reference procedure; returns wall seconds. Raises if the final observations do not match."""
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    from tempo_rl.envs.alfworld.compat import CompatWrapper, close_batch_env, preserve_argv

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    t0 = time.perf_counter()
    with preserve_argv():
        env_id = textworld.gym.register_games(
            [str(game)],
            infos,
            batch_size=n,
            asynchronous=True,
            auto_reset=False,
            max_episode_steps=len(actions) + 10,
            wrappers=[CompatWrapper, functools.partial(AlfredDemangler, shuffle=False), AlfredInfos],
        )
        env = textworld.gym.make(env_id)
        try:
            obs, _ = env.reset()
            if len(set(obs)) != 1:
                raise RuntimeError("reference: the N initial observations differ")
            for action in actions:
                obs, _, _, _ = env.step([action] * n)
            if any(o != last_observation for o in obs):
                raise RuntimeError("reference: final observation mismatch")
        finally:
            close_batch_env(env)
    return time.perf_counter() - t0


def reference_in_fresh_process(game: Path, snapshot: Any, n: int, tmp: Path) -> float:
    """Run :func:`reference_restore` in a new interpreter (stock TextWorld); returns its timed seconds."""
    job = tmp / "reference_job.json"
    job.write_text(
        json.dumps(
            {"game": str(game), "actions": list(snapshot.actions), "n": n, "last": snapshot.last_observation}
        )
    )
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--reference-job", str(job)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"reference run failed:\n{proc.stderr[-2000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def _reference_job(path: Path) -> int:
    from tempo_rl.envs.alfworld.compat import patch_textworld

    job = json.loads(path.read_text())
    patch_textworld()  # stock TextWorld cannot reset on Python >= 3.13 without it; a no-op change on 3.11
    print(reference_restore(Path(job["game"]), tuple(job["actions"]), int(job["n"]), job["last"]))
    return 0


def fast_restore(snapshot: Any, n: int) -> float:
    from tempo_rl.envs.restore import (
        restore_branches,
    )  # the generic API; it dispatches to ALFWorld's restorer

    t0 = time.perf_counter()
    branches = restore_branches(snapshot, n, verify=True)
    elapsed = time.perf_counter() - t0
    for b in branches:
        if b.last_observation.text != snapshot.last_observation:
            raise RuntimeError("fast: final observation mismatch")
        b.close()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: depth 10, one repeat")
    parser.add_argument(
        "--game", type=Path, default=None, help="a game.tw-pddl (default: a real valid_seen game)"
    )
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--branches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference-job", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reference_job is not None:
        return _reference_job(args.reference_job)
    depth = args.depth if args.depth is not None else (10 if args.quick else 40)
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)

    from tempo_rl.envs.alfworld.fast import get_pool, operator_memo

    with tempfile.TemporaryDirectory() as tmp:
        if args.game is not None:
            source, label = args.game, str(args.game)
        else:
            source, label = _default_game(Path(tmp))
        game = Path(tmp) / "game.tw-pddl"
        shutil.copyfile(source, game)
        reference: list[float] = []
        t0 = time.perf_counter()
        snapshot = record_trajectory(game, depth, args.seed)
        record_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        get_pool().prewarm(game, args.branches)
        prewarm_s = time.perf_counter() - t0
        fast: list[float] = []
        cold: list[float] = []
        for _ in range(repeats):
            reference.append(reference_in_fresh_process(game, snapshot, args.branches, Path(tmp)))
            fast.append(fast_restore(snapshot, args.branches))
            operator_memo().clear()
            cold.append(fast_restore(snapshot, args.branches))
        get_pool().clear()

    ref_s = statistics.median(reference)
    fast_s = statistics.median(fast)
    cold_s = statistics.median(cold)
    result = {
        "benchmark": "alfworld_restore",
        "game": label,
        "depth": depth,
        "branches": args.branches,
        "repeats": repeats,
        "reference_s": round(ref_s, 4),
        "fast_s": round(fast_s, 4),
        "fast_cold_memo_s": round(cold_s, 4),
        "speedup": round(ref_s / fast_s, 2),
        "speedup_cold_memo": round(ref_s / cold_s, 2),
        "target_speedup": 10.0,
        "meets_target": ref_s / fast_s >= 10.0,
        "verified": True,
        "one_off_record_s": round(record_s, 3),
        "one_off_prewarm_s": round(prewarm_s, 3),
        "quick": bool(args.quick),
        "python": platform.python_version(),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
