"""Restore time vs depth: fork (ForkCache hit) vs replay (fresh env + reset + verified replay), side by side.

For each env and depth d in (10, 50, 200) the benchmark plays d non-terminal random actions, snapshots, and
times (milliseconds, median of ``repeats`` runs; of ``20 * repeats`` for the built-in envs' fork figures):

* ``replay``: ``restore(snapshot)`` -- a fresh env from the registry, reset, replay of d actions with every
  observation digest and state fingerprint verified;
* ``fork``: ``restore(snapshot, cache=cache)`` on a cache holding the live state -- one native ``fork()`` plus
  the fingerprint check (built-in envs only);
* ``ancestor``: the cache holds the state 10 actions earlier: fork + verified replay of the last 10 actions.

Envs: ``keydoor:horizon=200``, ``knights:max_steps=400`` and, unless ``--quick`` (or ``--no-textworld``), a
TextWorld game generated with TextWorld's own generator (its ``fork`` is an Inform7 interpreter copy).
Target: with fork, restore at depth 200 costs <= 2x restore at depth 10 (``fork_ratio_200_10``).

Prints exactly one JSON line. ``--quick``: fewer repeats and no TextWorld game (a smoke run).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tempo_rl.envs import ForkCache, RecordedEnv, make, restore
from tempo_rl.envs.restore import snapshot_prefix

DEPTHS = (10, 50, 200)


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        env = fn()
        times.append(time.perf_counter() - start)
        env.close()
    return round(statistics.median(times) * 1000.0, 4)


def _play(
    spec: str, depth: int, seed: int, safe: Callable[[str], bool] = lambda a: True, *, probe: bool = True
) -> RecordedEnv:
    """``depth`` random admissible actions that do not end the episode (checked on a fork when ``probe``)."""
    env = make(spec)
    env.reset(seed)
    rng = random.Random(seed)
    while env.round_index < depth:
        candidates = [a for a in env.last_observation.admissible_actions or ("look",) if safe(a)]
        rng.shuffle(candidates)
        for action in candidates:
            if probe and env.supports_fork and env.round_index < depth - 1:  # the last step may end it
                trial = env.fork()
                ended = trial.step(action).done
                trial.close()
                if ended:
                    continue
            env.step(action)
            break
        else:
            raise RuntimeError(f"{spec}: every action ends the episode at depth {env.round_index}")
        if env.done and env.round_index < depth:
            raise RuntimeError(f"{spec}: the episode ended at depth {env.round_index}; pick other actions")
    return env


def _bench_env(
    spec: str,
    repeats: int,
    *,
    fork: bool,
    fork_repeats: int,
    safe: Callable[[str], bool] = lambda a: True,
    probe: bool = True,
) -> dict[str, Any]:
    env = _play(spec, max(DEPTHS), seed=1, safe=safe, probe=probe)
    full = env.snapshot()
    figures: dict[str, Any] = {"spec": spec}
    for depth in DEPTHS:
        snap = snapshot_prefix(full, depth)
        figures[f"replay_ms_{depth}"] = _median_ms(lambda snap=snap: restore(snap), repeats)
        if fork:
            at_depth = restore(snap)
            cache = ForkCache()
            cache.put(at_depth)
            figures[f"fork_ms_{depth}"] = _median_ms(
                lambda snap=snap, cache=cache: restore(snap, cache=cache), fork_repeats
            )
            ancestor_cache = ForkCache()
            ancestor = restore(snapshot_prefix(full, depth - 10))
            ancestor_cache.put(ancestor)

            def from_ancestor(snap=snap, ancestor_cache=ancestor_cache) -> RecordedEnv:
                restored = restore(snap, cache=ancestor_cache)
                ancestor_cache.discard(snap)  # keep measuring the ancestor path, not an exact hit
                return restored

            figures[f"ancestor_ms_{depth}"] = _median_ms(from_ancestor, fork_repeats)
            assert ancestor_cache.stats.ancestor_hits == fork_repeats and ancestor_cache.stats.hits == 0
            at_depth.close()
            ancestor.close()
    figures["replay_ratio_200_10"] = round(figures["replay_ms_200"] / figures["replay_ms_10"], 3)
    if fork:
        figures["fork_ratio_200_10"] = round(figures["fork_ms_200"] / figures["fork_ms_10"], 3)
        figures["replay_over_fork_200"] = round(figures["replay_ms_200"] / figures["fork_ms_200"], 1)
    env.close()
    return figures


def _textworld_game(directory: Path) -> Path:
    import textworld
    import textworld.generator

    options = textworld.GameOptions()
    options.seeds = 1
    options.nb_rooms = 3
    options.nb_objects = 5
    options.quest_length = 3
    options.path = str(directory / "bench.z8")
    return Path(textworld.generator.compile_game(textworld.generator.make_game(options), options))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: 3 repeats, no TextWorld game")
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed runs per figure (default 9, quick 3)"
    )
    parser.add_argument("--no-textworld", action="store_true", help="skip the generated TextWorld game")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 9)
    result: dict[str, Any] = {"benchmark": "restore", "depths": list(DEPTHS), "repeats": repeats}
    # fork restores of the built-in envs take tens of microseconds: many runs tame the noise
    result["keydoor"] = _bench_env("keydoor:horizon=200", repeats, fork=True, fork_repeats=20 * repeats)
    result["knights"] = _bench_env("knights:max_steps=400", repeats, fork=True, fork_repeats=20 * repeats)
    if not (args.quick or args.no_textworld):
        try:
            with tempfile.TemporaryDirectory() as tmp:
                game = _textworld_game(Path(tmp))
                # movement and looking only: the generated quest ends with an object action
                result["textworld"] = _bench_env(
                    f"textworld:path={game}",
                    max(3, repeats // 3),
                    fork=True,  # an Inform7 interpreter copy (~0.1 s), O(1) in the depth
                    fork_repeats=max(3, repeats // 3),
                    safe=lambda a: a.startswith(("go ", "look", "inventory", "examine")),
                    probe=False,
                )
                result["textworld"]["spec"] = "textworld:path=<generated 3-room z8 game>"
        except ImportError as exc:
            result["textworld"] = {"skipped": f"TextWorld not installed: {exc}"}
    fork_ratios = [result[name]["fork_ratio_200_10"] for name in ("keydoor", "knights")]
    result["target_fork_200_le_2x_10"] = all(r <= 2.0 for r in fork_ratios)
    print(json.dumps(result, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
