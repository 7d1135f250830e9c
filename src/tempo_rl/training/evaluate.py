"""Evaluation: full episodes of a policy on evaluation games, summarised by split and task type.

Every episode becomes an :class:`EpisodeRecord` (game, split, task type, won, reward, steps, end reason,
invalid actions, actions and observations). :func:`summarize_episodes` aggregates them overall, by split,
by task type and by (split, task type). :func:`write_eval_outputs` writes ``eval_trajectories.jsonl`` (one
line per episode, then one ``{"type": "summary", ...}`` line) and ``eval_summary.json``.

Definitions (per group of episodes; rates are fractions in [0, 1]; NaN when the denominator is 0):

* ``success_rate`` = won episodes / episodes; ``reward_mean`` = mean episode return; ``steps_mean`` = mean
  env steps; ``truncated_rate`` = episodes cut by the step limit or the token budget / episodes;
* ``invalid_actions_mean`` = mean per episode of (unreadable tool calls + readable actions that were not in
  the admissible list shown at that step, when the env lists one);
* ``valid_tool_call_rate`` = readable tool calls / steps; ``admissible_action_rate`` = admissible actions /
  steps whose admissible list was known; ``error_rate`` = episodes ended by an env error / episodes.

The episodes are played by the trainer's own episode runner (:func:`tempo_rl.rollout.run_branches`
with no macro boundary), so evaluation sees exactly the prompts and parsing of training.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tempo_rl.envs.snapshot import EnvSpec
from tempo_rl.rollout.tool_call import INVALID_ACTION
from tempo_rl.training.checkpoint import atomic_write_text
from tempo_rl.training.config import EVAL_SEED_START
from tempo_rl.training.metrics import json_safe

__all__ = [
    "EVAL_SUMMARY_FILE",
    "EVAL_TRAJECTORIES_FILE",
    "EpisodeRecord",
    "EvalGame",
    "alfworld_games",
    "episode_record",
    "evaluate_run",
    "play_episodes",
    "seed_games",
    "summarize_episodes",
    "summary_metrics",
    "write_eval_outputs",
]

EVAL_TRAJECTORIES_FILE = "eval_trajectories.jsonl"
EVAL_SUMMARY_FILE = "eval_summary.json"


@dataclass(frozen=True)
class EvalGame:
    """One evaluation game: how to build it, its reset seed, and how to group it.

    Attributes:
        spec: the env spec to build.
        seed: the reset seed.
        split: the group it counts in (``"valid_seen"``, ``"eval"``...).
        task_type: its task type; None = read ``observation.info["task_type"]`` at reset, else ``"all"``.
        game_id: a stable id (default ``"<env name>:<seed>"``).
    """

    spec: EnvSpec
    seed: int | None = None
    split: str = "eval"
    task_type: str | None = None
    game_id: str | None = None

    @property
    def id(self) -> str:
        """``game_id`` or ``"<env name>:<seed>"``."""
        return self.game_id or f"{self.spec.name}:{self.seed}"


def seed_games(spec: EnvSpec, seeds: Iterable[int], split: str = "eval") -> list[EvalGame]:
    """Evaluation games of a seeded env: one per reset seed."""
    return [EvalGame(spec=spec, seed=int(s), split=split) for s in seeds]


def alfworld_games(
    root: str | os.PathLike[str] | None,
    splits: Sequence[str] = ("valid_seen", "valid_unseen"),
    *,
    per_split: int | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> list[EvalGame]:
    """ALFWorld evaluation games (the ``alfworld`` extra): every kept game of ``splits`` under ``root``.

    Args:
        root: the ALFWorld data root (see :func:`tempo_rl.envs.alfworld.discover_games`).
        splits: the splits to evaluate on.
        per_split: keep only the first N games of each split (sorted by id).
        env_kwargs: extra ``AlfworldEnv`` arguments (e.g. ``{"max_steps": 50}``).
    """
    from tempo_rl.envs.alfworld import discover_games

    games = discover_games(root, list(splits)).games
    taken: dict[str, int] = {}
    out = []
    for g in games:
        if per_split is not None and taken.get(g.split, 0) >= per_split:
            continue
        taken[g.split] = taken.get(g.split, 0) + 1
        spec = EnvSpec(name="alfworld", kwargs={"game_file": str(g.game_file), **dict(env_kwargs or {})})
        out.append(EvalGame(spec=spec, seed=None, split=g.split, task_type=g.task_type, game_id=g.id))
    return out


@dataclass(frozen=True)
class EpisodeRecord:
    """One evaluated episode (JSON-serialisable with :meth:`to_json`)."""

    game_id: str
    split: str
    task_type: str
    seed: int | None
    task: str
    won: bool
    reward: float
    steps: int
    end_reason: str
    truncated: bool
    valid_tool_calls: int
    invalid_tool_calls: int
    inadmissible_actions: int
    admissible_known_steps: int
    error: str | None = None
    actions: tuple[str, ...] = ()
    observations: tuple[str, ...] = ()
    rewards: tuple[float, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def invalid_actions(self) -> int:
        """Unreadable tool calls + readable but non-admissible actions."""
        return self.invalid_tool_calls + self.inadmissible_actions

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``type = "episode"``)."""
        record = asdict(self)
        record["invalid_actions"] = self.invalid_actions
        return {"type": "episode", **record}


