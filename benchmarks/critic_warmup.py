"""Benchmark: how many warm-up env steps the generative critic needs at T = 48 before its values correlate.

The mechanism benchmark's generative critic is meant to reach a value correlation of 0.7 with its Monte Carlo
targets by the end of its warm-up, on every seed, within the arm's budget of 4,608 env steps
(``benchmarks/mechanism.py``). This runs that arm's warm-up alone for longer, to see what it would take.

Per seed it starts from the mechanism benchmark's own ``keydoor_rule`` warm start (:func:`mechanism.warm_start_task`,
cached in ``--work`` like the benchmark's) and runs ``--updates`` critic warm-up updates of the generative arm's
config (T = 48, H = 8, N = 4 branches), each on ``--games`` fresh games with ``--states`` critic states per
episode (the arm uses 2 games and 2 states). An update's ``critic/value_corr`` is the Pearson correlation, over
its states, between the critic's value V_hat (the expectation over its answers, read *before* the update trains
on them) and the state's Monte Carlo target (the return its branch got from there); it is undefined (null) when
every target of the update is equal.

How the warm-up is run is a :class:`Design`: by default the arm's (critic states every H rounds, 4 optimiser
steps a batch, one set of weights for actor and critic); ``--stride``, ``--substeps``, ``--epochs``,
``--own-weights`` (a critic with weights of its own, simulated: the warm start's policy plays every episode and
only the critic's Datums train) and ``--replay`` (each step trains every earlier warm-up update's critic Datums
too) change it, to find where the critic's signal is lost.

After the last update a value probe (:func:`mechanism.value_probe`, ``--probe-games`` held-out games, 0 = none) asks what
a correlation of 0.7 can mean here: it scores the critic on fresh states against their single returns (the
warm-up's own measure) and against the policy's values V_pi (``--probe-rollouts`` rollouts each), and measures
the ceiling, the correlation of V_pi itself with the single returns, which no critic can beat on average.

Prints ONE JSON line: per seed, per update, the correlation, the critic's mean estimate (it tracks the targets'
mean, the policy's success from those states) and the cumulative env steps; per seed the env steps after which
the correlation stays at or above ``--bar`` (0.7) for the rest of the run (null: never), and the probe.

Cost on 2 cores, warm starts included: ``--seeds 0 1 --jobs 2`` with 30 updates of 8 games and 6 states and no
probe takes about 23 minutes; the probe on seeds 0-4 takes about 20 minutes a run for the arm's design and for a
critic with its own weights, and 58 minutes for a critic with its own weights and replay, the design whose probe
holds on all 5 seeds. The figures are in ``docs/results.md``.

Usage::

    python benchmarks/critic_warmup.py --seeds 0 1 --jobs 2
    python benchmarks/critic_warmup.py --seeds 0 1 2 3 4 --jobs 2 --updates 2 --games 2 --states 2  # the arm's
    python benchmarks/critic_warmup.py --seeds 0 1 2 3 4 --jobs 2 --updates 4 --games 4 --states 0 \
        --stride 1 --substeps 16 --epochs 2 --own-weights          # every round, a critic of its own
    python benchmarks/critic_warmup.py --seeds 0 1 2 3 4 --jobs 2 --updates 4 --games 4 --states 0 \
        --stride 1 --substeps 16 --epochs 2 --own-weights --replay # ... that keeps the warm-up's data
    python benchmarks/critic_warmup.py --quick          # a smoke run (tiny model, 2 updates)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

_KEYS = ("critic/value_corr", "critic/mean_estimate_mean", "cost/env_steps")


@dataclass(frozen=True)
class Design:
    """How the critic's warm-up is run (the defaults: one set of weights, states every H rounds,
    4 steps an update, no replay; the mechanism benchmark's generative arm runs
    ``Design(stride=1, substeps=16, epochs=2, own_weights=True, replay=True, library=True)``, 32 steps an update).

    Attributes:
        stride: critic states every ``stride`` rounds of an episode (None: H, the arm's macro-step boundaries;
            1: every round; with a reward only at the exit every state of an episode has the same target).
        substeps: optimiser steps per warm-up batch (``tempo.warmup_substeps``; the arm: 4).
        epochs: passes over each warm-up batch's Datums (``substeps * epochs`` steps in all).
        own_weights: simulate a critic with weights of its own, initialised from the warm start: the warm
            start's policy (its sampling client, kept) plays every episode and every probe rollout, and only
            the critic's Datums train the model, which from then on answers only as the critic. The library's
            trainer shares one set of weights between actor and critic; this measures what separating them
            would change, with the actor held at the warm start (no TD here).
        replay: every warm-up step trains on the critic Datums of all warm-up updates so far, not only the
            latest batch's (Monte Carlo regression on the whole warm-up's data: a batch whose episodes were all
            lost no longer pulls every value to 0).
        library: run ``own_weights`` and ``replay`` through the trainer itself (``tempo.critic_weights =
            "own"``, ``tempo.warmup_replay``) instead of simulating them: the measurement of the library's
            implementation.
    """

    stride: int | None = None
    substeps: int = 4
    epochs: int = 1
    own_weights: bool = False
    replay: bool = False
    library: bool = False

    def label(self) -> str:
        """A short name for run directories."""
        own = "-own" if self.own_weights else ""
        replay = "-replay" if self.replay else ""
        library = "-lib" if self.library else ""
        return f"h{self.stride or 'H'}-s{self.substeps}-e{self.epochs}{own}{replay}{library}"

    def tempo_settings(self) -> dict[str, Any]:
        """The trainer's settings for this design: with ``library`` its own (``tempo.critic_weights``,
        ``tempo.warmup_replay``; the epochs as ``substeps * epochs`` steps of smaller minibatches), measured
        instead of the simulation; else one set of weights and no replay (the simulation adds them)."""
        if not self.library:
            return {"critic_weights": "shared", "warmup_replay": False}
        return {
            "critic_weights": "own" if self.own_weights else "shared",
            "warmup_replay": self.replay,
            "warmup_substeps": self.substeps * self.epochs,
        }


def apply_design(trainer: Any, design: Design) -> Any:
    """Set ``design``'s epochs and own weights on ``trainer`` (its ``train_step`` and, with own weights, its
    ``rollout``); returns the sampling client that plays the episodes from now on (the warm start's with own
    weights, else None: the trainer's current one)."""
    import types

    from tempo_rl.rollout.branches import run_branches

    if design.library or (design.epochs == 1 and not design.own_weights and not design.replay):
        return None  # the trainer as configured (Design.tempo_settings)
    train_step = trainer.train_step
    replayed: list[Any] = []  # the critic Datums of the earlier warm-up updates (with ``design.replay``)

    def repeated(datums: Sequence[Any], timer: Any = None, substeps: int | None = None) -> Any:
        kept = [d for d in datums if not design.own_weights or d.tags.get("role") == "critic"]
        if design.replay:
            earlier = list(replayed)
            replayed.extend(d for d in datums if d.tags.get("role") == "critic")
            kept = earlier + kept
        return train_step(kept * design.epochs, timer, substeps=(substeps or 1) * design.epochs)

    trainer.train_step = repeated
    if not design.own_weights:
        return None
    actor = trainer.c.sampler  # the warm start's policy: a snapshot, untouched by later steps

    async def rollout(self: Any, starts: Sequence[Any], settings: Any) -> Any:
        return await run_branches(
            [s.state for s in starts],
            [s.envs for s in starts],
            sampler=actor,
            chat=self.c.chat,
            settings=settings,
            pool=self.c.pool,
            parser=self.c.parser,
        )

    trainer.rollout = types.MethodType(rollout, trainer)
    return actor


def warmup_curve(
    seed: int,
    updates: int,
    games: int,
    states: int | None,
    work: Path,
    quick: bool,
    probe_games: int = 0,
    probe_rollouts: int = 8,
    design: Design = Design(),
) -> dict[str, Any]:
    """The generative arm's warm-up on ``keydoor_rule`` from the benchmark's warm start of ``seed``, run for
    ``updates`` updates with ``states`` critic states per episode (None: all) and the critic ``design``:
    ``{"corr": [...], "mean_estimate": [...], "env_steps": [...]}``, one entry per update, and with
    ``probe_games`` > 0 the :func:`mechanism.value_probe` after the last update (``"probe"``)."""
    import mechanism

    scale = mechanism.QUICK if quick else mechanism.FULL
    env = (mechanism.QUICK_ENVS if quick else mechanism.ENVS)["keydoor_rule"]
    tok_dir = mechanism.build_env_tokenizer(env, scale, work)
    warm = mechanism.warm_start_task(env, scale, seed, work, tok_dir)
    run_dir = work / f"{env.name}-seed{seed}-critic-warmup-{updates}x{games}x{states}-{design.label()}"
    # the critic-only warm-up of a fixed length: the actor waits, no hand-over gate
    cfg = mechanism.make_config(env, scale, seed, "generative_critic_only", run_dir, tok_dir)
    tempo = cfg.tempo.model_copy(
        update={
            "warmup_updates": updates,
            "warmup_games_per_batch": games,
            # None: every boundary (at most one per round); the boundaries are every H rounds, H set below
            "warmup_states_per_episode": 1_000_000 if states is None else states,
            "warmup_substeps": design.substeps,
            **design.tempo_settings(),
            # boundaries every `stride` rounds; the probe's states stay at the arm's H
            "macro_rounds": design.stride or cfg.tempo.macro_rounds,
        }
    )
    probe_config = cfg.model_copy(  # the run's config with the probe's states every H rounds, as the arm's
        update={"tempo": tempo.model_copy(update={"macro_rounds": cfg.tempo.macro_rounds})}
    )
    cfg = cfg.model_copy(update={"tempo": tempo})
    trainer, last = mechanism.warm_started_trainer(
        cfg, run_dir, warm, mechanism.make_options(env, "generative_critic_only")
    )
    policy = apply_design(trainer, design)
    out: dict[str, Any] = {"corr": [], "mean_estimate": [], "env_steps": []}
    try:
        for _ in range(updates):
            trainer.train(max_updates=1)
            corr, mean, steps = (mechanism._round(last.get(k)) for k in _KEYS)
            out["corr"].append(corr)
            out["mean_estimate"].append(mean)
            out["env_steps"].append(steps)
        if probe_games:
            trainer.config = probe_config  # probe states every H rounds, as the arm's
            probe = mechanism.value_probe(trainer, probe_games, probe_rollouts, policy)
            out["probe"] = {k: mechanism._round(v) if isinstance(v, float) else v for k, v in probe.items()}
    finally:
        mechanism._close(trainer)
    return out


def steps_to_bar(curve: dict[str, Any], bar: float) -> float | None:
    """The env steps of the update after which every later update's correlation is >= ``bar`` (an undefined
    correlation breaks the run), or None when the last update's is not."""
    reached = None
    for corr, steps in zip(curve["corr"], curve["env_steps"]):
        if corr is None or corr < bar:
            reached = None
        elif reached is None:
            reached = steps
    return reached


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1])
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--games", type=int, default=8, help="fresh games per warm-up update (the arm: 2)")
    ap.add_argument("--states", type=int, default=6, help="critic states per episode (the arm: 2; 0: all)")
    ap.add_argument(
        "--stride", type=int, default=None, help="critic states every R rounds (default H; 1: all)"
    )
    ap.add_argument("--substeps", type=int, default=4, help="optimiser steps per warm-up batch (the arm: 4)")
    ap.add_argument("--epochs", type=int, default=1, help="passes over each warm-up batch (the arm: 1)")
    ap.add_argument(
        "--own-weights", action="store_true", help="simulate a critic with its own weights (see Design)"
    )
    ap.add_argument(
        "--replay", action="store_true", help="train on every warm-up update's critic Datums so far"
    )
    ap.add_argument(
        "--library",
        action="store_true",
        help="own weights and replay through the trainer's config (tempo.critic_weights, tempo.warmup_replay)",
    )
    ap.add_argument("--bar", type=float, default=0.7)
    ap.add_argument("--probe-games", type=int, default=8, help="held-out games of the value probe (0: none)")
    ap.add_argument("--probe-rollouts", type=int, default=8, help="M rollouts per probe state for V_pi")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("runs/mechanism-work"), help="the benchmark's cache")
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 updates of 1 game: a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.updates, args.games, args.states = [0], 2, 1, 2
        args.probe_games, args.probe_rollouts = min(args.probe_games, 1), min(args.probe_rollouts, 2)
    args.work.mkdir(parents=True, exist_ok=True)
    design = Design(args.stride, args.substeps, args.epochs, args.own_weights, args.replay, args.library)
    run = functools.partial(
        warmup_curve,
        updates=args.updates,
        games=args.games,
        states=args.states or None,
        work=args.work,
        quick=args.quick,
        probe_games=args.probe_games,
        probe_rollouts=args.probe_rollouts,
        design=design,
    )
    curves = []
    with ProcessPoolExecutor(args.jobs) if args.jobs > 1 else contextlib.nullcontext() as pool:
        for seed, curve in zip(args.seeds, pool.map(run, args.seeds) if pool else map(run, args.seeds)):
            print(json.dumps({"seed": seed, **curve}), file=sys.stderr, flush=True)  # progress, in seed order
            curves.append(curve)
    out: dict[str, Any] = {
        "benchmark": "critic_warmup",
        "env": "keydoor_rule",
        "updates": args.updates,
        "games_per_update": args.games,
        "states_per_episode": args.states,
        "bar": args.bar,
        "probe_games": args.probe_games,
        "probe_rollouts": args.probe_rollouts,
        "design": asdict(design),
    }
    for seed, curve in zip(args.seeds, curves):
        out[f"seed{seed}"] = {**curve, "env_steps_to_bar": steps_to_bar(curve, args.bar)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
