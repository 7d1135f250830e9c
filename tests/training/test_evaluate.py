"""Evaluation: per-episode records, summaries by split and task type, output files, and real episodes."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tempo_rl.backends.types import SampledSequence, SampleResult, SamplingParams
from tempo_rl.envs import EnvSpec, Observation, make
from tempo_rl.rollout.tool_call import INVALID_ACTION, ToolCallParser, format_tool_call
from tempo_rl.training.evaluate import (
    EvalGame,
    episode_record,
    play_episodes,
    seed_games,
    summarize_episodes,
    summary_metrics,
    write_eval_outputs,
)


def _branch(actions: list[str], obs_admissible: list[tuple[str, ...] | None], **kw: Any) -> SimpleNamespace:
    fields = {
        "actions": actions,
        "observations": [
            Observation(text=f"o{i}", admissible_actions=a) for i, a in enumerate(obs_admissible)
        ],
        "rewards": [0.0] * len(actions),
        "won": False,
        "end_reason": "max_rounds",
        "rounds": len(actions),
        "valid_tool_calls": sum(a != INVALID_ACTION for a in actions),
        "error": None,
    }
    fields.update(kw)
    return SimpleNamespace(**fields)


def test_episode_record_counts_invalid_and_inadmissible_actions() -> None:
    game = EvalGame(spec=EnvSpec(name="toy"), seed=3, split="valid_seen", task_type="pick")
    # step 0 uses the opening list, step i the list of observation i-1
    branch = _branch(
        ["go", INVALID_ACTION, "fly", "take"],
        [("go", "take"), ("go",), None, ("x",)],
        rewards=[0.0, 0.0, 0.0, 1.0],
        won=True,
        end_reason="terminated",
    )
    record = episode_record(game, branch, opening_admissible=("go", "look"), task="do it")
    assert (record.invalid_tool_calls, record.inadmissible_actions, record.admissible_known_steps) == (
        1,
        1,
        2,
    )
    assert record.invalid_actions == 2 and record.won and record.reward == 1.0 and record.steps == 4
    assert not record.truncated and record.game_id == "toy:3" and record.task_type == "pick"
    assert record.observations == ("o0", "o1", "o2", "o3")


def _rec(split: str, task_type: str, won: bool, steps: int, invalid: int, end: str = "terminated") -> Any:
    game = EvalGame(spec=EnvSpec(name="toy"), seed=0, split=split, task_type=task_type)
    actions = [INVALID_ACTION] * invalid + ["go"] * (steps - invalid)
    branch = _branch(
        actions, [("go",)] * steps, won=won, end_reason=end, rewards=[float(won)] + [0.0] * (steps - 1)
    )
    return episode_record(game, branch, opening_admissible=("go",))


def test_summary_by_split_and_task_type_is_hand_computed() -> None:
    records = [
        _rec("seen", "pick", True, 4, 0),
        _rec("seen", "pick", False, 10, 2, end="max_rounds"),
        _rec("seen", "heat", True, 6, 1),
        _rec("unseen", "pick", False, 10, 0, end="max_rounds"),
    ]
    summary = summarize_episodes(records)
    overall = summary["overall"]
    assert overall["episodes"] == 4 and overall["success_rate"] == 0.5
    assert overall["steps_mean"] == 7.5 and overall["truncated_rate"] == 0.5
    assert overall["invalid_actions_mean"] == 0.75
    assert overall["valid_tool_call_rate"] == pytest.approx(27 / 30)
    assert overall["admissible_action_rate"] == 1.0  # every readable action was admissible
    assert overall["reward_mean"] == 0.5
    assert summary["by_split"]["seen"]["success_rate"] == pytest.approx(2 / 3)
    assert summary["by_split"]["unseen"]["success_rate"] == 0.0
    assert summary["by_task_type"]["pick"]["success_rate"] == pytest.approx(1 / 3)
    assert summary["by_task_type"]["heat"]["steps_mean"] == 6.0
    assert summary["by_split_and_task_type"]["seen"]["pick"]["episodes"] == 2
    flat = summary_metrics(summary)
    assert flat["eval/success_rate"] == 0.5 and flat["eval/seen/steps_mean"] == pytest.approx(20 / 3)
    assert flat["eval/task/heat/success_rate"] == 1.0
    assert math.isnan(summarize_episodes([])["overall"]["success_rate"])


def test_outputs_hold_every_trajectory_and_a_summary(tmp_path: Path) -> None:
    records = [_rec("seen", "pick", True, 2, 0), _rec("seen", "pick", False, 3, 3, end="max_rounds")]
    summary = summarize_episodes(records)
    summary["by_split"]["seen"]["admissible_action_rate"] = math.nan  # as for a group with 0 known steps
    traj, summ = write_eval_outputs(tmp_path / "eval", records, summary, temperature=0.01)
    lines = [json.loads(line) for line in traj.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["episode", "episode", "summary"]
    assert lines[1]["actions"] == [INVALID_ACTION] * 3 and lines[1]["invalid_actions"] == 3
    assert lines[2]["temperature"] == 0.01 and lines[2]["overall"]["success_rate"] == 0.5
    assert json.loads(summ.read_text()) == lines[2]
    assert lines[2]["by_split"]["seen"]["admissible_action_rate"] is None  # NaN -> null (strict JSON)


class FirstActionSampler:
    """A scripted policy: reads the prompt and calls the first listed action (or writes garbage)."""

    def __init__(self, tokenizer: Any, garbage: bool = False) -> None:
        self.tokenizer = tokenizer
        self.garbage = garbage

    async def sample_async(self, prompt: list[int], num_samples: int, params: SamplingParams) -> SampleResult:
        text = self.tokenizer.decode(list(prompt), skip_special_tokens=False)
        action = re.findall(r"Actions: ([^|\n<]+)", text)[-1].strip()
        reply = "I am not sure." if self.garbage else format_tool_call(action, "env_step")
        tokens = (*self.tokenizer.encode(reply, add_special_tokens=False), self.tokenizer.eos_token_id)
        seq = SampledSequence(tokens=tokens, logprobs=(0.0,) * len(tokens), text=reply)
        return SampleResult(sequences=(seq,) * num_samples)


def _direct_play(seed: int, max_rounds: int) -> tuple[list[str], bool]:
    env = make("keydoor")
    obs = env.reset(seed)
    actions: list[str] = []
    for _ in range(max_rounds):
        assert obs.admissible_actions
        actions.append(obs.admissible_actions[0])
        result = env.step(actions[-1])
        obs = result.observation
        if result.done:
            return actions, bool(result.info.get("won"))
    return actions, False


@pytest.fixture(scope="module")
def chat() -> Any:
    pytest.importorskip("transformers", reason="needs the local extra for the offline tokenizer")
    from tempo_rl.backends.local.tokenizer import build_tokenizer
    from tempo_rl.rollout.renderer import ChatRenderer

    return ChatRenderer(build_tokenizer(["go on", "take green", "take red", "open door"], vocab_size=600))


def test_play_episodes_on_keydoor_matches_direct_play(chat: Any) -> None:
    from tempo_rl.envs.workers import EnvWorkerPool
    from tempo_rl.rollout.branches import RolloutSettings

    settings = RolloutSettings(
        sampling=SamplingParams(max_tokens=64), max_rounds=40, max_trajectory_tokens=100_000
    )
    games = seed_games(EnvSpec(name="keydoor"), range(6))
    with EnvWorkerPool(max_workers=2, step_timeout_s=30) as pool:
        records = asyncio.run(
            play_episodes(
                games,
                sampler=FirstActionSampler(chat.tokenizer),
                chat=chat,
                settings=settings,
                pool=pool,
                parser=ToolCallParser(),
                batch_size=4,
            )
        )
        junk = asyncio.run(
            play_episodes(
                games[:1],
                sampler=FirstActionSampler(chat.tokenizer, garbage=True),
                chat=chat,
                settings=RolloutSettings(sampling=SamplingParams(max_tokens=64), max_rounds=5),
                pool=pool,
                parser=ToolCallParser(),
            )
        )
    assert [r.game_id for r in records] == [f"keydoor:{s}" for s in range(6)]
    for seed, record in enumerate(records):
        actions, won = _direct_play(seed, 40)
        assert list(record.actions) == actions and record.won == won and record.steps == len(actions)
        assert record.invalid_actions == 0 and record.valid_tool_calls == record.steps
        assert record.task == "Reach the exit at the end of the corridor."
    summary = summarize_episodes(records)
    assert 0 < summary["overall"]["success_rate"] < 1  # first-listed keys win some corridors, lose others
    assert summary["overall"]["admissible_action_rate"] == 1.0
    (bad,) = junk
    assert bad.invalid_tool_calls == bad.steps == 5 and bad.valid_tool_calls == 0 and bad.truncated


@pytest.mark.slow
def test_cli_eval_on_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`tempo-rl eval RUN_DIR` on a real (untrained) local-backend run: files and summary written."""
    pytest.importorskip("torch", reason="needs the local extra")
    import argparse

    from tempo_rl.cli import evaluate as eval_cli
    from tempo_rl.cli import main
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import train_run

    config = load_config(None, ["tempo.max_rounds=4", "tempo.macro_rounds=2", "sampling.max_tokens=16"])
    run_dir = tmp_path / "run"
    train_run(run_dir, config, max_updates=0, console=False)
    parser = argparse.ArgumentParser()
    eval_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["eval", str(run_dir), "--episodes", "2", "--out", str(tmp_path / "ev")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "episodes 2" in out and "split eval" in out
    lines = [
        json.loads(line) for line in (tmp_path / "ev" / "eval_trajectories.jsonl").read_text().splitlines()
    ]
    assert [line["type"] for line in lines] == ["episode", "episode", "summary"]
    assert all(line["steps"] <= 4 for line in lines[:2]) and lines[2]["overall"]["episodes"] == 2
    assert main(["eval", str(tmp_path / "nowhere")]) == 2 and "no such folder" in capsys.readouterr().err


def test_alfworld_games_group_by_split_and_task_type() -> None:
    root = Path(__file__).resolve().parents[2] / "tests" / "data" / "alfworld"  # vendored real games
    assert root.is_dir(), f"the vendored ALFWorld games are missing from {root}"
    from tempo_rl.training.evaluate import alfworld_games

    games = alfworld_games(root, ("valid_seen", "valid_unseen"), per_split=2, env_kwargs={"max_steps": 30})
    assert [g.split for g in games] == ["valid_seen"] * 2 + ["valid_unseen"] * 2
    for g in games:
        assert g.spec.name == "alfworld" and g.spec.kwargs["max_steps"] == 30
        assert Path(g.spec.kwargs["game_file"]).name == "game.tw-pddl"
        assert g.task_type and g.game_id and g.game_id.startswith(g.split + ":")
