"""Reproduce the TEMPO-on-ALFWorld experiment on PyTRIO (or, with ``--stub``, offline against a PyTRIO stub).

Real run (needs ``pip install 'tempo-rl[alfworld,pytrio]'``, ALFWorld data and PyTRIO credentials)::

    trio login                                   # or export PYTRIO_API_KEY=...
    tempo-rl data alfworld                       # or point --data / $ALFWORLD_DATA at json_2.1.1/
    python examples/train_alfworld_pytrio.py --run-dir runs/alfworld-tempo

Offline smoke run (what CI runs; generated games, a tiny local model behind a recording PyTRIO stub)::

    python examples/train_alfworld_pytrio.py --quick

The blog's settings are the defaults: Qwen LoRA rank 32, H = 10 rounds per macro-step, N = 4 branches, K = 4
critic samples, E = 2 endpoint samples, T = 50, 4 warm-up then 40 TD updates, Adam lr 1e-6. One TEMPO update
sends ``states_per_batch x (N + K)`` datums (here 4 x 8 = 32) in one ``forward_backward``. See
``docs/alfworld-pytrio.md`` for data, login, evaluation, plots and what drives cost.

ALFWorld games are one file each, while a training run names one env spec and varies the reset seed, so this
script registers ``alfworld-games``: every kept game of a split, ``reset(seed)`` playing game ``seed mod n``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from tempo_rl.envs import Observation, ReplayableEnv, StepResult, register

#: TextWorld's grammar parsing (TatSu) is not thread-safe, and the trainer steps envs from a thread pool: one
#: ALFWorld call at a time (they hold the GIL anyway, so this costs no parallelism).
_ALFWORLD_LOCK = threading.RLock()


class AlfworldGameSet(ReplayableEnv):
    """Every kept ALFWorld game of ``split`` under ``data``, by id; ``reset(seed)`` plays game ``seed % n``.

    Deterministic (ALFWorld games are), so restore by replay works; PDDL games cannot be copied, so no fork.
    """

    def __init__(self, data: str, split: str = "train", max_steps: int = 50) -> None:
        from tempo_rl.envs.alfworld import discover_games

        self.games = [g.game_file for g in discover_games(data, splits=split).games]
        self.max_steps = max_steps
        self._env: Any = None
        self._file: Path | None = None

    def _current(self) -> Any:
        if self._env is None:
            raise RuntimeError("the env has not been reset yet; call reset(seed) first")
        return self._env

    def reset(self, seed: int | None = None) -> Observation:
        from tempo_rl.envs.alfworld.env import AlfworldEnv

        game_file = self.games[(seed or 0) % len(self.games)]
        with _ALFWORLD_LOCK:
            if game_file != self._file:
                if self._env is not None:
                    self._env.close()
                self._env, self._file = AlfworldEnv(game_file, max_steps=self.max_steps), game_file
            return self._current().reset(seed)

    def step(self, action: str) -> StepResult:
        with _ALFWORLD_LOCK:
            return self._current().step(action)

    def privileged_info(self) -> str | None:
        return self._current().privileged_info()

    def walkthrough(self) -> tuple[str, ...] | None:
        return self._current().walkthrough()

    def state_fingerprint(self) -> str | None:
        return self._current().state_fingerprint()

    def close(self) -> None:
        with _ALFWORLD_LOCK:
            if self._env is not None:
                self._env.close()
                self._env, self._file = None, None


register("alfworld-games", AlfworldGameSet, overwrite=True)


def training_config(data: str, args: argparse.Namespace) -> dict[str, Any]:
    """The blog's configuration on PyTRIO; ``--quick`` shrinks everything to a CI smoke run."""
    quick = args.quick
    return {
        "algorithm": "tempo",
        "env": {
            "name": "alfworld-games",
            "kwargs": {"data": data, "split": args.split, "max_steps": 4 if quick else 50},
        },
        "backend": {
            "kind": "pytrio",
            "base_model": args.base_model,
            "lora_rank": 8 if quick else 32,
            "seed": 0,
        },
        "tempo": {
            "macro_rounds": 2 if quick else 10,  # H
            "max_rounds": 4 if quick else 50,  # T
            "branches": 2 if quick else 4,  # N
            "critic_samples": 2 if quick else 4,  # K
            "endpoint_samples": 1 if quick else 2,  # E
            "states_per_batch": 2 if quick else 4,
            "warmup_updates": 1 if quick else 4,
            "warmup_games_per_batch": 2 if quick else 4,
            "td_updates": 1 if quick else 40,
        },
        "sampling": {
            "max_tokens": 24 if quick else 512,
            "critic_max_tokens": 24 if quick else 512,
            "max_trajectory_tokens": 6000 if quick else 12000,
        },
        "optim": {
            "learning_rate": 1e-3 if quick else 1e-6,
            "betas": (0.9, 0.95),
            "grad_clip_norm": 1.0,
        },
        # supervised warm start on expert walkthroughs (cross-entropy through the same backend) before RL
        "warmstart": {"episodes": 4 if quick else 0, "batch_size": 4, "expert": "walkthrough"},
        "kl": {"coef": 0.0},  # TEMPO as published: no anchor
        "run": {"loggers": ([] if quick else ["console"]) + (["swanlab"] if args.swanlab else [])},
    }


