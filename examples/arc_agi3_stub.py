"""An ARC-AGI-3-style game end to end: frames as text, a hidden rule, restore by replay and by fork, training.

Run: ``python examples/arc_agi3_stub.py --quick`` (CI settings) or without ``--quick`` for a longer run.

The ``arc-stub`` env (:mod:`tempo_rl.envs.arc.stub`) is a small local game in the ARC-AGI-3 format: 64 x 64
frames of 16 colours rendered as text, actions ``ACTION1``-``ACTION7`` where ``ACTION6 x y`` clicks a pixel,
and a hidden rule (activate the tile whose colour matches the wall). The critic's privileged information is
the game's source code (``inspect.getsource``); the actor only ever sees frames. The script:

1. plays a few actions and prints the first frame (at ``scale=8``: one character per 8 x 8 block);
2. snapshots a state and restores it by verified replay and by a native fork (a deep copy of the game object),
   then checks that both continue exactly like the original;
3. runs ``check_replay`` (random play, restores at random depths, both ways);
4. trains on it with TEMPO and the offline local backend (critic warm-up, then TD updates from restored
   states) and prints the run summary as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from tempo_rl.envs import ForkCache, Snapshot, check_replay, make, restore


def show_the_game() -> None:
    """Print the first frame, the admissible actions and what one click does."""
    env = make("arc-stub", scale=8)
    first = env.reset(seed=3)
    print(first.text)
    print("admissible:", ", ".join(first.admissible_actions or ()))
    source = env.privileged_info()
    print(
        f"privileged info for the critic: {len(source)} characters of game source (never shown to the actor)"
    )
    result = env.step("ACTION6 28 20")  # a tile that does not match the wall: it vanishes, a life is lost
    print("after ACTION6 28 20:", result.observation.text.splitlines()[0], "| reward", result.reward)


def restore_both_ways() -> None:
    """Snapshot mid-game, restore by replay and by fork, continue all three identically."""
    env = make("arc-stub", scale=8, levels=2)
    env.reset(seed=11)
    for action in ("ACTION1", "ACTION3", "ACTION7", "not an action", "ACTION2"):
        env.step(action)
    snapshot = Snapshot.from_json(env.snapshot().to_json())
    cache = ForkCache()
    cache.put(env)
    replayed = restore(snapshot)  # reset(11) + replay, every observation digest and state fingerprint checked
    forked = restore(snapshot, cache=cache)  # a deep copy of the live game object: O(1) in the depth
    tail = ["ACTION4", "ACTION4", "ACTION5", *(env.walkthrough() or ())]
    expected = [env.step(a).observation.text for a in tail]
    for name, restored in (("replay", replayed), ("fork", forked)):
        assert [restored.step(a).observation.text for a in tail] == expected, name
    print(f"restored at depth {snapshot.round_index} by replay and by fork; {len(tail)} more steps identical")


def training_config(quick: bool) -> dict[str, Any]:
    """TEMPO on arc-stub with the local backend (``quick`` = CI-sized: a few updates, a tiny model).

    The full setting follows the built-in KeyDoor main job: a supervised warm start on noisy walkthroughs
    (which also teaches the critic's ``<value>`` format), Brier critic rewards, short critic outputs.
    """
    return {
        "algorithm": "tempo",
        "env": {"name": "arc-stub", "kwargs": {"levels": 1, "scale": 8, "max_steps": 4 if quick else 8}},
        "backend": {
            "kind": "local",
            "hidden_size": 32 if quick else 64,
            "num_layers": 1 if quick else 2,
            "num_heads": 2 if quick else 4,
            "vocab_size": 512 if quick else 1024,
            "max_positions": 8192,  # the critic prompt carries the game source (~4k tokens)
        },
        "tempo": {
            "macro_rounds": 2 if quick else 4,
            "max_rounds": 4 if quick else 8,
            "branches": 2 if quick else 4,
            "critic_samples": 2 if quick else 4,
            "endpoint_samples": 1 if quick else 2,
            "states_per_batch": 2 if quick else 4,
            "warmup_updates": 1 if quick else 3,
            "warmup_games_per_batch": 2,
            "td_updates": 2 if quick else 15,
            "error": "brier",
        },
        "sampling": {
            "critic_answer": "sampled",  # K sampled answers, rewarded by their Brier error
            "max_tokens": 24,
            "critic_max_tokens": 24 if quick else 10,
            "max_trajectory_tokens": 4000,
            "eval_temperature": 0.3,
        },
        "optim": {"learning_rate": 1e-3 if quick else 5e-4, "grad_clip_norm": 1.0},
        "warmstart": {
            "episodes": 0 if quick else 128,
            "expert": "walkthrough",  # the env offers a walkthrough, not expert_action()
            "noise": 0.1,
            "epochs": 3,
            "batch_size": 4,
            "learning_rate": 3e-3,
        },
        "kl": {"coef": 0.0},
        "run": {"loggers": [] if quick else ["console"]},
    }


def main(argv: list[str] | None = None) -> int:
    """Run the four parts; exit status 0 when every check passed and the run finished."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny settings for CI")
    parser.add_argument(
        "--run-dir", type=Path, default=None, help="where to write the run (default: a temp dir)"
    )
    args = parser.parse_args(argv)

    show_the_game()
    restore_both_ways()
    report = check_replay("arc-stub:scale=8", steps=30, trials=3 if args.quick else 10)
    print(report.summary())
    if not report.ok or report.fork_restores == 0:
        return 1

    from tempo_rl.training.config import validate_config
    from tempo_rl.training.run import train_run

    config = validate_config(training_config(args.quick))
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.run_dir or Path(scratch) / "arc-run"
        summary = train_run(run_dir, config)
    print(json.dumps({k: v for k, v in summary.items() if k != "run_dir"}, default=str))
    return 0 if summary["updates_done"] == config.total_updates() else 1


if __name__ == "__main__":
    raise SystemExit(main())
