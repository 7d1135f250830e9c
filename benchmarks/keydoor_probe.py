"""Probe a saved policy of the mechanism benchmark's ``keydoor_rule``: what it decides, and where it fails.

A success rate mixes two things on ``keydoor_rule``: the key rule (take the blue key in both key rooms, the
decision TEMPO's critic is meant to credit) and the 42-step walk (``go on``, and ``open door`` at each lock).
This plays a policy state (a warm start's ``warmstart.pt`` or an arm's ``final_state``) on the benchmark's first
``--games`` evaluation games at ``--temperature`` and reports them apart:

* ``success``: the share of games won;
* ``right_key_share``: of all ``take <colour>`` actions, the share that took the colour every lock needs;
* ``right_keys``: the share of games whose first two ``take`` actions both took it;
* ``success_given_right_keys``: success among those games (the walk's share of the failures);
* ``wasted_steps_mean``: unreadable or inadmissible actions per game;
* ``top_actions``: the most frequent actions, with counts (e.g. ``open on``, a broken ``open door``);
* ``wasted_where``: the most frequent wasted steps (:func:`wasted_where`) as ``"action -> feedback @ room"``
  with counts: ``go on -> The door is locked. @ A locked door.`` is a walk that does not open a lock,
  ``open door -> Nothing happens. @ An empty room.`` one that opens where there is no lock, and ``open door ->
  The door stays locked.`` the price of a wrong key.

Usage::

    python benchmarks/keydoor_probe.py --state WORK/keydoor-seed3-oracle-KEY/backend_states/final.pt --seed 3

One JSON line. ``--work`` is the benchmark's cache folder (for the tokenizer; default ``runs/mechanism-work``);
``--quick`` probes at the benchmark's ``--quick`` scale.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _mechanism() -> Any:
    """``mechanism.py`` beside this script, imported as a module."""
    sys.path.insert(0, str(Path(__file__).parent))
    return importlib.import_module("mechanism")


def key_report(
    actions: Sequence[Sequence[str]], won: Sequence[bool], wasted: Sequence[int], right: str
) -> dict:
    """The probe's figures from each game's actions, outcome and wasted steps; ``right`` is the key colour every
    lock needs (see the module docstring)."""
    takes = [a for game in actions for a in game if a.startswith("take ")]
    right_keys = [[a for a in game if a.startswith("take ")][:2] == [f"take {right}"] * 2 for game in actions]
    n = len(actions)
    n_right = sum(right_keys)
    return {
        "games": n,
        "success": sum(won) / n if n else None,
        "right_key_share": sum(a == f"take {right}" for a in takes) / len(takes) if takes else None,
        "right_keys": n_right / n if n else None,
        "success_given_right_keys": sum(w for w, r in zip(won, right_keys) if r) / n_right
        if n_right
        else None,
        "wasted_steps_mean": sum(wasted) / n if n else None,
        "top_actions": Counter(a for game in actions for a in game).most_common(6),
    }


#: The feedback of a KeyDoor step that changed nothing (the step is wasted).
WASTED_FEEDBACK = ("Nothing happens.", "The door is locked.", "The door stays locked.")


def wasted_where(
    actions: Sequence[Sequence[str]], observations: Sequence[Sequence[str]], top: int = 8
) -> list[tuple[str, int]]:
    """The ``top`` most frequent wasted steps over all games, each as ``"action -> feedback @ room"``: a step is
    wasted when the observation it returned starts with one of :data:`WASTED_FEEDBACK`, and ``room`` is that
    observation's room description (the room the step was taken in: a wasted step does not move)."""
    counts: Counter[str] = Counter()
    for game_actions, game_obs in zip(actions, observations):
        for action, obs in zip(game_actions, game_obs):
            feedback = next((f for f in WASTED_FEEDBACK if obs.startswith(f)), None)
            if feedback is None:
                continue
            room = re.search(r"Room \d+ of \d+\. (.*?) You carry", obs)
            counts[f"{action} -> {feedback} @ {room.group(1) if room else '?'}"] += 1
    return counts.most_common(top)


def probe(state: str, seed: int, games: int, temperature: float, work: Path, quick: bool = False) -> dict:
    """Play ``state`` on the first ``games`` evaluation games of ``keydoor_rule`` (seed ``seed``'s config) and
    return :func:`key_report`'s figures."""
    from tempo_rl.training.run import build_trainer

    mech = _mechanism()
    env = (mech.QUICK_ENVS if quick else mech.ENVS)["keydoor_rule"]
    scale = mech.QUICK if quick else mech.FULL
    tok = mech.build_env_tokenizer(env, scale, work)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = mech.make_config(env, scale, seed, "oracle", Path(tmp), tok)
        cfg = cfg.model_copy(
            update={
                "warmstart": cfg.warmstart.model_copy(update={"episodes": 0}),
            }
        )
        trainer = build_trainer(cfg, Path(tmp), backend_state=state, options=mech.make_options(env, "oracle"))
        try:
            starts, _ = trainer.run_async(
                trainer.fresh_starts(1, [cfg.env.eval_game(j) for j in range(games)])
            )
            try:
                settings = trainer.rollout_settings(segment_rounds=None, temperature=temperature, seed=seed)
                results, _ = trainer.run_async(trainer.rollout(starts, settings))
            finally:
                trainer.close_envs(starts)
        finally:
            mech._close(trainer)
    branches = [row[0] for row in results]
    report = key_report(
        [b.actions for b in branches],
        [bool(b.won) for b in branches],
        [int(b.invalid_actions) for b in branches],
        str(env.kwargs["lock_colour"]),
    )
    report["wasted_where"] = wasted_where(
        [b.actions for b in branches], [[o.text for o in b.observations] for b in branches]
    )
    return {"state": state, "seed": seed, "temperature": temperature, **report}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--state", required=True, help="a backend state file (warmstart.pt or an arm's final.pt)")
    ap.add_argument("--seed", type=int, required=True, help="the benchmark seed the state belongs to")
    ap.add_argument("--games", type=int, default=32, help="evaluation games to play")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    ap.add_argument("--work", default="runs/mechanism-work", help="the benchmark's cache (for its tokenizer)")
    ap.add_argument("--quick", action="store_true", help="the benchmark's --quick scale")
    args = ap.parse_args(argv)
    if not Path(args.state).is_file():
        ap.error(f"--state {args.state!r} is not a file: pass a warmstart.pt or an arm record's final_state")
    out = probe(args.state, args.seed, args.games, args.temperature, Path(args.work), quick=args.quick)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
