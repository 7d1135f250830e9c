"""``algorithm = "gigpo"`` end to end: the built-in games and the ARC-AGI-3 stub on the local backend, and anchor
groups forming across the branches of a real ALFWorld game."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from tempo_rl.rollout.tool_call import format_tool_call
from tempo_rl.testing.policies import ScriptedPolicy, use_scripted_policy
from tempo_rl.training.config import load_config
from tempo_rl.training.run import build_trainer, train_run

REPO = Path(__file__).resolve().parents[2]

TINY = [
    'algorithm="gigpo"',
    "grpo.updates=2",
    "grpo.games_per_batch=2",
    "grpo.group_size=3",
    'backend={kind="local", hidden_size=32, num_layers=1, num_heads=2, vocab_size=512, max_positions=2048}',
    "sampling.max_tokens=24",
    "sampling.max_trajectory_tokens=1500",
    "run.loggers=[]",
]

ENVS: dict[str, list[str]] = {
    "keydoor": [
        'env.name="keydoor"',
        "env.kwargs={horizon=12, keys=1, colours=2}",
        "tempo.max_rounds=12",
    ],
    "knights": [
        'env.name="knights"',
        'env.kwargs={size=4, preplaced=1, place=2, max_steps=6, feedback="final"}',
        "tempo.max_rounds=6",
    ],
    "arc-stub": [
        'env.name="arc-stub"',
        "env.kwargs={levels=1, scale=8, max_steps=6}",
        "tempo.max_rounds=6",
    ],
}


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.parametrize("env", sorted(ENVS))
def test_gigpo_trains_on_the_local_backend(env: str, tmp_path: Path) -> None:
    cfg = load_config(None, [*TINY, *ENVS[env]])
    summary = train_run(tmp_path / "run", cfg, console=False)
    assert summary["updates_done"] == 2
    metrics = [r for r in _lines(tmp_path / "run" / "metrics.jsonl") if "train/phase" in r]
    assert [r["train/phase"] for r in metrics] == [3.0, 3.0]
    for r in metrics:
        assert r["gigpo/anchor_groups"] >= 2  # each game's start state at least
        assert 0.0 < r["gigpo/shared_step_share"] <= 1.0
    records = _lines(tmp_path / "run" / "trajectories.jsonl")
    assert len(records) == 2 * 2 * 3 and {r["phase"] for r in records} == {"gigpo"}
    assert all(len(r["advantage"]) == len(r["actions"]) for r in records)


def _one_alfworld_game(tmp_path: Path) -> Path:
    shared = REPO / "tests" / "data" / "alfworld" / "json_2.1.1" / "valid_seen"
    assert shared.is_dir(), f"the vendored ALFWorld games are missing from {shared}"
    src = sorted(p for p in shared.iterdir() if p.name.startswith("look_at_obj_in_light"))[0]
    games = tmp_path / "games"
    shutil.copytree(src, games / src.name)
    return games


class TwoChoices(ScriptedPolicy):
    """An actor that calls one of the first two listed actions, at random: a peaked policy, as trained agents
    are, whose branches often take the same action from the same state."""

    def _answer(self, prompt_text: str, rng: Any) -> str:
        if "value estimator" in prompt_text:
            return super()._answer(prompt_text, rng)
        actions = prompt_text.rsplit("Actions: ", 1)[-1].split("\n", 1)[0].split(" | ")
        return format_tool_call(actions[int(rng.integers(min(2, len(actions))))].strip())


@pytest.mark.slow
@pytest.mark.alfworld
def test_gigpo_anchor_groups_form_across_the_branches_of_an_alfworld_game(tmp_path: Path) -> None:
    """ALFWorld's state key is its PDDL fact set: branches that take the same actions from the start reach the
    same later states, which form anchor groups beyond the common start state."""
    pytest.importorskip("alfworld")
    games = _one_alfworld_game(tmp_path)
    cfg = load_config(
        None,
        [
            *TINY,
            'env.name="alfworld"',
            f'env.games_dir="{games}"',
            f'env.eval_games_dir="{games}"',
            "env.kwargs={max_steps=6}",
            "tempo.max_rounds=6",
            "grpo.games_per_batch=1",
            "grpo.group_size=4",
            "sampling.max_tokens=48",
            "sampling.max_trajectory_tokens=4000",
        ],
    )
    trainer = build_trainer(cfg, tmp_path / "run")
    try:
        use_scripted_policy(trainer, TwoChoices(trainer.c.chat.tokenizer))
        records: list[dict[str, Any]] = []
        trainer.write_trajectories = records.extend
        metrics = asyncio.run(trainer.update(0))
    finally:
        trainer.close()
    steps = sum(len(r["actions"]) for r in records)
    shared_steps = metrics["gigpo/shared_step_share"] * steps
    assert len(records) == 4 and steps > 4
    assert shared_steps > 4 + 1e-9  # beyond the 4 branches' common start state
    assert metrics["gigpo/anchor_groups"] < steps - 3  # states met by several branches