def episode_record(
    game: EvalGame,
    branch: Any,
    *,
    opening_admissible: Sequence[str] | None,
    task: str = "",
    task_type: str | None = None,
    invalid_action: str = INVALID_ACTION,
) -> EpisodeRecord:
    """A record of a played full-episode branch (:class:`~tempo_rl.rollout.BranchResult`).

    Args:
        game: the game it was played on.
        branch: the branch (``actions``, ``observations``, ``rewards``, ``won``, ``end_reason``, ``rounds``,
            ``valid_tool_calls``, ``error``).
        opening_admissible: the admissible actions of the reset observation (None when the env lists none).
        task: the task sentence.
        task_type: overrides ``game.task_type``.
        invalid_action: the marker the tool-call parser puts for an unreadable call.
    """
    admissible_lists: list[Sequence[str] | None] = [opening_admissible]
    admissible_lists += [obs.admissible_actions for obs in branch.observations]
    invalid_calls = 0
    inadmissible = 0
    known = 0
    for i, action in enumerate(branch.actions):
        if action == invalid_action:
            invalid_calls += 1
            continue
        allowed = admissible_lists[i] if i < len(admissible_lists) else None
        if allowed is not None:
            known += 1
            if action not in allowed:
                inadmissible += 1
    end = str(branch.end_reason or "unknown")
    return EpisodeRecord(
        game_id=game.id,
        split=game.split,
        task_type=task_type or game.task_type or "all",
        seed=game.seed,
        task=task,
        won=bool(branch.won),
        reward=float(sum(branch.rewards)),
        steps=int(branch.rounds),
        end_reason=end,
        truncated=end in ("max_rounds", "token_budget"),
        valid_tool_calls=int(branch.valid_tool_calls),
        invalid_tool_calls=invalid_calls,
        inadmissible_actions=inadmissible,
        admissible_known_steps=known,
        error=branch.error,
        actions=tuple(branch.actions),
        observations=tuple(obs.text for obs in branch.observations),
        rewards=tuple(float(r) for r in branch.rewards),
    )


def _rate(num: float, den: float) -> float:
    return float(num / den) if den else math.nan


def _group_stats(records: Sequence[EpisodeRecord]) -> dict[str, float]:
    n = len(records)
    steps = sum(r.steps for r in records)
    known = sum(r.admissible_known_steps for r in records)

    def mean(values: list[float]) -> float:
        return float(np.mean(values)) if values else math.nan

    return {
        "episodes": float(n),
        "success_rate": _rate(sum(r.won for r in records), n),
        "reward_mean": mean([r.reward for r in records]),
        "steps_mean": mean([float(r.steps) for r in records]),
        "truncated_rate": _rate(sum(r.truncated for r in records), n),
        "invalid_actions_mean": mean([float(r.invalid_actions) for r in records]),
        "valid_tool_call_rate": _rate(sum(r.valid_tool_calls for r in records), steps),
        "admissible_action_rate": _rate(known - sum(r.inadmissible_actions for r in records), known),
        "error_rate": _rate(sum(r.end_reason == "error" for r in records), n),
    }


