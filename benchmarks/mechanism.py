"""The long-horizon benchmark: TEMPO with critics of known quality, GiGPO and GRPO, at equal env steps.

Every arm of one (env, seed) trains the same tiny local model from the same supervised warm start (behaviour
cloning on noisy demonstrations of the env's expert recovering from each slip, run once per (env, seed), so arms
compare pairwise per seed), on the local backend, until it has used the same budget of environment steps
(``cost/env_steps``: every action sent to an env by training rollouts, the Monte Carlo critic's rollouts and the
warm-up's episodes included; evaluation is not counted).

Envs (``ENVS``; the default plan, ``FULL.envs``, runs ``keydoor_rule`` and ``crossings_rule``):

* ``keydoor_rule``: a corridor of T = 48 rounds, H = 8 (6 macro-steps), 2 key rooms of 2 colours; both locks need
  the blue key in every game, the first lock is 8 rooms after the last key room and the only reward is 1 at the
  far exit (the walkthrough takes 42 steps). The shared warm start imitates 256 demonstration games whose locks
  are drawn apart from their signs, so it clones no key preference: a rule learnt from reward alone. Evaluated at
  the sampling temperature (1.0). Its critic reads the env's critic-only note (``state_note``): whether the keys
  carried and the key rooms left still fit every lock, and the spare steps (the steps left less the fewest that
  reach the exit; "unreachable" once they run out);
* ``crossings_rule``: a trail of T = 48 rounds (42 rooms), H = 8, with 4 rivers; at every river of every game
  the bridge is quick and the ford a 4-room detour, so one slow way leaves 2 spare steps and a second loses the
  episode, silently; the only reward is 1 at the camp. The warm start imitates 256 demonstration games whose
  quick ways are drawn per river (no preference to clone). Evaluated at 1.0. Its critic reads the env's note:
  the spare steps and the rivers ahead;
* ``knights`` (with ``--envs knights``): place 3 pieces on a 5x5 board with 2 fixed within 16 steps, the
  verdict only when all 3 are placed; H = 2; actor and evaluation at 0.5 from a warm start on 512 demo games; the
  critic reads the pairs of pieces that conflict now (``Observation.privileged_state``);
* ``keydoor``: the signed corridor (the key to take is shown by a sign), with ``--envs keydoor``.

Arms (``ARMS``):

* ``grpo``: full episodes, group-centred returns, no critic;
* ``gigpo``: GRPO's batch plus GiGPO's step advantages within anchor-state groups (``algorithm = "gigpo"``);
* ``oracle``: TEMPO with the env's exact value V* (``tempo.critic = "oracle"``), prefix correction off;
  ``oracle_pc`` the same with the clipped prefix correction; ``oracle_flip10`` / ``oracle_flip30`` the oracle
  with each estimate flipped (V -> R_max - V) with probability 0.1 / 0.3;
* ``mc``: the Monte Carlo critic (the mean return of M = 2 policy rollouts from the restored state);
* ``generative``: TEMPO's own critic (the model prompted for ``<value>``, weights of its own copied from the warm
  start, :func:`generative_critic_design`). Its warm-up plays GRPO's batch and trains the actor with GRPO's
  advantages while the critic fits the episodes' Monte Carlo returns; TD begins when the critic's reading on
  fresh episodes passes the hand-over gate (``tempo.handover_corr``), at the latest after the env steps of
  ``Scale.warmup_updates`` updates of ``Scale.warmup_games`` games;
* ``generative_critic_only``: the ablation, a fixed critic-only warm-up of ``Scale.warmup_updates`` updates of
  ``Scale.warmup_games`` games while the actor waits;
* ``generative_no_note`` (the envs with a note: ``keydoor_rule``, ``crossings_rule``): the generative arm
  without the env's critic-only note (``state_note = False``): the critic reads the last turn and the
  observation, as the actor does, and nothing else. It starts from the same warm start.

After a generative arm's warm-up a value probe (:func:`value_probe`, not counted in the budget) scores the
critic's own values on held-out games' states against their single returns and against the policy's values
V_pi (M rollouts each, :func:`probe_rollouts`).

Reported, per env and arm, over seeds (mean and standard error, SE = sd / sqrt(n)): eval success at the budget,
the success AUC (mean success over 41 evenly spaced env-step points from 0 to the budget), each arm's paired AUC
difference against GRPO per seed (mean, SE, seeds positive, the lowest), the tokens processed (``cost/tokens`` =
prefill + sampled + trained) each arm needs to reach GRPO's final success of the same seed, where the generative
arms handed over to TD, and the generative critic's value correlation at the end of its warm-up. Curves: success
against env steps and against tokens processed.

Every (env, seed) warm start and every (env, seed, arm) run is cached in ``--work`` (default
``runs/mechanism-work``, git-ignored) as soon as it finishes, keyed by its whole validated config and a digest of
the code (:func:`config_key`, :func:`code_fingerprint`): an interrupted run resumes where it stopped, ``--seeds``
/ ``--arms`` add to what is there, and a changed config or code never reuses an old run. ``--jobs N`` runs the
warm starts and the arm runs in N processes, each (env, seed)'s arms as soon as its warm start is done, the
generative arms first (:func:`longest_first`). The one JSON line (stdout) also carries the estimated time of the
whole plan at ``--jobs`` processes, extrapolated from the arm-seeds measured so far (:func:`estimate`).

Time (CPU seconds of one process with one torch thread, seed 0 at full size): a ``keydoor_rule`` warm start
about 350 s, its GRPO and oracle arms about 100 s, its generative arms 400-500 s (2-3 minutes of it the value
probe).

Usage::

    python benchmarks/mechanism.py --jobs 2                      # the full run (5 seeds), resumable
    python benchmarks/mechanism.py --envs keydoor_rule --arms grpo gigpo generative --jobs 2
    python benchmarks/mechanism.py --quick --out /tmp/mech-quick  # CI smoke run (tiny)
    python benchmarks/mechanism.py --from-results benchmarks/results/mechanism/results.json
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

# ------------------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class EnvSetting:
    """One benchmark environment: its kwargs, T (episode limit), H (macro-step rounds) and its arms; the
    warm start's demonstrations use ``demo_kwargs`` over ``kwargs`` (``warmstart.env_kwargs``), on
    ``demo_episodes`` games (None: the scale's ``warmstart_episodes``); every arm's actor samples at
    ``temperature`` (``sampling.temperature``) and the evaluations at ``eval_temperature``; the generative arm's
    warm-up updates play ``warmup_games`` games each (None: the scale's ``warmup_games``), and its value probe
    reads V_pi from ``probe_rollouts`` rollouts per state (None: the scale's; :func:`probe_rollouts`). The
    generative critic steps at ``critic_learning_rate`` (None: the actor's), is shown the last
    ``critic_history_turns`` turns (None: all). The warm start's step size cools down over the last
    ``warmstart_cooldown`` share of its steps. These three reach the trainer as
    :class:`~tempo_rl.training.options.TrainerOptions` (:func:`make_options`)."""

    name: str
    kwargs: Mapping[str, Any]
    max_rounds: int
    macro_rounds: int
    arms: tuple[str, ...]
    demo_kwargs: Mapping[str, Any] = field(default_factory=dict)
    eval_temperature: float = 0.1
    demo_episodes: int | None = None
    temperature: float = 1.0
    warmup_games: int | None = None
    probe_rollouts: int | None = None
    critic_learning_rate: float | None = None
    critic_history_turns: int | None = None
    warmstart_cooldown: float = 0.0


@dataclass(frozen=True)
class Scale:
    """How big the run is (the same for every arm)."""

    seeds: tuple[int, ...]
    envs: tuple[str, ...]
    budget_steps: int
    eval_points: int
    eval_episodes: int
    warmstart_episodes: int
    warmstart_epochs: int
    hidden_size: int
    num_layers: int
    vocab_size: int
    states_per_batch: int
    branches: int
    critic_samples: int
    endpoint_samples: int
    warmup_updates: int
    warmup_games: int
    grpo_games: int
    mc_rollouts: int
    learning_rate: float
    max_tokens: int
    max_trajectory_tokens: int
    # the generative critic's prompt budget (sampling.critic_max_prompt_tokens): the quick scale's 400-token
    # vocabulary writes even a prompt with every turn omitted in about 805 tokens; keydoor_rule's prompts with
    # its lock note reach 779 tokens, knights' 528
    critic_max_prompt_tokens: int = 832
    # the generative arm's warm-up: optimiser steps per update (tempo.warmup_substeps); its critic states are
    # every round of every episode (tempo.warmup_states_per_episode = "every_round")
    warmup_substeps: int = 32
    # the value probe after the generative arm's warm-up (:func:`value_probe`): held-out games, rollouts per
    # state for V_pi (0 games: none)
    probe_games: int = 8
    probe_rollouts: int = 8


ARMS: dict[str, dict[str, Any]] = {
    "grpo": {"algorithm": "grpo"},
    "oracle": {"algorithm": "tempo", "critic": "oracle"},
    "oracle_pc": {"algorithm": "tempo", "critic": "oracle", "prefix_correction": "clipped"},
    "oracle_flip10": {"algorithm": "tempo", "critic": "oracle", "oracle_flip_prob": 0.1},
    "oracle_flip30": {"algorithm": "tempo", "critic": "oracle", "oracle_flip_prob": 0.3},
    "mc": {"algorithm": "tempo", "critic": "monte_carlo"},
    "generative": {"algorithm": "tempo", "critic": "generative"},
    # the ablation: the critic-only warm-up of a fixed length (the actor waits for TD)
    "generative_critic_only": {"algorithm": "tempo", "critic": "generative", "critic_only_warmup": True},
    # the generative arm without the env's critic-only note: the critic reads what the actor reads
    "generative_no_note": {"algorithm": "tempo", "critic": "generative", "env_kwargs": {"state_note": False}},
    "gigpo": {"algorithm": "gigpo"},
}

#: the arms of an env without a critic-only note (the no-note arm would be the generative arm again)
_ALL = tuple(a for a in ARMS if a != "generative_no_note")
_NO_PC = tuple(a for a in _ALL if a != "oracle_pc")
#: knights' arms: its oracle is 1 from almost every state (16 steps leave room to remove and re-place pieces), so
#: a noisy oracle has nothing to degrade; the flipped arms stay available with ``--arms``
_KNIGHTS_ARMS = ("grpo", "gigpo", "oracle", "mc", "generative")

ENVS: dict[str, EnvSetting] = {
    "keydoor": EnvSetting(
        "keydoor",
        {"horizon": 48, "keys": 2, "colours": 2, "clue_gap": 0, "lock_gap": 8, "clue_at_key": True},
        48,
        8,
        _ALL,
    ),
    # knights: an actor at 0.5 taught by 512 demo games, so that a state decides more of its return, macro-steps
    # of 2 rounds; its generative critic at a step size of its own, 3e-3, shown the last turn only, warmed up on
    # 16 games per update
    "knights": EnvSetting(
        "knights",
        {"size": 5, "preplaced": 2, "place": 3, "max_steps": 16, "feedback": "final"},
        16,
        2,
        _KNIGHTS_ARMS,
        eval_temperature=0.5,
        demo_episodes=512,
        temperature=0.5,
        warmup_games=16,
        probe_rollouts=32,
        critic_learning_rate=3e-3,
        critic_history_turns=1,
    ),
}

#: The smoke run's envs: the same kinds, short (T = 16) so that it takes about a minute.
QUICK_ENVS: dict[str, EnvSetting] = {
    "keydoor": EnvSetting(
        "keydoor",
        {"horizon": 16, "keys": 2, "colours": 2, "clue_gap": 0, "lock_gap": 1, "clue_at_key": True},
        16,
        4,
        _ALL,
    ),
    "knights": EnvSetting(
        "knights",
        {"size": 4, "preplaced": 1, "place": 2, "max_steps": 8, "feedback": "final"},
        8,
        4,
        _NO_PC,
    ),
}


def probe_rollouts(env: EnvSetting, scale: Scale) -> int:
    """M, the rollouts per state from which the value probe reads V_pi: the env's ``probe_rollouts``, else the
    scale's. An M-rollout mean carries binomial noise ``V_pi (1 - V_pi) / M`` that reads every correlation with
    it low (:func:`value_probe`); where the states' values are small probabilities (knights) that noise was 9-24%
    of V_pi's variance at M = 8, enough to hold a perfect critic's correlation near 0.7."""
    return scale.probe_rollouts if env.probe_rollouts is None else env.probe_rollouts


def learnt_rule(
    setting: EnvSetting, rule: Mapping[str, Any], demo: Mapping[str, Any], demo_episodes: int | None = None
) -> EnvSetting:
    """A setting whose winning choice follows a rule the same in every game (``rule``, over the setting's
    kwargs, with the env's critic-only note on), while the shared warm start imitates demonstrations where that
    choice is drawn at random (``demo``): a preference the 2-layer model can represent (no attention circuit),
    learnt from reward alone. Evaluated at the sampling temperature, 1.0: the success of the policy RL trains
    (a near-greedy evaluation measures another policy).

    The warm start imitates ``demo_episodes`` distinct demo games and cools its step size down over its last
    epoch (the demos leave the choice undecided, so without the cool-down the preference ends where the last
    Adam steps leave it). Reward stays only at the end: no invalid-action penalty. The generative critic steps
    at 3e-3 and reads the last turn only, as knights' does.
    """
    return replace(
        setting,
        kwargs={**setting.kwargs, **rule, "state_note": True},
        arms=tuple(ARMS),
        demo_kwargs=dict(demo),
        eval_temperature=1.0,
        demo_episodes=demo_episodes,
        critic_learning_rate=3e-3,
        critic_history_turns=1,
        warmstart_cooldown=1 / 3,
    )


def keydoor_rule(setting: EnvSetting, demo_episodes: int | None = None) -> EnvSetting:
    """``keydoor_rule`` from a ``keydoor`` setting (:func:`learnt_rule`): the same corridor, but both locks need
    the blue key in every game (the signs show it), and the demonstrations' locks are drawn apart from their
    signs (random key choices). Evaluated at 1.0: a near-greedy evaluation's argmax at a lock can be ``go on``,
    a choice V* does not price until the spare steps run out.

    Its warm start imitates ``demo_episodes`` = 256 distinct demo games (with the scale's 96 the warm-started
    actor wasted up to 28 steps an episode on inadmissible actions; the walk has 6 spare steps).

    The env gives the critic its note (``state_note``; the actor never reads it): whether the keys carried and
    the key rooms left still fit every lock, and the spare steps (the steps left less the fewest that reach the
    exit; "unreachable" once they run out). It states relations the critic's input implies but the 2-layer
    critic does not learn to compute from a few dozen warm-up episodes.
    """
    return learnt_rule(setting, {"lock_colour": "blue"}, {"lock_colour": "independent"}, demo_episodes)


ENVS["keydoor_rule"] = keydoor_rule(ENVS["keydoor"], demo_episodes=256)
QUICK_ENVS["keydoor_rule"] = keydoor_rule(QUICK_ENVS["keydoor"])

#: ``crossings_rule``: a trail of T = 48 rounds (42 rooms), H = 8, with 4 rivers; at every river of every game
#: the bridge is quick and the ford a 4-room detour, so one slow way leaves 2 spare steps and a second loses;
#: the only reward is 1 at the camp. The demonstrations' quick ways are drawn per river (``quick = "random"``),
#: so the warm start clones no preference; a coin toss at each river wins 5 games in 16. The critic's note:
#: the spare steps and the rivers ahead (:meth:`~tempo_rl.envs.crossings.CrossingsEnv.spare_note`).
ENVS["crossings_rule"] = learnt_rule(
    EnvSetting("crossings", {"horizon": 48, "crossings": 4, "detour": 4}, 48, 8, ()),
    {"quick": "bridge"},
    {"quick": "random"},
    demo_episodes=256,
)
QUICK_ENVS["crossings_rule"] = learnt_rule(
    EnvSetting("crossings", {"horizon": 16, "crossings": 2, "detour": 2}, 16, 4, ()),
    {"quick": "bridge"},
    {"quick": "random"},
)

FULL = Scale(
    seeds=(0, 1, 2, 3, 4),
    envs=("keydoor_rule", "crossings_rule"),
    budget_steps=4608,
    eval_points=6,
    eval_episodes=32,
    warmstart_episodes=96,
    warmstart_epochs=3,
    hidden_size=64,
    num_layers=2,
    vocab_size=512,
    states_per_batch=4,
    branches=4,
    critic_samples=4,
    endpoint_samples=2,
    warmup_updates=4,
    warmup_games=4,
    grpo_games=2,
    mc_rollouts=2,
    learning_rate=1e-3,
    max_tokens=32,
    max_trajectory_tokens=6144,
)

QUICK = Scale(
    seeds=(0,),
    envs=("keydoor",),
    budget_steps=48,
    eval_points=1,
    eval_episodes=2,
    warmstart_episodes=4,
    warmstart_epochs=1,
    hidden_size=32,
    num_layers=1,
    vocab_size=400,
    states_per_batch=2,
    branches=2,
    critic_samples=2,
    endpoint_samples=1,
    warmup_updates=1,
    warmup_games=1,
    grpo_games=1,
    mc_rollouts=1,
    learning_rate=1e-3,
    max_tokens=32,
    max_trajectory_tokens=2048,
    critic_max_prompt_tokens=1024,
    warmup_substeps=2,
    probe_games=1,
    probe_rollouts=2,
)

#: Per-update metrics kept in each run record (besides env steps and tokens).
_KEEP = (
    "train/phase",
    "tempo/handover",
    "tempo/handover_reading",
    "tempo/handover_at_cap",
    "gigpo/anchor_groups",
    "gigpo/shared_step_share",
    "gigpo/step_advantage_share",
    "train/optim_steps",
    "train/actor_datums",
    "actor/degenerate_group_rate",
    "critic/abs_error_mean",
    "critic/value_corr",
    "critic/parse_failure_rate",
    "critic/mc_env_steps",
    "prefix/weight_mean",
    "prefix/clipped_fraction",
    "rollout/valid_tool_call_rate",
    "cost/prefill_tokens",
    "cost/sampled_tokens",
    "cost/trained_tokens",
    "sampling/prefill_tokens",  # the local backend's own count, after its prefix cache
)

TIME_PARTS = ("restore", "sampling", "env", "training", "prefix", "store", "reference")


def generative_critic_design(scale: Scale) -> dict[str, Any]:
    """The generative arm's critic design (``tempo.*``), the one ``benchmarks/critic_warmup.py`` found to hold
    on 5 seeds (``docs/results.md``): weights of its own (a copy of the warm start; the policy's RL steps no
    longer move it, nor its steps the policy), a warm-up that offers it every round of every episode
    (``warmup_states_per_episode = "every_round"``: one env step, one Monte Carlo example) and rehearses as many
    earlier examples as each update brings (``warmup_replay``: a batch whose episodes were all lost no longer
    pulls every value to 0), ``warmup_substeps`` optimiser steps per update. An env's
    ``EnvSetting.critic_learning_rate`` and ``critic_history_turns`` (knights) reach it through
    :func:`make_options`."""
    return {
        "critic_weights": "own",
        "warmup_replay": True,
        "warmup_states_per_episode": "every_round",
        "warmup_substeps": scale.warmup_substeps,
    }


def make_config(
    env: EnvSetting, scale: Scale, seed: int, arm: str, run_dir: Path, tokenizer_dir: Path
) -> Any:
    """The run config of one (env, seed, arm); all arms share env, model, sampling and optimiser settings (one
    job, of which each arm keeps the settings its algorithm reads)."""
    from tempo_rl.training.config import config_for

    spec = ARMS[arm]
    critic = spec.get("critic", "generative")
    generative = spec["algorithm"] == "tempo" and critic == "generative"
    critic_only = bool(spec.get("critic_only_warmup", False))
    games = scale.warmup_games if env.warmup_games is None else env.warmup_games
    if generative and not critic_only:
        # the warm-up plays GRPO's batch and trains the actor on it; its cap spends the env steps the fixed
        # critic-only warm-up spends, and the hand-over gate may end it sooner
        cap, games = max(1, scale.warmup_updates * games // scale.grpo_games), scale.grpo_games
    else:
        cap = scale.warmup_updates
    max_positions = 1 << max(11, (scale.max_trajectory_tokens - 1).bit_length())
    return config_for(
        {
            "env": {
                "name": env.name,
                "kwargs": {**env.kwargs, **spec.get("env_kwargs", {})},
                "train_seed_start": 10_000 * (seed + 1),
            },
            "backend": {
                "kind": "local",
                "tokenizer_path": str(tokenizer_dir),
                "hidden_size": scale.hidden_size,
                "num_layers": scale.num_layers,
                "num_heads": 4 if scale.hidden_size >= 64 else 2,
                "max_positions": max_positions,
                "num_threads": 1,
                "device": "cpu",
                "seed": seed,
                "state_dir": str(run_dir / "backend_states"),
            },
            "tempo": {
                "critic": critic,
                "critic_rollouts": scale.mc_rollouts,
                "macro_rounds": env.macro_rounds,
                "max_rounds": env.max_rounds,
                "branches": scale.branches,
                # the generative critic answers by its expectation: no K or E sampled answers to count
                **(
                    {}
                    if generative
                    else {"critic_samples": scale.critic_samples, "endpoint_samples": scale.endpoint_samples}
                ),
                "states_per_batch": scale.states_per_batch,
                "fresh_share": 0.5,
                # the oracle and Monte Carlo critics are not trained: a critic warm-up has nothing to teach them
                "warmup_updates": cap if generative else 0,
                "warmup_games_per_batch": games,
                "warmup_trains_actor": not critic_only,
                **({"handover_corr": None} if critic_only else {}),
                **(generative_critic_design(scale) if generative else {}),
                "td_updates": 1_000_000,  # stopped by the env-step budget
                "prefix_correction": spec.get("prefix_correction", "off"),
            },
            "grpo": {"updates": 1_000_000, "games_per_batch": scale.grpo_games, "group_size": scale.branches},
            "sampling": {
                "temperature": env.temperature,
                "max_tokens": scale.max_tokens,
                # the main job's critic: V = the expectation over the binary answers, trained by their
                # log-loss (the sampled answers of the blog never learnt values here; only the generative
                # arm has a critic this setting applies to)
                "critic_answer": "expected",
                "critic_max_prompt_tokens": scale.critic_max_prompt_tokens,
                "max_trajectory_tokens": scale.max_trajectory_tokens,
                "show_remaining_steps": False,  # both envs' observations show the steps left
                "eval_temperature": env.eval_temperature,
            },
            "optim": {
                "learning_rate": scale.learning_rate,
                "grad_clip_norm": 1.0,
            },
            "warmstart": {
                "episodes": scale.warmstart_episodes if env.demo_episodes is None else env.demo_episodes,
                "epochs": scale.warmstart_epochs,
                "noise": 0.1,
                # after a noisy step the env's expert recovers from where it is: with the reset-state
                # walkthrough 227 of keydoor's 256 demos stopped before the first lock (docs/results.md)
                "expert": "recovering",
                "learning_rate": 3e-3,
                "batch_size": 4,
                "env_kwargs": dict(env.demo_kwargs),
            },
            "kl": {"coef": 0.1},
            "store": {"capacity": 256, "max_age_versions": 8},
            "run": {
                "run_dir": str(run_dir),
                "seed": seed,
                "loggers": [],
                "save_trajectories": False,
                "eval_every": 0,  # the benchmark evaluates at its own env-step marks
                "eval_episodes": scale.eval_episodes,
            },
        },
        spec["algorithm"],
    )


def make_options(env: EnvSetting, arm: str) -> Any:
    """The trainer options of one (env, arm) beyond its config (:class:`~tempo_rl.training.options.TrainerOptions`):
    every arm's critic turn starts with ``"<value>"`` and reads the env's ``critic_history_turns``; the
    generative arm's critic steps at the env's ``critic_learning_rate``; the warm start cools down over the env's
    ``warmstart_cooldown``; an oracle arm's estimates are flipped with its ``oracle_flip_prob``."""
    from tempo_rl.training.options import TrainerOptions

    spec = ARMS[arm]
    generative = spec["algorithm"] == "tempo" and spec.get("critic", "generative") == "generative"
    return TrainerOptions(
        critic_history_turns=env.critic_history_turns,
        critic_answer_prefix="<value>",
        critic_learning_rate=env.critic_learning_rate if generative else None,
        warmstart_cooldown=env.warmstart_cooldown,
        oracle_flip_prob=spec.get("oracle_flip_prob", 0.0),
    )


# ------------------------------------------------------------------------------------------------ tasks


def _cache_key(*parts: Any) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


@functools.cache
def code_fingerprint() -> str:
    """A digest of the code a cached result depends on: every ``.py`` file of the installed ``tempo_rl`` package
    and this benchmark's own source, each as its syntax tree without docstrings (:func:`_code_of`), plus the
    package's ``.toml`` files. Part of every cache key, so that a change to the code (an env's reward, a default,
    this file's ``make_config``) is never answered from runs of the old code, while a reworded docstring, a
    comment or a reformat keeps the cache."""
    import hashlib

    import tempo_rl

    digest = hashlib.sha256(_code_of(Path(__file__).read_text()).encode())
    root = Path(tempo_rl.__file__).parent
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".toml") and path.is_file():
            text = path.read_text()
            digest.update(str(path.relative_to(root)).encode())
            digest.update((_code_of(text) if path.suffix == ".py" else text).encode())
    return digest.hexdigest()[:12]


def _code_of(source: str) -> str:
    """``source``'s syntax tree (``ast.dump``) with every module, class and function docstring removed."""
    import ast

    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def config_key(kind: str, cfg: Any, *extra: Any) -> str:
    """The cache key of a run: ``kind``, its whole validated config (less the paths derived from the key
    itself: run and state folders; the tokenizer by its folder name, which is keyed on what built it), the
    code it ran (:func:`code_fingerprint`) and ``extra`` (what the config does not hold: budget, eval marks,
    the warm start's key)."""
    dump = cfg.model_dump(mode="json")
    dump["run"].pop("run_dir", None)
    dump["backend"].pop("state_dir", None)
    dump["backend"]["tokenizer_path"] = Path(str(dump["backend"]["tokenizer_path"])).name
    return _cache_key(kind, dump, code_fingerprint(), *extra)


def _read_cached(path: Path, key: str) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None  # a torn write: redo it
    return data if data.get("key") == key else None


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def build_env_tokenizer(env: EnvSetting, scale: Scale, work: Path) -> Path:
    """The offline tokenizer of ``env`` (trained on its corpus), shared by every seed and arm."""
    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.training.run import env_corpus

    tok_dir = work / f"{env.name}-{_cache_key(env.kwargs, scale.vocab_size, code_fingerprint())}-tokenizer"
    if not tok_dir.is_dir():
        probe = make_config(env, scale, 0, "oracle", work / "probe", tok_dir)
        tmp = tok_dir.with_name(f"{tok_dir.name}.tmp-{os.getpid()}")  # one per process: two may build at once
        build_tokenizer(env_corpus(probe), vocab_size=scale.vocab_size).save_pretrained(str(tmp))
        try:
            os.replace(tmp, tok_dir)
        except OSError:  # another process finished the same (deterministic) tokenizer first: keep its copy
            if not tok_dir.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    return tok_dir


def _close(trainer: Any) -> None:
    from tempo_rl.training.race import close_trainer

    close_trainer(trainer)


def warm_start_task(env: EnvSetting, scale: Scale, seed: int, work: Path, tok_dir: Path) -> dict[str, Any]:
    """Behaviour-clone the model once per (env, seed) and evaluate it (the step-0 point of every arm's curve);
    cached in ``work``. Returns ``{"state": backend state path, "seconds", "metrics"}``."""
    from tempo_rl.training.run import build_trainer
    from tempo_rl.training.warmstart import warm_start

    # built as the generative arm: its critic renders the warm start's critic answer-format examples (an oracle
    # critic has no prompt, and the generative arm's critic would never learn to answer); every arm starts here.
    # The demos come from seeds disjoint from the RL and evaluation games.
    def config(run_dir: Path) -> Any:
        cfg = make_config(env, scale, seed, "generative", run_dir, tok_dir)
        return cfg.model_copy(
            update={"env": cfg.env.model_copy(update={"train_seed_start": 500_000 + 10_000 * seed})}
        )

    # keyed on the whole config and the code (a different budget or arm reuses it; a different config does not)
    options = make_options(env, "generative")
    key = config_key("warmstart", config(work / "probe"), options.as_dict())
    ws_dir = work / f"{env.name}-seed{seed}-warmstart-{key}"
    cfg = config(ws_dir)
    record = ws_dir / "warmstart.json"
    cached = _read_cached(record, key)
    if cached is not None and Path(cached["state"]).exists():
        return cached
    ws_dir.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer = build_trainer(cfg, ws_dir, options=options)
    try:
        metrics = warm_start(trainer)
        state = trainer.c.training_client.save_state("warmstart")
        metrics.update(trainer.run_async(trainer.evaluate(scale.eval_episodes, updates_done=0)))
    finally:
        _close(trainer)
    out = {
        "key": key,
        "state": str(state),
        "seconds": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "metrics": {k: _finite(v) for k, v in metrics.items()},
    }
    _write_json(record, out)
    return out


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(float(x)) else None


def warm_started_trainer(
    cfg: Any, run_dir: Path, warm: Mapping[str, Any], options: Any
) -> tuple[Any, dict[str, float]]:
    """A trainer on the warm start's weights (policy version 1: the warm start was one) and the dict that holds
    its latest update's metrics."""
    from tempo_rl.training.run import build_trainer

    last: dict[str, float] = {}

    def log(_step: int, metrics: Mapping[str, float]) -> None:
        last.clear()
        last.update(metrics)

    trainer = build_trainer(cfg, run_dir, log=log, backend_state=str(warm["state"]), options=options)
    trainer.state.policy_version = 1
    return trainer, last


def arm_task(
    env: EnvSetting,
    scale: Scale,
    seed: int,
    arm: str,
    work: Path,
    tok_dir: Path,
    warm: Mapping[str, Any],
    verbose: bool = False,
) -> dict[str, Any]:
    """Train one arm from the shared warm start until ``cost/env_steps`` reaches the budget, evaluating at
    ``scale.eval_points`` evenly spaced env-step marks; cached in ``work``.

    Returns the run record: ``curve`` = ``[(env steps, tokens processed, eval success)]`` starting with the
    warm start's ``(0, 0, success)``, ``updates`` (per update: env steps, tokens and ``_KEEP`` metrics),
    ``evals`` (each evaluation's env steps and ``eval/*`` metrics, e.g. ``eval/invalid_actions_mean``, the steps
    an episode wasted), the wall-time split and the final ``cost/*``.
    """

    probed = ARMS[arm].get("critic") == "generative" and scale.probe_games > 0
    key = config_key(
        "arm",
        make_config(env, scale, seed, arm, work / "probe", tok_dir),
        {"budget_steps": scale.budget_steps, "eval_points": scale.eval_points},
        make_options(env, arm).as_dict(),
        warm["key"],
        *(
            [{"probe_games": scale.probe_games, "probe_rollouts": probe_rollouts(env, scale)}]
            if probed
            else []
        ),
    )
    run_dir = work / f"{env.name}-seed{seed}-{arm}-{key}"
    record = work / f"{env.name}-seed{seed}-{arm}-{key}.json"
    cached = _read_cached(record, key)
    if cached is not None:
        return cached
    if run_dir.exists():
        shutil.rmtree(run_dir)  # an interrupted attempt: start the arm over
    run_dir.mkdir(parents=True)
    cfg = make_config(env, scale, seed, arm, run_dir, tok_dir)
    t_start, c_start = time.perf_counter(), time.process_time()
    trainer, last = warm_started_trainer(cfg, run_dir, warm, make_options(env, arm))
    budget = scale.budget_steps
    marks = [round(budget * (k + 1) / scale.eval_points) for k in range(scale.eval_points)]
    curve: list[tuple[int, int, float]] = [(0, 0, float(warm["metrics"]["eval/success_rate"]))]
    updates: list[dict[str, float]] = []
    evals: list[dict[str, float]] = []  # each evaluation's ``eval/*`` metrics (wasted steps among them)
    time_s: dict[str, float] = {}
    eval_s = probe_s = 0.0
    probe: dict[str, Any] | None = None
    steps = tokens = 0
    try:
        while steps < budget:
            before = steps
            trainer.train(max_updates=1)
            steps, tokens = int(last["cost/env_steps"]), int(last["cost/tokens"])
            if steps <= before:
                raise RuntimeError(
                    f"{env.name} seed {seed} {arm}: an update played no env step; see {run_dir}"
                )
            rec = {"env_steps": float(steps), "tokens": float(tokens)}
            rec.update({k: v for k in _KEEP if (v := _finite(last.get(k))) is not None})
            updates.append(rec)
            for part in TIME_PARTS:
                time_s[part] = time_s.get(part, 0.0) + float(last.get(f"time/{part}_s", 0.0) or 0.0)
            if verbose:
                shown = " ".join(f"{k}={v:.3g}" for k, v in rec.items())
                print(
                    f"[mechanism]   {env.name} seed {seed} {arm} update {len(updates)}: {shown}",
                    file=sys.stderr,
                )
            if probed and probe is None and trainer.state.update >= trainer.warmup_length():
                t0 = time.perf_counter()  # the warm-up is over: the critic's values on held-out states
                probe = value_probe(trainer, scale.probe_games, probe_rollouts(env, scale), aside=True)
                probe_s = time.perf_counter() - t0
                print(
                    f"[mechanism] {env.name} seed {seed} {arm} warm-up probe: {json.dumps(json_safe(probe))}",
                    file=sys.stderr,
                    flush=True,
                )
            if marks and steps >= marks[0]:
                while marks and steps >= marks[0]:
                    marks.pop(0)
                t0 = time.perf_counter()
                res = trainer.run_async(trainer.evaluate(scale.eval_episodes, updates_done=len(curve)))
                eval_s += time.perf_counter() - t0
                curve.append((steps, tokens, float(res["eval/success_rate"])))
                evals.append(
                    {"env_steps": float(steps), **{k: v for k, v in res.items() if _finite(v) is not None}}
                )
        final_state = trainer.c.training_client.save_state("final")  # for probing the trained policy later
    finally:
        _close(trainer)
    wall = time.perf_counter() - t_start
    time_s["eval"] = eval_s
    time_s["probe"] = probe_s
    time_s["other"] = max(0.0, wall - sum(time_s.values()))
    out = {
        "key": key,
        "env": env.name,
        "seed": seed,
        "arm": arm,
        "curve": curve,
        "updates": updates,
        "evals": evals,
        "time_s": time_s,
        "wall_s": wall,
        "cpu_s": time.process_time() - c_start,
        "steps": steps,
        "tokens": tokens,
        "cost": {k: v for k, v in last.items() if k.startswith(("cost/", "critic/mc_"))},
        "final_state": str(final_state),
        **({"warmup_probe": probe} if probe is not None else {}),
    }
    _write_json(record, out)
    print(
        f"[mechanism] {env.name} seed {seed} {arm}: {steps} env steps, {tokens} tokens, {len(updates)} updates, "
        f"success {curve[0][2]:.2f} -> {curve[-1][2]:.2f}, {wall:.0f}s",
        file=sys.stderr,
        flush=True,
    )
    return out


def pearson(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Pearson's r of two equal-length samples (the trainer's ``critic/value_corr`` function); None where it is
    undefined (fewer than 2 pairs, or either side constant)."""
    from tempo_rl.training.metrics import correlation

    r = correlation(a, b)
    return None if math.isnan(r) else r


def value_probe(
    trainer: Any, games: int, rollouts: int, policy: Any = None, *, aside: bool = False
) -> dict[str, Any]:
    """The critic against the policy's own values on held-out states, and what a perfect critic would score.

    ``games`` evaluation games (``env.eval_game(j)``, the same for every seed) x N branches play full episodes
    with the current policy; every macro-step boundary strictly inside an episode (rounds H, 2H, ...) is a probe
    state s with its single Monte Carlo return ``G(s)`` (the target the warm-up trains on). For each one:

    * ``V_hat(s)``: the generative critic's value, the one TD bootstraps from
      (:func:`~tempo_rl.critic.endpoint_value`): its exact expectation over the answer grid with
      ``sampling.critic_answer = "expected"`` (the generative arm's), else the mean of its K parsed samples.
      (Not the mean of K draws from that grid: their draw noise, which TD never sees, reads every correlation
      low.)
    * ``V_pi(s)``: the policy's value, the mean return of ``rollouts`` = M rollouts from the restored state
      (:class:`~tempo_rl.critic.MonteCarloCritic`, VinePPO's estimator), played by ``policy`` (a sampling
      client; default the trainer's, the one that plays the episodes). The rollouts continue the state's own
      token prefix (the query's ``actor_start``), so ``E[G | s] = V_pi(s)`` (a rollout restarted from a fresh
      prompt at the state's observation would play another policy and bias V_pi).

    Returns the correlations ``corr(V_hat, G)`` (the warm-up's own measure), ``corr(V_hat, V_pi)`` and the
    ceiling ``corr(V_pi, G)``, plus the means, the state count and the rollouts' env steps. Why a ceiling: a
    single return is ``G = V_pi(s) + e`` with ``E[e | s] = 0``, so for any critic that is a function of the
    state ``cov(V_hat, G) = cov(V_hat, V_pi)`` and

        corr(V_hat, G) = corr(V_hat, V_pi) * sd(V_pi) / sd(G) = corr(V_hat, V_pi) * corr(V_pi, G)

    A perfect critic reaches ``corr(V_pi, G) = sd(V_pi) / sd(G)`` against 0/1 returns, and no critic more. The
    probe estimates it with ``V_pi``'s M-rollout mean ``V_pi_M``, whose own sampling noise reads it low, and
    ``corr(V_hat, V_pi)`` with it, by the factor ``sd(V_pi) / sd(V_pi_M)``. The ``*_corrected`` figures undo
    that attenuation (Spearman's correction): ``var(V_pi) = var(V_pi_M) - mean_s var_m(G_m(s)) / M``, the
    rollouts' own variance at each state (ddof 1) over M estimating the noise ``V_pi_M`` adds; ``vpi_noise_share``
    is that noise's share of ``var(V_pi_M)``. They are estimates too (None where the noise is not below the
    spread of the means).

    With ``aside`` the probe is evaluation, like :meth:`~tempo_rl.training.trainer.MacroStepTrainer.evaluate`:
    the trainer's cost ledger (``cost/*``: env steps, tokens) and its RNG are restored afterwards, so that a run
    that goes on training keeps its env-step budget and the samples it would have drawn without the probe. The
    V_pi rollouts never count (their critic is built here, not the run's).
    """
    import asyncio
    import copy

    from tempo_rl.critic import MonteCarloCritic, endpoint_value
    from tempo_rl.signals import monte_carlo_returns
    from tempo_rl.training.critics import state_critic
    from tempo_rl.training.trainer import UpdateTimer

    cfg = trainer.config
    mc_config = cfg.model_copy(
        update={"tempo": cfg.tempo.model_copy(update={"critic": "monte_carlo", "critic_rollouts": rollouts})}
    )
    mc = state_critic(
        mc_config, trainer.c.chat, pool=trainer.c.pool, restore_branches=trainer.c.restore_branches
    )
    assert isinstance(mc, MonteCarloCritic)
    ledger, rng_state = copy.deepcopy(trainer.state.cost), copy.deepcopy(trainer.rng.bit_generator.state)

    async def probe() -> tuple[list[float], list[float], list[np.ndarray]]:
        starts, _ = await trainer.fresh_starts(
            cfg.tempo.branches, [cfg.env.eval_game(j) for j in range(games)]
        )
        results, _ = await trainer.play(starts, segment_rounds=None, timer=UpdateTimer())
        states, returns = [], []
        for start, row in zip(starts, results):
            for branch in row:
                if branch.end_reason == "error":
                    continue
                g = monte_carlo_returns(np.asarray(branch.rewards, dtype=np.float64))
                for r in range(cfg.tempo.macro_rounds, branch.rounds, cfg.tempo.macro_rounds):
                    state = trainer.endpoint_state(start.state, branch, r)
                    if state is not None:
                        states.append(state)
                        returns.append(float(g[r]))
        queries = [trainer.critic_query(s) for s in states]
        estimates = await trainer.estimate_many(queries, cfg.tempo.critic_samples)
        rollouts_of = await asyncio.gather(  # each state's M rollout returns (NaN: a rollout that failed)
            *(mc.returns(q, policy or trainer.c.sampler, seed=i) for i, q in enumerate(queries))
        )
        return (
            [endpoint_value(e) for e in estimates],
            returns,
            [r[np.isfinite(r)] for r in rollouts_of],
        )

    try:
        v_hat, g, rollouts_of = trainer.run_async(probe())
    finally:
        if aside:
            trainer.state.cost = ledger
            trainer.rng.bit_generator.state = rng_state
    return {**probe_figures(v_hat, g, rollouts_of), "rollout_env_steps": int(mc.env_steps)}


def probe_figures(
    v_hat: Sequence[float], g: Sequence[float], rollouts_of: Sequence[np.ndarray]
) -> dict[str, Any]:
    """The value probe's figures (see :func:`value_probe`) from each state's critic value ``v_hat``, single
    return ``g`` and the finite returns of its M rollouts (``V_pi_M`` = their mean; a state with none leaves the
    V_pi figures).

    ``corr_v_vpi_corrected`` and ``ceiling_vpi_return_corrected`` are ``corr_v_vpi`` and ``ceiling_vpi_return``
    times ``sqrt(1 / (1 - vpi_noise_share))``, ``vpi_noise_share = mean_s(var_m G_m(s) / M) / var_s(V_pi_M)``
    (both ``var`` with ddof 1): Spearman's correction for the attenuation by ``V_pi_M``'s noise; None where a
    state has fewer than 2 rollouts or the noise is not below the spread."""
    kept = [i for i, r in enumerate(rollouts_of) if r.size]
    v_pi = [float(rollouts_of[i].mean()) for i in kept]
    ceiling, corr_v_vpi = pearson(v_pi, [g[i] for i in kept]), pearson([v_hat[i] for i in kept], v_pi)
    noise_share = factor = None
    if len(v_pi) > 1 and all(rollouts_of[i].size > 1 for i in kept):
        noise = float(np.mean([rollouts_of[i].var(ddof=1) / rollouts_of[i].size for i in kept]))
        spread = float(np.var(v_pi, ddof=1))
        if spread > 0.0:
            noise_share = noise / spread
            factor = math.sqrt(1.0 / (1.0 - noise_share)) if noise_share < 1.0 else None

    def corrected(r: float | None) -> float | None:
        return None if r is None or factor is None else r * factor

    return {
        "states": len(g),
        "corr_v_return": pearson(v_hat, g),
        "corr_v_vpi": corr_v_vpi,
        "ceiling_vpi_return": ceiling,
        "corr_v_vpi_corrected": corrected(corr_v_vpi),
        "ceiling_vpi_return_corrected": corrected(ceiling),
        "vpi_noise_share": noise_share,
        "mean_v": float(np.mean(v_hat)) if len(v_hat) else None,
        "mean_vpi": float(np.mean(v_pi)) if v_pi else None,
        "mean_return": float(np.mean(g)) if len(g) else None,
    }


def longest_first(tasks: Sequence[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The arm runs of one warm start in the order ``--jobs`` submits them: the generative arms first (their
    warm-up and value probe make them 2.5-7.5x longer than any other arm of their env), the rest in plan order,
    so a long run does not start last and leave the other processes idle at the end."""
    return sorted(tasks, key=lambda t: not t[2].startswith("generative"))


def exit_with_parent(parent_pid: int, poll_s: float = 2.0) -> threading.Thread:
    """A ``--jobs`` worker's initializer: a daemon thread ends the worker (``os._exit(1)``) once its parent
    process ``parent_pid`` is gone (the worker is re-parented), so killing the benchmark does not leave
    workers training on and writing into the old run. Returns the watching thread."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


# ------------------------------------------------------------------------------------------------ summary


def interp_success(curve: Sequence[Sequence[float]], grid: np.ndarray, *, x: int = 0) -> np.ndarray:
    """Eval success interpolated (linearly, held flat past the last point) at ``grid``; ``x`` = 0 for env
    steps, 1 for tokens processed."""
    xs = np.array([c[x] for c in curve], dtype=float)
    ys = np.array([c[2] for c in curve], dtype=float)
    return np.interp(grid, xs, ys)


def success_auc(curve: Sequence[Sequence[float]], budget: int, points: int = 41) -> float:
    """Mean eval success over ``points`` evenly spaced env-step points from 0 to ``budget`` (in [0, 1])."""
    return float(np.mean(interp_success(curve, np.linspace(0, budget, points))))


def tokens_to_reach(curve: Sequence[Sequence[float]], target: float) -> float | None:
    """Tokens processed at the first evaluation whose success is >= ``target`` (None when none is)."""
    for _steps, tokens, success in curve:
        if success >= target - 1e-12:
            return float(tokens)
    return None


def mean_se(xs: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """``(mean, standard error sd/sqrt(n), n)`` over the finite values; SE is None for n < 2."""
    vals = np.array([x for x in xs if x is not None and math.isfinite(x)], dtype=float)
    if vals.size == 0:
        return None, None, 0
    se = float(vals.std(ddof=1) / math.sqrt(vals.size)) if vals.size > 1 else None
    return float(vals.mean()), se, int(vals.size)


def summarize(
    runs: Mapping[str, Mapping[str, Mapping[int, Mapping[str, Any]]]], scale: Scale
) -> dict[str, Any]:
    """Per env: each arm's seed-level figures (mean, SE), the paired oracle - GRPO AUC difference and the
    tokens each arm needs to reach GRPO's final success (per seed, then mean over the seeds that reach it; a seed
    where GRPO ends no higher than it started counts as None: there is no GRPO gain to reach)."""
    out: dict[str, Any] = {}
    budget = scale.budget_steps
    for env_name, per_arm in runs.items():
        env_sum: dict[str, Any] = {"arms": {}}
        grpo = per_arm.get("grpo", {})
        # GRPO's final success per seed, where GRPO ended above its start: a seed where it did not (e.g. 0 -> 0)
        # has nothing to reach (every arm would "reach" it at 0 tokens)
        grpo_final = {
            s: final
            for s, r in grpo.items()
            if (final := float(interp_success(r["curve"], np.array([budget]))[0])) > r["curve"][0][2] + 1e-12
        }
        for arm, per_seed in per_arm.items():
            seeds = sorted(per_seed)
            finals = [float(interp_success(per_seed[s]["curve"], np.array([budget]))[0]) for s in seeds]
            aucs = [success_auc(per_seed[s]["curve"], budget) for s in seeds]
            reach = [
                tokens_to_reach(per_seed[s]["curve"], grpo_final[s]) if s in grpo_final else None
                for s in seeds
            ]
            arm_sum: dict[str, Any] = {
                "seeds": seeds,
                "success_start": mean_se([per_seed[s]["curve"][0][2] for s in seeds])[0],
                "success_final": mean_se(finals)[:2],
                "success_final_per_seed": finals,
                "success_auc": mean_se(aucs)[:2],
                "success_auc_per_seed": aucs,
                "tokens_to_grpo_final_per_seed": reach,
                "tokens_to_grpo_final": mean_se(reach)[0],
                "seeds_reaching_grpo_final": sum(1 for r in reach if r is not None),
                "tokens_at_budget": mean_se([per_seed[s]["tokens"] for s in seeds])[0],
                # tokens processed per env step over the whole run (prefill + sampled + trained)
                "tokens_per_env_step": mean_se(
                    [per_seed[s]["tokens"] / run_steps(per_seed[s]) for s in seeds if run_steps(per_seed[s])]
                )[0],
                # unreadable or inadmissible actions per episode at the last evaluation (None: not recorded)
                "invalid_actions_final_per_seed": [
                    _finite(ev[-1].get("eval/invalid_actions_mean"))
                    if (ev := per_seed[s].get("evals"))
                    else None
                    for s in seeds
                ],
                "updates": mean_se([len(per_seed[s]["updates"]) for s in seeds])[0],
                "wall_s": mean_se([per_seed[s]["wall_s"] for s in seeds])[0],
                "time_split_s": {
                    k: mean_se([per_seed[s]["time_s"].get(k, 0.0) for s in seeds])[0]
                    for k in (*TIME_PARTS, "eval", "other")
                },
                "degenerate_group_rate": mean_se(
                    [_mean_of(per_seed[s]["updates"], "actor/degenerate_group_rate") for s in seeds]
                )[0],
            }
            if grpo and arm != "grpo":
                arm_sum["auc_minus_grpo"] = paired_difference(per_seed, grpo, budget)
            if ARMS[arm].get("critic") == "generative":
                warm = [[u for u in per_seed[s]["updates"] if u.get("train/phase") == 0.0] for s in seeds]
                # where the warm-up handed over to TD: its updates and env steps, and whether the gate did
                arm_sum["handover_per_seed"] = [
                    {
                        "updates": len(w),
                        "env_steps": w[-1].get("env_steps") if w else None,
                        "gate": bool(w and w[-1].get("tempo/handover_at_cap") == 0.0),
                        "reading": _finite(w[-1].get("tempo/handover_reading")) if w else None,
                        "tokens": w[-1].get("tokens") if w else None,
                    }
                    for s, w in zip(seeds, warm)
                ]
                # where the env steps and tokens go: the warm-up's share of the run's, and each phase's tokens
                # per env step (the critic's Monte Carlo examples are trained in the warm-up, not played)
                phases = [
                    warmup_split(h, run_steps(per_seed[s]), per_seed[s]["tokens"])
                    for s, h in zip(seeds, arm_sum["handover_per_seed"])
                ]
                arm_sum["warmup_split_per_seed"] = phases
                # the last warm-up update's own correlation: None where it is undefined (every target of its
                # batch equal, e.g. every episode lost), not an earlier update's
                arm_sum["warmup_value_corr_last_per_seed"] = [
                    _finite(w[-1].get("critic/value_corr")) if w else None for w in warm
                ]
                arm_sum["warmup_abs_error_first_last"] = [
                    mean_se([_first(w, "critic/abs_error_mean") for w in warm])[0],
                    mean_se([_last(w, "critic/abs_error_mean") for w in warm])[0],
                ]
                # the value probe on held-out states at the end of the warm-up (None: the run had none)
                arm_sum["warmup_probe_per_seed"] = [
                    {k: p[k] for k in _PROBE_KEYS if k in p}
                    if (p := per_seed[s].get("warmup_probe"))
                    else None
                    for s in seeds
                ]
                arm_sum["parse_failure_rate_max"] = max(
                    (u.get("critic/parse_failure_rate", 0.0) for s in seeds for u in per_seed[s]["updates"]),
                    default=None,
                )
            env_sum["arms"][arm] = arm_sum
        if "oracle" in per_arm and grpo:
            common = sorted(set(per_arm["oracle"]) & set(grpo))
            diffs = [
                success_auc(per_arm["oracle"][s]["curve"], budget) - success_auc(grpo[s]["curve"], budget)
                for s in common
            ]
            m, se, n = mean_se(diffs)
            env_sum["auc_oracle_minus_grpo"] = {
                "per_seed": diffs,
                "mean": m,
                "se": se,
                "seeds_positive": sum(1 for d in diffs if d > 0),
                "n": n,
                "above_2se": bool(m is not None and se is not None and m > 2 * se),
            }
        out[env_name] = env_sum
    return out


#: The value probe's figures kept in the summary (see :func:`value_probe`).
_PROBE_KEYS = (
    "states",
    "corr_v_return",
    "corr_v_vpi",
    "ceiling_vpi_return",
    "corr_v_vpi_corrected",
    "ceiling_vpi_return_corrected",
    "mean_v",
    "mean_vpi",
)


#: The value probe's figures in the JSON line, per seed.
_PROBE_LINE_KEYS = (
    "corr_v_return",
    "corr_v_vpi",
    "ceiling_vpi_return",
    "corr_v_vpi_corrected",
    "ceiling_vpi_return_corrected",
)


def paired_difference(
    arm: Mapping[int, Mapping[str, Any]], grpo: Mapping[int, Mapping[str, Any]], budget: int
) -> dict[str, Any]:
    """The arm's success AUC less GRPO's on each seed both ran (a paired difference: the same warm start), its
    mean and SE, on how many seeds it is positive, the most negative one, and whether the mean exceeds 2 SE."""
    common = sorted(set(arm) & set(grpo))
    diffs = [success_auc(arm[s]["curve"], budget) - success_auc(grpo[s]["curve"], budget) for s in common]
    m, se, n = mean_se(diffs)
    return {
        "per_seed": diffs,
        "mean": m,
        "se": se,
        "seeds_positive": sum(1 for d in diffs if d > 0),
        "min": min(diffs) if diffs else None,
        "n": n,
        "above_2se": bool(m is not None and se is not None and m > 2 * se),
    }


def _mean_of(updates: Sequence[Mapping[str, float]], key: str) -> float | None:
    vals = [u[key] for u in updates if key in u]
    return float(np.mean(vals)) if vals else None


def _first(updates: Sequence[Mapping[str, float]], key: str) -> float | None:
    return next((u[key] for u in updates if key in u), None)


def _last(updates: Sequence[Mapping[str, float]], key: str) -> float | None:
    return next((u[key] for u in reversed(updates) if key in u), None)


def _round(x: Any, digits: int = 4) -> Any:
    if isinstance(x, list | tuple):
        return [_round(v, digits) for v in x]
    return None if x is None or not math.isfinite(float(x)) else round(float(x), digits)


def json_safe(x: Any) -> Any:
    """``x`` with every non-finite float replaced by None (strict JSON: ``null``, never ``NaN``)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    return x


def estimate(
    plan: Sequence[tuple[str, int, str]],
    runs: Mapping[str, Any],
    warm: Mapping[str, Mapping[str, Any]],
    jobs: int,
) -> dict[str, Any]:
    """The whole plan's time at ``jobs`` processes, extrapolated from the measured arm-seeds and warm starts.

    Each planned (env, seed, arm) takes the mean over the measured seeds of its (env, arm) (an (env, arm) not
    measured yet: the mean of its env's measured arms), each planned (env, seed) warm start the mean of its
    env's measured ones. Two figures: from CPU seconds (``time.process_time``; each process trains with one
    torch thread, so this is its time on a core of its own: the wall time on an otherwise idle machine with
    ``jobs`` cores) and from wall seconds (as measured, under whatever else ran). Per env (``per_env``) and in
    total over the envs with a measurement; ``unmeasured_envs`` lists the others (not in the total).
    """
    envs = sorted({e for e, _, _ in plan})
    out: dict[str, Any] = {"jobs": jobs, "tasks": len(plan), "measured_tasks": 0, "per_env": {}}
    out["measured_tasks"] = sum(len(ps) for pa in runs.values() for ps in pa.values())
    out["unmeasured_envs"] = [e for e in envs if not runs.get(e)]
    for unit, ws_unit in (("cpu_s", "cpu_s"), ("wall_s", "seconds")):
        total = 0.0
        for env_name in envs:
            per_arm = runs.get(env_name) or {}
            if not per_arm:
                continue
            means = {
                a: float(np.mean([r.get(unit, r["wall_s"]) for r in ps.values()]))
                for a, ps in per_arm.items()
            }
            fallback = float(np.mean(list(means.values())))
            seconds = sum(means.get(a, fallback) for e, _s, a in plan if e == env_name)
            ws = [float(w.get(ws_unit, w["seconds"])) for k, w in warm.items() if k.split("/")[0] == env_name]
            seconds += len({s for e, s, _ in plan if e == env_name}) * (float(np.mean(ws)) if ws else 0.0)
            out["per_env"].setdefault(env_name, {})[f"task_{unit}"] = _round(seconds, 1)
            total += seconds
        out[f"task_{unit}"] = _round(total, 1)
        out[f"wall_s_at_jobs_from_{unit.split('_')[0]}"] = _round(total / max(1, jobs), 1)
    return out


def run_steps(run: Mapping[str, Any]) -> float:
    """The env steps an arm run used: its record's ``steps``, else its curve's last env-step mark."""
    return float(run.get("steps") or (run["curve"][-1][0] if run.get("curve") else 0.0))


def warmup_split(handover: Mapping[str, Any], steps: float, tokens: float) -> dict[str, float | None]:
    """The warm-up's share of a run's env steps and tokens, and the tokens per env step of the warm-up and of
    TD: ``{"env_step_share", "token_share", "warmup_tokens_per_step", "td_tokens_per_step"}`` (None where the
    hand-over's figures were not recorded or a phase played no env step)."""
    w_steps, w_tokens = handover.get("env_steps"), handover.get("tokens")
    if w_steps is None or w_tokens is None or not steps:
        return {
            k: None for k in ("env_step_share", "token_share", "warmup_tokens_per_step", "td_tokens_per_step")
        }
    return {
        "env_step_share": w_steps / steps,
        "token_share": w_tokens / tokens if tokens else None,
        "warmup_tokens_per_step": w_tokens / w_steps if w_steps else None,
        "td_tokens_per_step": (tokens - w_tokens) / (steps - w_steps) if steps > w_steps else None,
    }


def headline(
    summary: Mapping[str, Any], scale: Scale, wall_s: float, est: Mapping[str, Any]
) -> dict[str, Any]:
    """The one JSON line."""
    line: dict[str, Any] = {
        "benchmark": "mechanism",
        "seeds": len(scale.seeds),
        "budget_env_steps": scale.budget_steps,
        "wall_s": round(wall_s, 1),
        "estimate_full_plan": est,
    }
    for env_name, env_sum in summary.items():
        for arm, s in env_sum["arms"].items():
            line[f"{env_name}/{arm}/success_final"] = _round(s["success_final"])  # [mean, se]
            line[f"{env_name}/{arm}/success_auc"] = _round(s["success_auc"])
            line[f"{env_name}/{arm}/tokens_to_grpo_final"] = _round(s["tokens_to_grpo_final"], 0)
            line[f"{env_name}/{arm}/seeds_reaching_grpo_final"] = s["seeds_reaching_grpo_final"]
            line[f"{env_name}/{arm}/tokens_at_budget"] = _round(s["tokens_at_budget"], 0)
            line[f"{env_name}/{arm}/wall_s"] = _round(s["wall_s"], 1)
            if (d := s.get("auc_minus_grpo")) and d["n"]:
                line[f"{env_name}/{arm}/auc_minus_grpo"] = {
                    "mean": _round(d["mean"]),
                    "se": _round(d["se"]),
                    "positive": f"{d['seeds_positive']}/{d['n']}",
                    "min": _round(d["min"]),
                }
            line[f"{env_name}/{arm}/tokens_per_env_step"] = _round(s.get("tokens_per_env_step"), 0)
            if "handover_per_seed" in s:
                line[f"{env_name}/{arm}/handover_env_steps"] = [
                    h["env_steps"] for h in s["handover_per_seed"]
                ]
            if "warmup_split_per_seed" in s:
                for k in ("env_step_share", "token_share", "warmup_tokens_per_step", "td_tokens_per_step"):
                    line[f"{env_name}/{arm}/warmup_split/{k}"] = [
                        _round(x[k], 0 if k.endswith("per_step") else 3) for x in s["warmup_split_per_seed"]
                    ]
            if "warmup_value_corr_last_per_seed" in s:
                line[f"{env_name}/{arm}/warmup_value_corr_last"] = _round(
                    s["warmup_value_corr_last_per_seed"]
                )
            probes = s.get("warmup_probe_per_seed") or []
            for k in _PROBE_LINE_KEYS:  # a figure no record has (made before it existed) is left out
                if any(p and k in p for p in probes):
                    line[f"{env_name}/{arm}/warmup_probe_{k}"] = [
                        _round(p.get(k)) if p else None for p in probes
                    ]
        d = env_sum.get("auc_oracle_minus_grpo")
        if d:
            line[f"{env_name}/auc_oracle_minus_grpo"] = {
                "mean": _round(d["mean"]),
                "se": _round(d["se"]),
                "seeds_positive": d["seeds_positive"],
                "n": d["n"],
                "above_2se": d["above_2se"],
            }
    return line


# ------------------------------------------------------------------------------------------------ plot

_COLOURS = {
    "grpo": "tab:gray",
    "oracle": "tab:blue",
    "oracle_pc": "tab:cyan",
    "oracle_flip10": "tab:purple",
    "oracle_flip30": "tab:pink",
    "mc": "tab:green",
    "generative": "tab:orange",
    "generative_no_note": "tab:red",
}


def plot(runs: Mapping[str, Any], summary: Mapping[str, Any], scale: Scale, path: Path) -> None:
    """Per env: success vs env steps and vs tokens processed (seed mean +- SE), and success AUC per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(runs)
    fig, axes = plt.subplots(len(envs), 3, figsize=(18, 4.5 * len(envs)), squeeze=False)
    steps_grid = np.linspace(0, scale.budget_steps, 41)
    for row, env_name in enumerate(envs):
        ax_s, ax_t, ax_a = axes[row]
        for arm, per_seed in runs[env_name].items():
            curves = [r["curve"] for r in per_seed.values()]
            c = _COLOURS.get(arm, "black")
            ys = np.array([interp_success(cv, steps_grid) for cv in curves])
            _band(ax_s, steps_grid, ys, c, arm)
            top = min(cv[-1][1] for cv in curves)
            if top > 0:
                tok_grid = np.linspace(0, top, 41)
                yt = np.array([interp_success(cv, tok_grid, x=1) for cv in curves])
                _band(ax_t, tok_grid, yt, c, arm)
        ax_s.set_title(f"{env_name}: eval success vs env steps (mean +- SE over seeds)")
        ax_s.set_xlabel("training env steps (cost/env_steps)")
        ax_t.set_title(f"{env_name}: eval success vs tokens processed")
        ax_t.set_xlabel("tokens processed (cost/tokens = prefill + sampled + trained)")
        for ax in (ax_s, ax_t):
            ax.set_ylabel("success")
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize=8)
        arms = list(summary[env_name]["arms"])
        means = [summary[env_name]["arms"][a]["success_auc"][0] or 0.0 for a in arms]
        ses = [summary[env_name]["arms"][a]["success_auc"][1] or 0.0 for a in arms]
        ax_a.bar(arms, means, yerr=ses, color=[_COLOURS.get(a, "black") for a in arms], capsize=4)
        ax_a.set_title(f"{env_name}: success AUC over the env-step budget (mean +- SE)")
        ax_a.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _band(ax: Any, x: np.ndarray, ys: np.ndarray, colour: str, label: str) -> None:
    m = ys.mean(axis=0)
    ax.plot(x, m, color=colour, label=label)
    if len(ys) > 1:
        se = ys.std(axis=0, ddof=1) / math.sqrt(len(ys))
        ax.fill_between(x, m - se, m + se, color=colour, alpha=0.15)


# ------------------------------------------------------------------------------------------------ main


def _scale_from(data: Mapping[str, Any]) -> Scale:
    # a recorded ``warmup_state_stride`` (1: every round's state, tempo.warmup_states_per_episode = "every_round")
    # is not a Scale field
    known = {f.name for f in fields(Scale)}
    return Scale(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k in known})


#: How the results table names each arm.
ARM_LABELS = {
    "grpo": "GRPO",
    "gigpo": "GiGPO",
    "oracle": "TEMPO + oracle critic",
    "oracle_pc": "TEMPO + oracle, prefix correction",
    "oracle_flip10": "TEMPO + oracle, 10 % flipped",
    "oracle_flip30": "TEMPO + oracle, 30 % flipped",
    "mc": "TEMPO + Monte Carlo critic",
    "generative": "TEMPO + generative critic",
    "generative_critic_only": "TEMPO + generative, critic-only warm-up",
    "generative_no_note": "TEMPO + generative, no critic note",
}


def results_table(env_summary: Mapping[str, Any]) -> str:
    """One env's results as a markdown table (the README and ``docs/results.md`` print it as it is): per arm,
    success AUC and final success (mean +- SE over seeds), the paired AUC difference against GRPO (mean +- SE,
    seeds ahead, the lowest seed) and the tokens processed to reach GRPO's final success (millions, mean over
    the seeds that reach it, and how many)."""

    def pm(pair: Sequence[float | None], sign: str = "") -> str:
        m, se = pair[0], pair[1] if len(pair) > 1 else None
        if m is None:
            return "-"
        text = f"{m:{sign}.3f}".replace("-0.000", "0.000").replace("+-0.000", "0.000")
        return text + ("" if se is None else f" +- {se:.3f}")

    rows = [
        "| arm | success AUC | final success | AUC - GRPO (paired) | seeds ahead | lowest | tokens to GRPO's final |",
        "|---|---|---|---|---|---|---|",
    ]
    arms = env_summary["arms"]
    for arm in [a for a in ARM_LABELS if a in arms]:
        s = arms[arm]
        d = s.get("auc_minus_grpo")
        diff = (
            (pm([d["mean"], d["se"]], "+"), f"{d['seeds_positive']} / {d['n']}", pm([d["min"]], "+"))
            if d
            else ("", "", "")
        )
        reach = s.get("tokens_to_grpo_final")
        tokens = (
            "-"
            if reach is None
            else f"{reach / 1e6:.1f}M ({s['seeds_reaching_grpo_final']} of {len(s['seeds'])})"
        )
        rows.append(
            f"| {ARM_LABELS[arm]} | {pm(s['success_auc'])} | {pm(s['success_final'])} | {diff[0]} | {diff[1]} "
            f"| {diff[2]} | {tokens} |"
        )
    return "\n".join(rows)


def finish(
    results: dict[str, Any], scale: Scale, out_dir: Path, wall_s: float, est: Mapping[str, Any]
) -> dict[str, Any]:
    """Summary, JSON line, results.json and the PNG."""
    runs = {
        e: {a: {int(s): r for s, r in ps.items()} for a, ps in pa.items()}
        for e, pa in results["runs"].items()
    }
    summary = summarize(runs, scale)
    line = headline(summary, scale, wall_s, est)
    results.update(summary=summary, headline=line, wall_s=wall_s)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(json_safe(results), indent=1, allow_nan=False))
    plot(runs, summary, scale, out_dir / "mechanism.png")
    return line


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI smoke run: one seed, short keydoor, tiny budget")
    ap.add_argument(
        "--out",
        default=None,
        help="results folder (JSON + PNG); default benchmarks/results/mechanism, or with --from-results the "
        "folder of that results.json",
    )
    ap.add_argument(
        "--work", default="runs/mechanism-work", help="cache of warm starts and arm runs (git-ignored runs/)"
    )
    ap.add_argument("--seeds", type=int, nargs="*", default=None, help="override the seeds")
    ap.add_argument("--envs", nargs="*", default=None, choices=sorted(ENVS), help="override the envs")
    ap.add_argument("--arms", nargs="*", default=None, choices=list(ARMS), help="only these arms")
    ap.add_argument("--budget-steps", type=int, default=None, help="override the env-step budget per arm")
    ap.add_argument("--jobs", type=int, default=1, help="processes (warm starts, then arm runs)")
    ap.add_argument("--verbose", action="store_true", help="print every update's figures to stderr")
    ap.add_argument(
        "--from-results", default=None, help="recompute summary, JSON line and PNG from a results.json"
    )
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.from_results:
        results = json.loads(Path(args.from_results).read_text())
        scale = _scale_from(results["scale"])
        line = finish(
            results,
            scale,
            Path(args.out) if args.out else Path(args.from_results).parent,
            math.nan if results.get("wall_s") is None else float(results["wall_s"]),  # null: assembled
            results["headline"]["estimate_full_plan"],
        )
        print(json.dumps(json_safe(line), allow_nan=False))
        return 0

    scale = QUICK if args.quick else FULL
    table = QUICK_ENVS if args.quick else ENVS
    updates: dict[str, Any] = {}
    if args.seeds:
        updates["seeds"] = tuple(args.seeds)
    if args.envs:
        updates["envs"] = tuple(args.envs)
    if args.budget_steps:
        updates["budget_steps"] = args.budget_steps
    scale = replace(scale, **updates)
    out_dir = Path(args.out or "benchmarks/results/mechanism")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    plan = [
        (e, s, a)
        for e in scale.envs
        for s in scale.seeds
        for a in table[e].arms
        if args.arms is None or a in args.arms
    ]

    t0 = time.perf_counter()
    tok = {e: build_env_tokenizer(table[e], scale, work) for e in scale.envs}
    ws_tasks = sorted({(e, s) for e, s, _ in plan})
    ws_args = [(table[e], scale, s, work, tok[e]) for e, s in ws_tasks]
    pool: Any = None
    if args.jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(
            args.jobs,
            mp_context=mp.get_context("spawn"),
            initializer=exit_with_parent,
            initargs=(os.getpid(),),
        )
    warm: dict[tuple[str, int], dict[str, Any]] = {}
    done: dict[tuple[str, int, str], dict[str, Any]] = {}

    def arm_args(e: str, s: int, a: str) -> tuple[Any, ...]:
        return (table[e], scale, s, a, work, tok[e], warm[(e, s)], args.verbose)

    try:
        if pool is None:
            for (e, s), a in zip(ws_tasks, ws_args):
                warm[(e, s)] = warm_start_task(*a)
            for e, s, a in plan:
                done[(e, s, a)] = arm_task(*arm_args(e, s, a))
        else:
            from concurrent.futures import FIRST_COMPLETED, wait

            pending = {pool.submit(warm_start_task, *a): ("warm", *k) for k, a in zip(ws_tasks, ws_args)}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    kind, *key = pending.pop(fut)
                    if kind == "arm":
                        done[(key[0], key[1], key[2])] = fut.result()
                        continue
                    warm[(key[0], key[1])] = fut.result()
                    for e, s, a in longest_first([t for t in plan if t[:2] == (key[0], key[1])]):
                        pending[pool.submit(arm_task, *arm_args(e, s, a))] = ("arm", e, s, a)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    runs: dict[str, Any] = {}
    for e, s, a in plan:
        runs.setdefault(e, {}).setdefault(a, {})[str(s)] = done[(e, s, a)]
    results: dict[str, Any] = {
        "scale": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(scale).items()},
        "envs": {
            e: {"kwargs": dict(table[e].kwargs), "T": table[e].max_rounds, "H": table[e].macro_rounds}
            for e in scale.envs
        },
        "arms": {a: ARMS[a] for a in {a for _, _, a in plan}},
        "runs": runs,
        "warmstart": {f"{e}/{s}": warm[(e, s)] for e, s in ws_tasks},
        "command": " ".join(
            ["python", "benchmarks/mechanism.py", *(argv if argv is not None else sys.argv[1:])]
        ),
    }
    full_plan = [(e, s, a) for e in FULL.envs for s in FULL.seeds for a in ENVS[e].arms]
    est = estimate(
        full_plan if not args.quick else plan,
        runs,
        {f"{e}/{s}": warm[(e, s)] for e, s in ws_tasks},
        2 if not args.quick else args.jobs,
    )
    line = finish(results, scale, out_dir, time.perf_counter() - t0, est)
    print(json.dumps(json_safe(line), allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
