"""StateStore storage cost: bytes per state with content-addressed prefix sharing vs naive full copies.

Workload (realistic TD lineages): G games share one system prompt; each game's start prompt is followed by
macro-step segments of S tokens. The trees branch (1, 2, 2, 2, 2) per level, so depth 5 gives 16 leaves per
game whose prefixes are ``root + 5 * S`` tokens (12,000 with the defaults) and 256 leaves for 16 games. States
are added level by level as TD would (ancestors first, FIFO capacity 256, so ancestors are evicted and the
store ends holding the 256 deepest states). Each state also carries a 50-action snapshot, history and
walkthrough. The same workload runs twice, side by side: ``share_prefixes=True`` and ``False``.

Prints ONE JSON line. ``--quick`` runs a small smoke version (4 games, 3,000-token prefixes).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from tempo_rl.envs.snapshot import EnvSpec, Snapshot
from tempo_rl.rollout.renderer import PromptWindow
from tempo_rl.training.store import StateStore
from tempo_rl.training.types import PrefixSpan, StoredState, make_state_id

SYSTEM_TOKENS = 600
BRANCHING = (1, 2, 2, 2, 2)
#: the renderer window every stored state carries (the head messages and the last observation turn)
WINDOW = PromptWindow(
    messages=(
        {"role": "system", "content": "You act in a text environment. Reply with one tool call."},
        {
            "role": "user",
            "content": "You are in the middle of a room. Your task is to: put a clean apple in fridge.",
        },
        {"role": "tool", "content": "You arrive at cabinet 3. The cabinet 3 is closed."},
    ),
    head=2,
)


def build_states(games: int, prefix_tokens: int, rng: np.random.Generator) -> list[StoredState]:
    """All states of the lineage trees, in the order TD would add them (level by level)."""
    root_tokens = 1500 * prefix_tokens // 12000
    segment = (prefix_tokens - root_tokens) // len(BRANCHING)
    system = rng.integers(0, 150_000, SYSTEM_TOKENS * prefix_tokens // 12000).tolist()
    levels: list[list[tuple[str, list[int], list[str], str]]] = [[]]
    for g in range(games):
        root = system + rng.integers(0, 150_000, root_tokens - len(system)).tolist()
        levels[0].append((f"game{g}", root, [], ""))
    out: list[StoredState] = []
    for depth, fan in enumerate(BRANCHING, start=1):
        nxt = []
        for game, prefix, actions, parent in levels[-1]:
            for _ in range(fan):
                new_prefix = prefix + rng.integers(0, 150_000, segment).tolist()
                new_actions = actions + [f"go to cabinet {int(a)}" for a in rng.integers(1, 20, 10)]
                snap = Snapshot(
                    env=EnvSpec(name="alfworld", kwargs={"game": game}),
                    seed=0,
                    actions=tuple(new_actions),
                    observation_digests=tuple(
                        f"{int(x):032x}" for x in rng.integers(0, 2**62, len(new_actions) + 1)
                    ),
                    last_observation="You arrive at cabinet 3. The cabinet 3 is closed.",
                    observation_texts=(
                        "You are in the middle of a room. Looking around, you see "
                        + ", ".join(f"a cabinet {i}" for i in range(1, 20)),
                        *(
                            f"You arrive at {a[6:]}. On it, you see a mug {i}, and a spoon {i}."
                            for i, a in enumerate(new_actions)
                        ),
                    ),
                )
                sid = make_state_id(snap, new_prefix)
                out.append(
                    StoredState(
                        id=sid,
                        snapshot=snap,
                        game_id=game,
                        task="put a clean apple in fridge.",
                        token_prefix=tuple(new_prefix),
                        policy_version=depth,
                        macro_index=depth,
                        prompt=WINDOW,
                        spans=(PrefixSpan(len(prefix), len(new_prefix), depth, -0.3 * segment),),
                        parent_id=parent or None,
                        privileged_info="; ".join(f"step {i}: go to cabinet {i}" for i in range(12)),
                    )
                )
                nxt.append((game, new_prefix, new_actions, sid))
        levels.append(nxt)
    return out


def measure(states: list[StoredState], share: bool, capacity: int, workdir: Path) -> dict[str, float]:
    store = StateStore(workdir / f"store-{share}.sqlite", capacity=capacity, share_prefixes=share)
    t0 = time.perf_counter()
    for s in states:
        store.add(s)
    add_s = (time.perf_counter() - t0) / len(states)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(20):
        store.sample(4, rng)
    sample_s = (time.perf_counter() - t0) / 80
    stats = store.stats()
    store.close()
    return {
        "size": stats["size"],
        "bytes_per_state": stats["bytes_per_state"],
        "prefix_bytes_per_state": 4 * stats["stored_tokens"] / stats["size"],
        "add_ms": 1000 * add_s,
        "get_ms": 1000 * sample_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    args = parser.parse_args()
    games, prefix_tokens = (4, 3000) if args.quick else (16, 12000)
    states = build_states(games, prefix_tokens, np.random.default_rng(0))
    leaves = games * int(np.prod(BRANCHING))
    root_tokens = 1500 * prefix_tokens // 12000
    segment = (prefix_tokens - root_tokens) // len(BRANCHING)
    system = SYSTEM_TOKENS * prefix_tokens // 12000
    segments_per_game = int(sum(np.cumprod(BRANCHING)))
    # a lower bound: every distinct token of the prefix trie stored once, no chunking or page overhead
    ideal = 4 * (system + games * (root_tokens - system + segments_per_game * segment)) / leaves
    with tempfile.TemporaryDirectory() as tmp:
        shared = measure(states, True, leaves, Path(tmp))
        naive = measure(states, False, leaves, Path(tmp))
    print(
        json.dumps(
            {
                "benchmark": "store",
                "quick": args.quick,
                "states": int(shared["size"]),
                "prefix_tokens": prefix_tokens,
                "bytes_per_state_shared": round(shared["bytes_per_state"]),
                "bytes_per_state_naive": round(naive["bytes_per_state"]),
                "ratio_naive_over_shared": round(naive["bytes_per_state"] / shared["bytes_per_state"], 2),
                "prefix_bytes_per_state_shared": round(shared["prefix_bytes_per_state"]),
                "prefix_bytes_per_state_naive": round(naive["prefix_bytes_per_state"]),
                "prefix_bytes_per_state_trie_lower_bound": round(ideal),
                "add_ms_shared": round(shared["add_ms"], 3),
                "add_ms_naive": round(naive["add_ms"], 3),
                "get_ms_shared": round(shared["get_ms"], 3),
                "get_ms_naive": round(naive["get_ms"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
