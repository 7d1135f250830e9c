"""Benchmark: does one TD step move the actor's decision, on the Datums it trained on and on the next ones?

The question to ask when TEMPO does not learn even with an exact critic: the advantages may be right and the
step may still not reach the decision. Runs the main job's config (or ``--config``) with the given overrides
(default: the oracle critic, no critic warm-up), after its supervised warm start, for ``--updates`` TD updates.
Around every ``train_step`` it keeps the sampler before and after the step, then rescores with
``compute_logprobs``:

* ``train``: the step's own actor Datums, ``S = sum_t A_t * (log pi_new(a_t) - log pi_old(a_t))`` over the
  tokens with ``A_t != 0`` (the first-order gain of the policy-gradient surrogate; > 0 when the advantages, the
  Datums and the optimiser step agree in sign);
* ``heldout``: the next update's Datums (other games, sampled after the step) under the same two policies: > 0
  when what the step learned carries over;
* ``decision``: the same sums restricted to the decision tokens, the tokens that follow ``--decision-after``
  (default ``take``: the key colour in KeyDoor). ``decision_positive_share`` is the share of steps where it is
  > 0 (0.5: no consistent direction).

Prints ONE JSON line::

    {"benchmark": "actor_step", "seed": 0, "steps": 15, "train_surrogate_mean": ..., "train_decision_mean": ...,
     "train_decision_positive_share": ..., "heldout_surrogate_mean": ..., "heldout_decision_mean": ...,
     "heldout_decision_positive_share": ..., "decision_tokens_per_update": ...}

Measured on the main job (docs/results.md, "where the actor's signal is lost"): positive train surrogates with a
decision share near 0.5 and negative held-out surrogates, i.e. the decision gets ~1/1000 of the step.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tempo_rl.backends.types import Datum
from tempo_rl.training.config import load_config
from tempo_rl.training.run import build_trainer
from tempo_rl.training.warmstart import warm_start

MAIN_JOB = Path(__file__).resolve().parents[1] / "src" / "tempo_rl" / "training" / "main_job.toml"


def _full_tokens(d: Datum) -> list[int]:
    return [*d.model_input, int(d.loss_fn_inputs["target_tokens"][-1])]


def rescore(datums: Sequence[Datum], sampler: Any) -> list[np.ndarray]:
    """``log pi(target_t)`` per Datum position under ``sampler`` (NaN where none is returned)."""
    out = []
    for d in datums:
        row = sampler.compute_logprobs(_full_tokens(d))[1:]
        out.append(np.asarray([np.nan if x is None else x for x in row], dtype=np.float64))
    return out


def surrogate(
    datums: Sequence[Datum], before: Sequence[np.ndarray], after: Sequence[np.ndarray], after_token: int
) -> tuple[float, float, int]:
    """``(S over all A != 0 tokens, S over the decision tokens, decision tokens)``, S = sum A (lp_after - lp_before)."""
    total = decision = 0.0
    n_decision = 0
    for d, b, a in zip(datums, before, after):
        adv = np.asarray(d.loss_fn_inputs["advantages"], dtype=np.float64)
        inputs = np.asarray(d.model_input)
        m = (adv != 0) & np.isfinite(a) & np.isfinite(b)
        total += float(np.sum(adv[m] * (a[m] - b[m])))
        dm = m & (inputs == after_token)
        decision += float(np.sum(adv[dm] * (a[dm] - b[dm])))
        n_decision += int(dm.sum())
    return total, decision, n_decision


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(MAIN_JOB))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--updates", type=int, default=16, help="TD updates (steps measured: updates - 1)")
    p.add_argument(
        "--decision-after", default="take", help="the decision tokens follow this text's last token"
    )
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    p.add_argument("--quick", action="store_true", help="3 TD updates on a short warm start (a smoke run)")
    args = p.parse_args(argv)
    overrides = ['tempo.critic="oracle"', "tempo.warmup_updates=0", "run.eval_every=0", "run.loggers=[]"]
    updates = 3 if args.quick else args.updates
    if args.quick:
        overrides += ["warmstart.episodes=32", "warmstart.epochs=10", "tempo.states_per_batch=4"]
    overrides += [f"run.seed={args.seed}", f"tempo.td_updates={updates}", *args.set]
    cfg = load_config(args.config, overrides)
    trainer = build_trainer(cfg, Path(tempfile.mkdtemp(prefix="tempo-actor-step-")))
    try:
        after_token = trainer.c.chat.tokenizer.encode(args.decision_after, add_special_tokens=False)[-1]
        if cfg.warmstart.enabled:
            warm_start(trainer)
            trainer.state.warmstart_done = True
        steps: list[tuple[list[Datum], Any, Any]] = []
        inner = trainer.train_step

        def recorded(
            datums: Sequence[Datum], timer: Any = None, substeps: int | None = None
        ) -> dict[str, float]:
            before = trainer.c.sampler
            out = inner(datums, timer, substeps=substeps)
            steps.append(([d for d in datums if d.tags.get("role") == "actor"], before, trainer.c.sampler))
            return out

        trainer.train_step = recorded  # type: ignore[method-assign]
        trainer.train()
        rows = []
        for (datums, old, new), (following, _, _) in itertools.pairwise(steps):
            t_all, t_dec, n_dec = surrogate(datums, rescore(datums, old), rescore(datums, new), after_token)
            h_all, h_dec, _ = surrogate(
                following, rescore(following, old), rescore(following, new), after_token
            )
            rows.append((t_all, t_dec, h_all, h_dec, n_dec))
    finally:
        trainer.close()
    r = np.asarray(rows, dtype=np.float64).reshape(-1, 5)
    mean = lambda c: float(np.mean(r[:, c])) if len(r) else float("nan")  # noqa: E731
    share = lambda c: float(np.mean(r[:, c] > 0)) if len(r) else float("nan")  # noqa: E731
    print(
        json.dumps(
            {
                "benchmark": "actor_step",
                "seed": args.seed,
                "overrides": args.set,
                "steps": len(r),
                "train_surrogate_mean": mean(0),
                "train_decision_mean": mean(1),
                "train_decision_positive_share": share(1),
                "heldout_surrogate_mean": mean(2),
                "heldout_decision_mean": mean(3),
                "heldout_decision_positive_share": share(3),
                "decision_tokens_per_update": mean(4),
            }
        )
    )


if __name__ == "__main__":
    main()
