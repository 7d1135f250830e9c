"""ARC restore cost: verified replay vs native fork (deep copy of the game), side by side, by episode depth.

Workload: the ``arc-stub`` env (full 64 x 64 frames, ``scale=1``, the real observation size) is played for
``depth`` actions that never end the game (moves and undos only), then one snapshot is restored N = 4 times
(``restore_branches``) two ways:

* ``replay``: fresh env + ``reset(seed)`` + replay of all ``depth`` actions, every observation digest and state
  fingerprint verified (what an env without ``fork()`` costs: O(depth) per branch);
* ``fork``: a :class:`~tempo_rl.envs.ForkCache` hit, the state forked N times (deep copies of the game object,
  fingerprint verified: O(1) in the depth).

With the ``arc`` toolkit installed (Python >= 3.12) the same is measured on a small toolkit game
(``tests/arc/games/lock``). Figures are medians over ``repeats`` in milliseconds per restore of N branches, and
the replay/fork ratio. Prints ONE JSON line; ``--quick`` runs fewer depths and repeats.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tempo_rl.envs import ForkCache, make, restore_branches

ROOT = Path(__file__).resolve().parents[1]
BRANCHES = 4
SAFE_ACTIONS = ("ACTION1", "ACTION2", "ACTION3", "ACTION4", "ACTION7")  # never ends the game


def _median_ms(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for env in fn():
            env.close()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(spec: str, depth: int, repeats: int) -> dict[str, float]:
    """Median ms to restore one snapshot at ``depth`` into N branches, by replay and by fork."""
    env = make(spec)
    env.reset(0)
    for i in range(depth):
        env.step(SAFE_ACTIONS[i % len(SAFE_ACTIONS)])
    snapshot = env.snapshot(include_texts=False)
    cache = ForkCache()
    cache.put(env)
    replay_ms = _median_ms(lambda: restore_branches(snapshot, BRANCHES), repeats)
    fork_ms = _median_ms(lambda: restore_branches(snapshot, BRANCHES, cache=cache), repeats)
    env.close()
    return {
        "replay_ms": round(replay_ms, 3),
        "fork_ms": round(fork_ms, 3),
        "ratio": round(replay_ms / fork_ms, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke mode: two depths, 3 repeats")
    args = parser.parse_args(argv)
    depths = (10, 50) if args.quick else (10, 50, 200)
    repeats = 3 if args.quick else 7
    stub_spec = f"arc-stub:scale=1,max_steps={max(depths) + 10}"
    figures: dict[str, Any] = {
        "benchmark": "arc_restore",
        "branches": BRANCHES,
        "arc_stub": {f"depth_{d}": measure(stub_spec, d, repeats) for d in depths},
    }
    if sys.version_info >= (3, 12) and importlib.util.find_spec("arc_agi") is not None:
        games = ROOT / "tests" / "arc" / "games"
        toolkit_spec = f"arc:game_id=lock,environments_dir={games},max_steps={max(depths) + 10}"
        figures["arc_toolkit"] = {f"depth_{d}": measure(toolkit_spec, d, repeats) for d in depths}
    else:
        figures["arc_toolkit"] = "skipped: needs Python >= 3.12 and the arc extra"
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