def summarize_episodes(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """``{"overall", "by_split", "by_task_type", "by_split_and_task_type"}`` of group statistics."""
    by_split: dict[str, list[EpisodeRecord]] = {}
    by_type: dict[str, list[EpisodeRecord]] = {}
    by_both: dict[str, dict[str, list[EpisodeRecord]]] = {}
    for r in records:
        by_split.setdefault(r.split, []).append(r)
        by_type.setdefault(r.task_type, []).append(r)
        by_both.setdefault(r.split, {}).setdefault(r.task_type, []).append(r)
    return {
        "overall": _group_stats(records),
        "by_split": {k: _group_stats(v) for k, v in sorted(by_split.items())},
        "by_task_type": {k: _group_stats(v) for k, v in sorted(by_type.items())},
        "by_split_and_task_type": {
            s: {t: _group_stats(v) for t, v in sorted(types.items())} for s, types in sorted(by_both.items())
        },
    }


def summary_metrics(summary: Mapping[str, Any], prefix: str = "eval") -> dict[str, float]:
    """Flat slash-namespaced metrics: ``eval/success_rate``, ``eval/<split>/success_rate``,
    ``eval/task/<type>/success_rate``."""
    out = {f"{prefix}/{k}": v for k, v in summary["overall"].items()}
    for split, stats in summary["by_split"].items():
        out.update({f"{prefix}/{split}/{k}": v for k, v in stats.items()})
    for task_type, stats in summary["by_task_type"].items():
        out[f"{prefix}/task/{task_type}/success_rate"] = stats["success_rate"]
    return out


def write_eval_outputs(
    out_dir: Path | str, records: Sequence[EpisodeRecord], summary: Mapping[str, Any], **meta: Any
) -> tuple[Path, Path]:
    """Write ``eval_trajectories.jsonl`` (episodes + a final summary line) and ``eval_summary.json``.

    ``meta`` (e.g. checkpoint, temperature) is added to the summary record. NaN is written as ``null``.
    Returns the two paths.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary_record = json_safe({"type": "summary", **meta, **summary})
    lines = [json.dumps(json_safe(r.to_json()), ensure_ascii=False) for r in records]
    lines.append(json.dumps(summary_record, ensure_ascii=False))
    traj = out / EVAL_TRAJECTORIES_FILE
    summ = out / EVAL_SUMMARY_FILE
    atomic_write_text(traj, "\n".join(lines) + "\n")
    atomic_write_text(summ, json.dumps(summary_record, indent=2, ensure_ascii=False) + "\n")
    return traj, summ


async def play_episodes(
    games: Sequence[EvalGame],
    *,
    sampler: Any,
    chat: Any,
    settings: Any,
    pool: Any,
    parser: Any,
    make_env: Any = None,
    batch_size: int = 8,
    policy_version: int = 0,
) -> list[EpisodeRecord]:
    """Play one full episode per game with the trainer's episode runner; ``batch_size`` games at a time.

    Args:
        games: the evaluation games.
        sampler, chat, settings, pool, parser: as for :func:`tempo_rl.rollout.run_branches`
            (``settings.segment_rounds`` should be None: full episodes).
        make_env: ``(spec, seed) -> live env at reset`` (default: :func:`tempo_rl.envs.make` + ``reset``).
        batch_size: games played concurrently.
        policy_version: recorded in the start states.
    """
    from tempo_rl.envs.core import task_of
    from tempo_rl.rollout.branches import run_branches
    from tempo_rl.training.types import StoredState

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")

    def default_make(spec: EnvSpec, seed: int | None) -> Any:
        from tempo_rl.envs import make

        env = make(spec)
        env.reset(seed)
        return env

    build = make_env or default_make
    records: list[EpisodeRecord] = []
    for lo in range(0, len(games), batch_size):
        batch = games[lo : lo + batch_size]
        envs = await asyncio.gather(*(asyncio.to_thread(build, g.spec, g.seed) for g in batch))
        try:
            starts = []
            openings = []
            for g, env in zip(batch, envs):
                obs = env.last_observation
                snapshot = env.snapshot()
                openings.append(obs)
                starts.append(
                    StoredState.at_reset(
                        snapshot, game_id=g.id, task=task_of(obs), policy_version=policy_version
                    )
                )
            results, _ = await run_branches(
                starts,
                [[env] for env in envs],
                sampler=sampler,
                chat=chat,
                settings=settings,
                pool=pool,
                parser=parser,
            )
        finally:
            for env in envs:
                env.close()
        for g, start, obs, row in zip(batch, starts, openings, results):
            info_type = obs.info.get("task_type") if obs.info else None
            records.append(
                episode_record(
                    g,
                    row[0],
                    opening_admissible=obs.admissible_actions,
                    task=start.task,
                    task_type=g.task_type or (str(info_type) if info_type else None),
                    invalid_action=INVALID_ACTION,
                )
            )
    return records


def evaluate_run(
    run_dir: Path | str,
    *,
    games: Sequence[EvalGame] | None = None,
    episodes: int | None = None,
    temperature: float | None = None,
    out_dir: Path | str | None = None,
    batch_size: int = 8,
) -> dict[str, Any]:
    """Evaluate the newest verified checkpoint of a run and write the outputs.

    The run directory is only read (its state store is not opened: an evaluation restores no stored state), so
    a read-only run can be evaluated with ``out_dir`` elsewhere.

    Args:
        run_dir: a run directory made by ``tempo-rl train``.
        games: the games (default: the config's evaluation seeds, ``EVAL_SEED_START + j``).
        episodes: with the default games, how many (default ``run.eval_episodes``).
        temperature: sampling temperature (default ``sampling.eval_temperature``).
        out_dir: where to write (default ``run_dir/eval/update-<N>``).
        batch_size: games played concurrently.

    Returns:
        The summary record (also written to ``eval_summary.json``).

    Raises:
        ConfigError: ``run_dir`` is not a run directory, or has no checkpoint yet (a run killed before its
            first checkpoint has nothing trained to evaluate).
        CheckpointError: the run has checkpoints but none verifies.
    """
    from tempo_rl.training.checkpoint import latest_checkpoint
    from tempo_rl.training.config import ConfigError, load_config
    from tempo_rl.training.run import CONFIG_FILE, build_trainer
    from tempo_rl.training.store import StateStore
    from tempo_rl.training.trainer import TrainerState

    run_path = Path(run_dir)
    cfg_file = run_path / CONFIG_FILE
    if not cfg_file.is_file():
        raise ConfigError(f"{run_path} has no {CONFIG_FILE}; pass a run directory made by `tempo-rl train`")
    config = load_config(cfg_file)
    checkpoint = latest_checkpoint(run_path)
    if checkpoint is None:
        raise ConfigError(
            f"{run_path} has no checkpoint yet (the run stopped before its first one), so there is no trained "
            f"policy to evaluate; continue it with `tempo-rl train --resume {run_path}` first"
        )
    for note in checkpoint.notes:
        print(f"tempo-rl: {note}", file=sys.stderr, flush=True)
    state = TrainerState.from_json(checkpoint.trainer_state)
    trainer = build_trainer(
        config,
        run_path,
        resume=True,
        state=state,
        backend_state=checkpoint.backend_state,
        critic_backend_state=checkpoint.critic_backend_state,
        store=StateStore(None, capacity=config.store.capacity),
    )
    try:
        if games is None:
            n = episodes if episodes is not None else config.run.eval_episodes
            seeds = [EVAL_SEED_START + j for j in range(n)]
            games = seed_games(config.env.spec(), seeds)
        temp = temperature if temperature is not None else config.sampling.eval_temperature
        settings = trainer.rollout_settings(segment_rounds=None, temperature=temp)
        records = asyncio.run(
            play_episodes(
                games,
                sampler=trainer.c.sampler,
                chat=trainer.c.chat,
                settings=settings,
                pool=trainer.c.pool,
                parser=trainer.c.parser,
                batch_size=batch_size,
                policy_version=trainer.state.policy_version,
            )
        )
    finally:
        trainer.c.store.close()
        trainer.c.pool.close()
    update = checkpoint.update
    out = Path(out_dir) if out_dir is not None else run_path / "eval" / f"update-{update:06d}"
    summary = summarize_episodes(records)
    meta = {"run_dir": str(run_path), "update": update, "temperature": temp}
    write_eval_outputs(out, records, summary, **meta)
    return json_safe({"type": "summary", **meta, **summary, "out_dir": str(out)})