def offline_pytrio_stub() -> Any:
    """A :class:`tempo_rl.backends.testing.RecordingPyTrioService`: PyTRIO's API, offline (for CI).

    The stub takes the real pytrio types and checks every call like the service would, and does the maths
    with a tiny local model. Its ``calls`` record what a real run would send.
    """
    from tempo_rl.backends.local import LocalTrainingClient, build_tiny_model, build_tokenizer
    from tempo_rl.backends.testing import RecordingPyTrioService

    corpus = [
        "go to countertop 1",
        "take apple 1 from countertop 1",
        "move apple 1 to fridge 1",
        "Nothing happens.",
    ]
    tokenizer = build_tokenizer(corpus * 4, vocab_size=1024)
    model = build_tiny_model(len(tokenizer), hidden_size=32, num_layers=1, num_heads=2, max_positions=8192)
    local = LocalTrainingClient(model, tokenizer, state_dir=tempfile.mkdtemp(prefix="pytrio-stub-"), seed=0)
    return RecordingPyTrioService(local)


def main(argv: list[str] | None = None) -> int:
    """Find (or generate) the games, build the config, train, print the summary as one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="CI smoke run: implies --stub and --generate 1")
    parser.add_argument(
        "--stub", action="store_true", help="use the offline PyTRIO stub instead of the service"
    )
    parser.add_argument("--data", default=os.environ.get("ALFWORLD_DATA"), help="ALFWorld data root")
    parser.add_argument(
        "--generate", type=int, default=0, metavar="N", help="generate N offline games per type"
    )
    parser.add_argument("--split", default="train")
    parser.add_argument("--base-model", default="Qwen/Qwen3-4B")
    parser.add_argument("--run-dir", type=Path, default=None)
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in --run-dir from its checkpoint"
    )
    parser.add_argument("--swanlab", action="store_true", help="also log to SwanLab")
    args = parser.parse_args(argv)

    scratch = tempfile.TemporaryDirectory()
    data = args.data
    if args.quick or args.generate:
        from tempo_rl.envs.alfworld.generator import generate_games

        data = str(Path(scratch.name) / "alfworld")
        kinds = ["pick_and_place_simple"] if args.quick else None
        games = generate_games(data, per_type=max(1, args.generate), task_types=kinds, split=args.split)
        print(f"generated {len(games)} offline ALFWorld game(s) in {data}")
    if data is None:
        parser.error(
            "no ALFWorld data: use --data DIR, ALFWORLD_DATA, `tempo-rl data alfworld`, or --generate N"
        )
    service = offline_pytrio_stub() if (args.stub or args.quick) else None  # None: the real PyTRIO service

    from tempo_rl.training.config import validate_config
    from tempo_rl.training.run import train_run

    config = validate_config(training_config(data, args))
    run_dir = args.run_dir or Path(scratch.name) / "run"
    if args.resume and args.run_dir is None:
        parser.error("--resume needs --run-dir (the run to continue)")
    summary = train_run(run_dir, None if args.resume else config, resume=args.resume, service_client=service)
    if service is not None:
        calls = Counter(name for name, _ in service.calls)
        summary["pytrio_stub_calls"] = dict(sorted(calls.items()))
    print(json.dumps({k: v for k, v in summary.items() if k != "run_dir"}, default=str))
    scratch.cleanup()
    return 0 if summary["updates_done"] == config.total_updates() else 1


if __name__ == "__main__":
    raise SystemExit(main())
