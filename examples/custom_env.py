"""Bring your own environment: the adapter tutorial's combination lock, checked and trained end to end.

Run: ``python examples/custom_env.py --quick`` (CI settings, well under a minute on 2 CPU cores) or without
``--quick`` for a longer run. Steps:

1. define ``LockEnv`` (a :class:`tempo_rl.envs.ReplayableEnv`) and register it as ``my-lock``;
2. ``check_replay``: restore it at random depths by replay and by fork, verifying every observation;
3. train on it with TEMPO and the offline local backend (a tiny transformer built in-process, no download),
   then print the run's summary.

The code between the ``--8<--`` markers is what ``docs/tutorial-adapter.md`` shows as ``my_lock_env.py``.
"""

from __future__ import annotations

# --8<-- [start:env]
import hashlib
import random

from tempo_rl.envs import Observation, ReplayableEnv, StepResult, register


class LockEnv(ReplayableEnv):
    """Open a lock whose code is drawn from the seed; one digit per step, a click per correct digit."""

    def __init__(self, digits: int = 3, max_steps: int = 30) -> None:
        if digits < 1 or max_steps < 1:
            raise ValueError("digits and max_steps must be >= 1")
        self.digits, self.max_steps = digits, max_steps
        self.code: tuple[int, ...] = ()
        self.entered: list[int] = []
        self.steps = 0

    def reset(self, seed: int | None = None) -> Observation:
        rng = random.Random(0 if seed is None else seed)  # everything random comes from the seed
        self.code = tuple(rng.randrange(10) for _ in range(self.digits))
        self.entered, self.steps = [], 0
        return self._observe("You face a lock with a dial of digits 0-9.")

    def step(self, action: str) -> StepResult:
        self.steps += 1
        words = action.strip().lower().split()
        if len(words) != 2 or words[0] != "dial" or not words[1].isdigit() or len(words[1]) != 1:
            feedback = f"Nothing happens: {action!r} is not 'dial <digit>'."  # feedback, not an exception
        else:
            self.entered.append(int(words[1]))
            clicks = sum(a == b for a, b in zip(self.entered, self.code))
            feedback = f"You dial {words[1]}. You hear {clicks} click(s)."
            if len(self.entered) == self.digits:
                if tuple(self.entered) == self.code:
                    return StepResult(self._observe("The lock opens!"), reward=1.0, terminated=True)
                self.entered = []
                feedback += " The lock stays shut and the dial resets."
        truncated = self.steps >= self.max_steps
        return StepResult(self._observe(feedback), reward=0.0, truncated=truncated)

    def _observe(self, text: str) -> Observation:
        shown = " ".join(str(d) for d in self.entered) or "(nothing)"
        return Observation(
            text=f"{text}\nDialled so far: {shown}.",
            admissible_actions=tuple(f"dial {d}" for d in range(10)),
            info={"task": f"Open the lock: find its {self.digits}-digit code."},
        )

    # ---- optional, but each one makes TEMPO better ----
    def privileged_info(self) -> str:
        return f"The code is {' '.join(map(str, self.code))}."  # the critic sees it, the actor never does

    def walkthrough(self) -> tuple[str, ...]:
        return tuple(f"dial {d}" for d in self.code)

    def state_fingerprint(self) -> str:
        state = repr((self.code, self.entered, self.steps)).encode()
        return hashlib.sha256(state).hexdigest()[:16]

    def fork(self) -> LockEnv:
        clone = LockEnv(self.digits, self.max_steps)
        clone.code, clone.entered, clone.steps = self.code, list(self.entered), self.steps
        return clone


register("my-lock", LockEnv, overwrite=True)  # overwrite: re-importing the module is harmless
# --8<-- [end:env]


def training_config(quick: bool) -> dict[str, object]:
    """A TEMPO run on ``my-lock`` with the local backend; ``quick`` = CI-sized, else the main job's recipe."""
    return {
        "algorithm": "tempo",
        "env": {"name": "my-lock", "kwargs": {"digits": 2, "max_steps": 8 if quick else 12}},
        "backend": {
            "kind": "local",
            "hidden_size": 32 if quick else 64,
            "num_layers": 1 if quick else 2,
            "num_heads": 2 if quick else 4,
            "vocab_size": 512 if quick else 1024,
            "max_positions": 4096,
        },
        "tempo": {
            "macro_rounds": 4,
            "max_rounds": 8 if quick else 12,
            "branches": 4,
            "critic_samples": 2 if quick else 4,
            "endpoint_samples": 1 if quick else 2,
            "states_per_batch": 2 if quick else 4,
            "warmup_updates": 1 if quick else 3,
            "warmup_games_per_batch": 2,
            "td_updates": 2 if quick else 20,
            "error": "brier",
        },
        "sampling": {
            "critic_answer": "sampled",  # K sampled answers, rewarded by their Brier error
            "max_tokens": 24,
            "critic_max_tokens": 24 if quick else 10,
            "max_trajectory_tokens": 3000,
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
    """Check replay, train, print the summary; exit status 0 on success."""
    import argparse
    import json
    import tempfile
    from pathlib import Path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny settings for CI")
    parser.add_argument(
        "--run-dir", type=Path, default=None, help="where to write the run (default: a temp dir)"
    )
    args = parser.parse_args(argv)

    from tempo_rl.envs import check_replay

    report = check_replay("my-lock:digits=3", steps=30, trials=3 if args.quick else 10)
    print(report.summary())
    if not report.ok:
        return 1

    from tempo_rl.training.config import validate_config
    from tempo_rl.training.run import train_run

    config = validate_config(training_config(args.quick))
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.run_dir or Path(scratch) / "lock-run"
        summary = train_run(run_dir, config)
    print(json.dumps({k: v for k, v in summary.items() if k != "run_dir"}, default=str))
    return 0 if summary["updates_done"] == config.total_updates() else 1


if __name__ == "__main__":
    raise SystemExit(main())
