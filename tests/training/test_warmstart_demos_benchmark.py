"""``benchmarks/warmstart_demos.py``: its counts by hand, and a short real run of both experts."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from benchmark_runs import load_benchmark, run_benchmark

pytest.importorskip("torch")

demos = load_benchmark("warmstart_demos")


def test_expert_actions_and_summary_by_hand() -> None:
    labels = [None, "go on", "go on", None, None, "take blue", None, "open door", "open door", None, "go on"]
    datum = SimpleNamespace(tags={"labels": json.dumps(labels)})
    assert demos.expert_actions(datum) == ["go on", "take blue", "open door", "go on"]
    records = [
        {"expert_steps": 14, "locks_opened": 0, "won": False},
        {"expert_steps": 40, "locks_opened": 2, "won": True},
        {"expert_steps": 30, "locks_opened": 1, "won": False},
    ]
    assert demos.summary(records) == {
        "demos": 3,
        "expert_steps_median": 30,
        "expert_opens_no_lock": 1,
        "expert_opens_both_locks": 1,
        "reached_exit": 1,
    }


def test_watched_env_sees_a_win_only_on_a_rewarded_termination() -> None:
    class Env:
        name = "toy"

        def __init__(self) -> None:
            self.results = [
                SimpleNamespace(terminated=False, reward=0.0),
                SimpleNamespace(terminated=True, reward=1.0),
            ]

        def step(self, action: str) -> SimpleNamespace:
            return self.results.pop(0)

    env = demos.WatchedEnv(Env())
    assert env.name == "toy"
    env.step("go on")
    assert not env.won
    env.step("go on")
    assert env.won


def test_short_run_recovering_demos_go_further() -> None:
    """8 demo games of seed 0: the recovering expert's demos show more of the walk and reach the exit more often
    than the walkthrough's (measured on 256 games x 5 seeds in docs/results.md)."""
    figures = run_benchmark("warmstart_demos.py", "--seeds", "0", "--episodes", "8")
    walk, rec = figures["walkthrough"], figures["recovering"]
    assert walk["demos"] == rec["demos"] == 8
    assert rec["expert_steps_median"] > walk["expert_steps_median"]
    assert rec["reached_exit"] > walk["reached_exit"]
    assert figures["recovering"]["per_seed"]["0"] == {k: v for k, v in rec.items() if k != "per_seed"}
