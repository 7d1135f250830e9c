"""The README and the results page print the benchmark's table exactly as ``results.json`` gives it."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "mechanism" / "results.json"


def _benchmark(name: str) -> Any:
    """The module ``benchmarks/<name>.py``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.fixture(scope="module")
def table() -> str:
    mechanism = _benchmark("mechanism")
    summary = json.loads(RESULTS.read_text())["summary"]
    return mechanism.results_table(summary["keydoor_rule"])


def test_the_results_page_prints_the_benchmarks_table(table: str) -> None:
    text = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert table in text, f"docs/results.md does not print the table of {RESULTS.relative_to(ROOT)}:\n{table}"


UNSEEN_RESULTS = ROOT / "benchmarks" / "results" / "mechanism-seeds-5-9" / "results.json"


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_the_page_prints_the_unseen_seeds_table(page: str) -> None:
    mechanism = _benchmark("mechanism")
    table = mechanism.results_table(json.loads(UNSEEN_RESULTS.read_text())["summary"]["keydoor_rule"])
    text = (ROOT / page).read_text(encoding="utf-8")
    assert table in text, f"{page} does not print the table of {UNSEEN_RESULTS.relative_to(ROOT)}:\n{table}"


def test_the_table_lists_grpo_gigpo_and_tempo_with_each_critic(table: str) -> None:
    for arm in ("GRPO", "GiGPO", "TEMPO + oracle critic", "TEMPO + generative critic"):
        assert f"| {arm} |" in table


RACE_RESULTS = ROOT / "benchmarks" / "results" / "race" / "results.json"


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_the_page_prints_the_race_on_its_seeds_as_recorded(page: str) -> None:
    race_seeds = _benchmark("race_seeds")
    line = json.loads(RACE_RESULTS.read_text())["headline"]
    assert line["seeds"] == [0, 1, 2, 3, 4]
    table = race_seeds.results_table(line)
    text = (ROOT / page).read_text(encoding="utf-8")
    assert table in text, f"{page} does not print the table of {RACE_RESULTS.relative_to(ROOT)}:\n{table}"


def test_the_results_page_prints_where_the_races_td_signal_went() -> None:
    race_seeds = _benchmark("race_seeds")
    per_seed = json.loads(RACE_RESULTS.read_text())["per_seed"]
    table = race_seeds.td_signal_table(per_seed)
    assert table in (ROOT / "docs" / "results.md").read_text(encoding="utf-8"), table


@pytest.mark.parametrize(
    ("folder", "arm"),
    [
        ("mechanism-critic-only", "TEMPO + generative, critic-only warm-up"),
        ("mechanism-no-note", "TEMPO + generative, no critic note"),
    ],
)
def test_the_results_page_prints_a_recorded_extra_arm(folder: str, arm: str) -> None:
    mechanism = _benchmark("mechanism")
    path = ROOT / "benchmarks" / "results" / folder / "results.json"
    table = mechanism.results_table(json.loads(path.read_text())["summary"]["keydoor_rule"])
    row = next(line for line in table.splitlines() if line.startswith(f"| {arm} |"))
    assert row in (ROOT / "docs" / "results.md").read_text(encoding="utf-8"), row


def test_the_results_page_prints_the_second_envs_table() -> None:
    mechanism = _benchmark("mechanism")
    path = ROOT / "benchmarks" / "results" / "mechanism-crossings" / "results.json"
    table = mechanism.results_table(json.loads(path.read_text())["summary"]["crossings_rule"])
    for arm in ("GRPO", "GiGPO", "TEMPO + oracle critic", "TEMPO + generative critic"):
        assert f"| {arm} |" in table
    assert table in (ROOT / "docs" / "results.md").read_text(encoding="utf-8"), table
