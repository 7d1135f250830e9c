"""The race (``tempo-rl race``): its marks, table and verdict by hand, and a shortened race end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tempo_rl.training.race import difference_se, race_marks, race_table, verdict, warm_start_threads


def _arm(success: list[float], steps: list[int], tokens: list[int], games: int = 32) -> dict:
    return {"success": success, "env_steps": steps, "tokens": tokens, "eval_episodes": games}


def test_marks_are_evenly_spaced_and_end_at_the_budget() -> None:
    assert race_marks(4608, 6) == [768, 1536, 2304, 3072, 3840, 4608]
    assert race_marks(10, 3) == [3, 7, 10]
    with pytest.raises(ValueError, match="budget_env_steps >= 1"):
        race_marks(0, 3)


def test_the_verdict_compares_the_final_marks() -> None:
    result = {
        "tempo": _arm([0.2, 0.5], [0, 400], [0, 1_500_000]),
        "grpo": _arm([0.2, 0.3125], [0, 390], [0, 900_000]),
    }
    # sqrt(0.5 * 0.5 / 32 + 0.3125 * 0.6875 / 32) = 0.1205: a lead of 0.1875 is under 2 standard errors
    assert verdict(result) == (
        "TEMPO leads GRPO by 0.19 +- 0.12 success (0.50 vs 0.31 on 32 held-out games each, within 2 standard "
        "errors) after about 400 env steps"
    )
    result["grpo"]["success"][-1] = 0.125  # sqrt(0.25 / 32 + 0.125 * 0.875 / 32) = 0.1060; 0.375 > 2 x 0.1060
    assert verdict(result) == (
        "TEMPO leads GRPO by 0.38 +- 0.11 success (0.50 vs 0.12 on 32 held-out games each) after about 400 env steps"
    )
    # TEMPO at 0 over 64 games: sqrt(0 / 64 + 0.125 * 0.875 / 32) = 0.0585, and 0.125 > 2 x 0.0585
    result["tempo"]["success"][-1], result["tempo"]["eval_episodes"] = 0.0, 64
    assert verdict(result) == (
        "GRPO leads TEMPO by 0.12 +- 0.06 success (0.12 vs 0.00 on 32 and 64 held-out games) after about 400 env steps"
    )
    result["grpo"]["success"][-1] = result["tempo"]["success"][-1] = 0.5
    assert verdict(result).startswith("TEMPO and GRPO tie at 0.50 success (64 and 32 held-out games)")
    with pytest.raises(ValueError, match="at least one game"):
        difference_se(0.5, 0, 0.5, 32)
    table = race_table(result).splitlines()
    assert len(table) == 3 and table[2].split() == ["1", "400", "0.50", "1.50", "390", "0.50", "0.90"]


def test_the_warm_start_takes_the_threads_of_both_arms_whatever_the_jobs() -> None:
    from tempo_rl.training.config import configs_for, read_config_file
    from tempo_rl.training.race import RACE_ALGORITHMS, RACE_CONFIG

    tempo = configs_for(read_config_file(RACE_CONFIG), RACE_ALGORITHMS)["tempo"]
    assert tempo.backend.num_threads == 1
    warm = warm_start_threads(tempo)
    assert warm.backend.num_threads == 2  # 1 thread x 2 algorithms
    assert warm.model_dump(exclude={"backend"}) == tempo.model_dump(exclude={"backend"})
    assert warm.backend.model_dump(exclude={"num_threads"}) == tempo.backend.model_dump(
        exclude={"num_threads"}
    )
    three = tempo.model_copy(update={"backend": tempo.backend.model_copy(update={"num_threads": 3})})
    assert warm_start_threads(three).backend.num_threads == 6
    automatic = tempo.model_copy(update={"backend": tempo.backend.model_copy(update={"num_threads": None})})
    assert warm_start_threads(automatic) is automatic  # torch's own choice stays torch's


@pytest.mark.slow
def test_a_short_race_writes_its_summary_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from tempo_rl.cli import main

    run_dir = tmp_path / "race"
    overrides = [  # the built-in race, cut down: a 12-round corridor, a 1-layer model, a few demos
        "env.kwargs={horizon=12, keys=1, colours=2, clue_gap=0, lock_gap=0, lock_colour='blue', state_note=true}",
        "tempo.max_rounds=12",
        "tempo.macro_rounds=4",
        "tempo.warmup_substeps=2",
        "sampling.max_trajectory_tokens=2048",
        "backend.max_positions=4096",
        "backend.hidden_size=32",
        "backend.num_layers=1",
        "backend.num_heads=2",
        "backend.vocab_size=512",
        "warmstart.episodes=4",
        "warmstart.epochs=1",
        "tempo.warmup_updates=1",
        "tempo.warmup_games_per_batch=2",
        "run.eval_episodes=2",
    ]
    args = ["race", "--run-dir", str(run_dir), "--budget-env-steps", "60", "--marks", "2", "--quiet"]
    assert main([*args, *(x for o in overrides for x in ("--set", o))]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())["race"]
    assert summary["marks"] == [30, 60]
    for name in ("tempo", "grpo"):
        arm = summary[name]
        assert arm["env_steps"][0] == 0 and arm["tokens"][0] == 0
        assert len(arm["env_steps"]) == len(arm["tokens"]) == len(arm["success"]) == 3
        assert arm["env_steps"][-1] >= 60 and arm["tokens"][-1] >= arm["tokens"][1] > 0
        assert all(0.0 <= s <= 1.0 for s in arm["success"]) and arm["eval_episodes"] == 2
        assert (run_dir / name / "metrics.jsonl").stat().st_size > 0
    assert summary["tempo"]["success"][0] == summary["grpo"]["success"][0]  # one warm start for both
    # ... and one tokenizer: the warm start's (its weights mean something only under its token ids)
    assert (run_dir / "warmstart" / "tokenizer").is_dir()
    assert not (run_dir / "tempo" / "tokenizer").exists() and not (run_dir / "grpo" / "tokenizer").exists()
    assert summary["verdict"] == verdict(summary)
    assert (run_dir / "race.png").stat().st_size > 0
    # a race starts in a new folder: the same folder again is refused, and nothing in it changes
    before = sorted(p.name for p in run_dir.iterdir())
    assert main([*args]) == 2
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_the_built_in_race_runs_its_critic_design_and_a_config_of_ones_own_runs_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tempo_rl.cli import main
    from tempo_rl.training import race as race_module
    from tempo_rl.training.options import TrainerOptions
    from tempo_rl.training.race import RACE_CONFIG, RACE_OPTIONS

    seen: list[object] = []
    monkeypatch.setattr(race_module, "race", lambda *args, **kwargs: seen.append(kwargs.get("options")) or {})
    args = ["race", "--budget-env-steps", "60", "--quiet"]
    assert main([*args, "--run-dir", str(tmp_path / "built-in")]) == 0
    assert main([*args, "--run-dir", str(tmp_path / "own"), "--config", str(RACE_CONFIG)]) == 0
    assert seen == [RACE_OPTIONS, None]
    assert RACE_OPTIONS.critic_learning_rate == 3e-3 and RACE_OPTIONS.critic_history_turns == 1
    assert RACE_OPTIONS.critic_answer_prefix == "<value>" and RACE_OPTIONS.warmstart_cooldown == 1 / 3
    assert TrainerOptions() != RACE_OPTIONS
