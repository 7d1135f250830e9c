"""Benchmark: how far a warm start's noisy demonstrations get, with each ``warmstart.expert``.

A warm start's demonstration takes, with probability ``warmstart.noise``, a random admissible action instead of
the expert's (weight 0: context only). What comes after such a slip depends on ``warmstart.expert``:

* ``walkthrough``: the expert is the reset-state walkthrough; the demo goes on with it while its next action is
  admissible and stops at the first that is not (after a ``go back`` the walkthrough's next ``go on`` still
  applies, one room early, and its ``take`` or ``open door`` then meets a room without a key or a lock);
* ``recovering``: the expert is :meth:`ReplayableEnv.expert_action`, asked at every step; after a slip the demo
  shows the expert's recovery, and it stops only when the episode ends or can no longer be won.

This runs :func:`tempo_rl.training.warmstart.demonstration_datums` itself, on the demo games and with the RNG
the mechanism benchmark's warm start of each seed uses (``benchmarks/mechanism.py``, env ``keydoor_rule``:
T = 48, 2 keys, the first lock 8 rooms after the last key room, noise 0.1, 256 demo games), once per expert,
and counts per demo the expert actions shown (weight 1), the locks opened and whether the exit was reached.
No model is trained: it takes about a minute per seed and expert on one core.

Prints ONE JSON line: per expert, over all demos of the seeds run, ``demos``, ``expert_steps_median`` (of the
walkthrough's 42), ``expert_opens_no_lock`` and ``expert_opens_both_locks`` (demos that show the expert opening
no lock, both locks; a noisy ``open door`` has weight 0 and is not counted), ``reached_exit``; and the same per
seed.

Usage::

    python benchmarks/warmstart_demos.py                  # seeds 0-4, 256 demo games each
    python benchmarks/warmstart_demos.py --seeds 0 --episodes 32   # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

EXPERTS = ("walkthrough", "recovering")


class WatchedEnv:
    """A live env that remembers whether an episode was won (a step that terminated with a positive reward);
    every other attribute is the wrapped env's."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self.won = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def step(self, action: str) -> Any:
        result = self._env.step(action)
        self.won = self.won or bool(result.terminated and result.reward > 0)
        return result


def expert_actions(datum: Any) -> list[str]:
    """The demo's weighted (expert) actions in order: runs of one label between unlabelled tokens."""
    labels = json.loads(datum.tags["labels"])
    actions: list[str] = []
    previous = None
    for label in labels:
        if label is not None and label != previous:
            actions.append(label)
        previous = label
    return actions


def demos_of_seed(seed: int, expert: str, episodes: int, work: Path) -> list[dict[str, Any]]:
    """One record per demo of the mechanism benchmark's ``keydoor_rule`` warm start of ``seed`` with
    ``warmstart.expert = expert``: ``{"expert_steps", "locks_opened", "won"}``."""
    import mechanism

    from tempo_rl.envs import EnvSpec
    from tempo_rl.training.run import build_trainer
    from tempo_rl.training.warmstart import demonstration_datums

    env, scale = mechanism.ENVS["keydoor_rule"], mechanism.FULL
    tok_dir = mechanism.build_env_tokenizer(env, scale, work)
    run_dir = work / f"seed{seed}-{expert}"
    cfg = mechanism.make_config(env, scale, seed, "generative", run_dir, tok_dir)
    cfg = cfg.model_copy(  # as mechanism.warm_start_task: demos from their own seeds, with this expert
        update={
            "env": cfg.env.model_copy(update={"train_seed_start": 500_000 + 10_000 * seed}),
            "warmstart": cfg.warmstart.model_copy(update={"expert": expert}),
        }
    )
    trainer = build_trainer(cfg, run_dir, options=mechanism.make_options(env, "generative"))
    watched: list[WatchedEnv] = []
    make_env = trainer.c.make_env

    def make_watched(spec: Any, game_seed: int) -> WatchedEnv:
        watched.append(WatchedEnv(make_env(spec, game_seed)))
        return watched[-1]

    trainer.c.make_env = make_watched
    records = []
    try:
        for i in range(min(episodes, cfg.warmstart.episodes)):
            spec, game_seed = cfg.env.train_game(i)
            spec = EnvSpec(name=spec.name, kwargs={**spec.kwargs, **cfg.warmstart.env_kwargs})
            (datum, *_) = demonstration_datums(trainer, (spec, game_seed), trainer.rng)
            actions = expert_actions(datum)
            records.append(
                {
                    "expert_steps": len(actions),
                    "locks_opened": actions.count("open door"),
                    "won": watched[-1].won,
                }
            )
    finally:
        mechanism._close(trainer)
    return records


def summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "demos": len(records),
        "expert_steps_median": statistics.median(r["expert_steps"] for r in records),
        "expert_opens_no_lock": sum(r["locks_opened"] == 0 for r in records),
        "expert_opens_both_locks": sum(r["locks_opened"] >= 2 for r in records),
        "reached_exit": sum(r["won"] for r in records),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    ap.add_argument("--episodes", type=int, default=256, help="demo games per seed (at most the benchmark's)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        out: dict[str, Any] = {"benchmark": "warmstart_demos", "env": "keydoor_rule", "seeds": args.seeds}
        for expert in EXPERTS:
            per_seed = {s: demos_of_seed(s, expert, args.episodes, work) for s in args.seeds}
            out[expert] = summary([r for rs in per_seed.values() for r in rs])
            out[expert]["per_seed"] = {str(s): summary(rs) for s, rs in per_seed.items()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
