"""``benchmarks/warmup_probe.py``: its env overrides, its summary by hand, its errors, and a smoke run."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest
from benchmark_runs import load_benchmark, run_benchmark

probe = load_benchmark("warmup_probe")
mech = load_benchmark("mechanism")


def test_spread_is_min_median_max_of_the_defined_seeds() -> None:
    assert probe.spread([0.5, None, 0.1, 0.9, 0.3]) == {
        "min": 0.1,
        "median": 0.4,  # of 0.1, 0.3, 0.5, 0.9
        "max": 0.9,
        "undefined": 1,
    }
    assert probe.spread([None, None]) == {"min": None, "median": None, "max": None, "undefined": 2}


def test_env_setting_overrides_only_what_it_is_given() -> None:
    base = mech.ENVS["knights"]
    same = probe.env_setting("knights", False, {})
    assert dataclasses.asdict(same) == dataclasses.asdict(base)  # (the tool imports its own mechanism module)
    changed = probe.env_setting("knights", False, {"feedback": "immediate"}, 24, 4, 96, 4, 8)
    assert changed.kwargs == {**base.kwargs, "feedback": "immediate"}
    assert (
        changed.max_rounds,
        changed.macro_rounds,
        changed.demo_episodes,
        changed.warmup_games,
        changed.probe_rollouts,
    ) == (24, 4, 96, 4, 8)
    assert (base.macro_rounds, base.demo_episodes, base.warmup_games, base.probe_rollouts) == (2, 512, 16, 32)
    assert (base.critic_learning_rate, base.critic_history_turns) == (3e-3, 1)
    assert (changed.critic_learning_rate, changed.critic_history_turns) == (3e-3, 1)
    # a critic with the actor's step size that sees the whole history
    old = probe.env_setting(
        "knights", False, {}, critic={"critic_learning_rate": None, "critic_history_turns": None}
    )
    assert (old.critic_learning_rate, old.critic_history_turns, old.warmup_games) == (None, None, 16)
    half = probe.env_setting("knights", False, {}, critic={"critic_history_turns": 3})
    assert (half.critic_learning_rate, half.critic_history_turns) == (3e-3, 3)
    assert changed.arms == base.arms and changed.eval_temperature == base.eval_temperature
    # the benchmark's own table, the module the tool reads it from, is untouched
    assert importlib.import_module("mechanism").ENVS["knights"].kwargs == base.kwargs
    assert probe.env_setting("knights", True, {}).kwargs == mech.QUICK_ENVS["knights"].kwargs
    with pytest.raises(SystemExit, match="unknown env 'chess'"):
        probe.env_setting("chess", False, {})


def test_the_arm_config_changes_only_the_temperature_and_the_warm_up_length(tmp_path: Path) -> None:
    env, scale = mech.ENVS["knights"], mech.FULL
    arm = mech.make_config(env, scale, 3, "generative_critic_only", tmp_path / "run", tmp_path / "tok")
    assert probe.arm_config(env, scale, 3, tmp_path / "run", tmp_path / "tok") == arm
    cool = probe.arm_config(env, scale, 3, tmp_path / "run", tmp_path / "tok", 0.25)
    assert cool.sampling.temperature == 0.25 and arm.sampling.temperature == env.temperature == 0.5
    assert cool.model_dump(exclude={"sampling"}) == arm.model_dump(exclude={"sampling"})
    assert cool.sampling.model_dump(exclude={"temperature"}) == arm.sampling.model_dump(
        exclude={"temperature"}
    )
    longer = probe.arm_config(env, scale, 3, tmp_path / "run", tmp_path / "tok", warmup_updates=16)
    assert longer.tempo.warmup_updates == 16 and arm.tempo.warmup_updates == scale.warmup_updates
    assert longer.model_dump(exclude={"tempo"}) == arm.model_dump(exclude={"tempo"})
    assert longer.tempo.model_dump(exclude={"warmup_updates"}) == arm.tempo.model_dump(
        exclude={"warmup_updates"}
    )


def test_a_bad_temperature_or_warm_up_length_fails_with_the_configs_error(tmp_path: Path) -> None:
    from tempo_rl.training.config import ConfigError

    env, scale = mech.ENVS["knights"], mech.FULL
    with pytest.raises(ConfigError, match=r"sampling\.temperature"):
        probe.arm_config(env, scale, 0, tmp_path / "run", tmp_path / "tok", temperature=0.0)
    with pytest.raises(ConfigError, match=r"tempo\.warmup_updates"):
        probe.arm_config(env, scale, 0, tmp_path / "run", tmp_path / "tok", warmup_updates=-1)


def test_a_set_without_json_names_the_fix() -> None:
    for bad in ("max_steps", "feedback=final", "=3"):
        with pytest.raises(SystemExit, match="expected KEY=JSON"):
            probe.main(["--set", bad, "--work", "unused"])


def test_a_bad_critic_design_flag_names_the_fix() -> None:
    for flag, bad in (("--critic-learning-rate", "fast"), ("--critic-history-turns", "last")):
        with pytest.raises(
            SystemExit, match="a number or 'actor', --critic-history-turns an integer or 'all'"
        ):
            probe.main([flag, bad, "--work", "unused"])


def test_quick_run_prints_the_warm_up_and_the_probe(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the warm-up trains the local backend's model (torch)")
    args = ("--quick", "--work", str(tmp_path), "--set", "max_steps=6", "--temperature", "0.7")
    args += ("--warmup-updates", "2", "--probe-rollouts", "3")
    args += ("--critic-learning-rate", "0.002", "--critic-history-turns", "1")
    figures = run_benchmark("warmup_probe.py", *args)
    assert (figures["critic_learning_rate"], figures["critic_history_turns"]) == (0.002, 1)
    assert figures["benchmark"] == "warmup_probe" and figures["env"] == "knights"
    assert figures["kwargs"]["max_steps"] == 6 and figures["temperature"] == 0.7
    row = figures["seed0"]
    assert 0.0 <= row["warm_start"]["success"] <= 1.0
    warmup = row["warmup"]
    assert figures["warmup_updates"] == 2 and figures["probe_rollouts"] == 3
    assert len(warmup["success_rate"]) == len(warmup["value_corr"]) == len(warmup["env_steps"]) == 2
    assert 0 < warmup["env_steps"][0] < warmup["env_steps"][1]  # cumulative: every update plays games
    assert row["probe"]["states"] > 0 and row["probe"]["rollout_env_steps"] > 0
    for key in probe.PROBE_KEYS:
        assert set(figures[key]) == {"min", "median", "max", "undefined"}
    # the same command again, over the first run's folders: the same figures (a run is repeatable)
    again = run_benchmark("warmup_probe.py", *args)
    assert again == figures
