"""``benchmarks/key_choice.py --quick`` runs and prints one JSON line per its contract."""

from __future__ import annotations

import pytest
from benchmark_runs import run_benchmark


@pytest.mark.slow
@pytest.mark.torch
def test_key_choice_benchmark_quick() -> None:
    pytest.importorskip("torch", reason="the benchmark trains a local-backend model (torch)")
    figures = run_benchmark("key_choice.py", "--quick")
    assert figures["benchmark"] == "key_choice" and figures["quick"] is True
    assert (
        figures["role"] == "actor" and figures["layout"] == "adjacent" and figures["context_tokens_mean"] > 50
    )
    assert set(figures["arms"]) == {"sft", "rl_2e-4", "rl_1e-3"}
    for name, arm in figures["arms"].items():
        assert 0.0 <= arm["final_accuracy"] <= 1.0 and arm["steps"] == 10
        # the RL arms start from a model that names a colour but ignores the sign: half right on 2 colours
        if name != "sft":
            assert 0.3 <= arm["start_accuracy"] <= 0.7


@pytest.mark.slow
@pytest.mark.torch
def test_key_choice_benchmark_critic_role_quick() -> None:
    pytest.importorskip("torch", reason="the benchmark trains a local-backend model (torch)")
    figures = run_benchmark(
        "key_choice.py", "--quick", "--role", "critic", "--arms", "rl_1e-3", "--games-per-step", "2"
    )
    assert figures["role"] == "critic" and figures["games_per_step"] == 2
    assert figures["context_tokens_mean"] > 200  # the critic's prompt: task, hidden layout, history
    (arm,) = figures["arms"].values()
    # the RL arm starts from a model that answers 0 or 1 at random: about half right
    assert 0.3 <= arm["start_accuracy"] <= 0.7 and arm["steps"] == 10
