"""``benchmarks/critic_warmup.py``: when the correlation bar counts as reached, by hand, its designs, and a smoke
run with its value probe."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from benchmark_runs import load_benchmark, run_benchmark

pytest.importorskip("torch")

warmup = load_benchmark("critic_warmup")


def test_steps_to_bar_needs_the_bar_held_to_the_end() -> None:
    steps = [100.0, 200.0, 300.0, 400.0, 500.0]
    assert warmup.steps_to_bar({"corr": [0.1, 0.75, 0.6, 0.72, 0.9], "env_steps": steps}, 0.7) == 400.0
    assert warmup.steps_to_bar({"corr": [0.8, 0.9, 0.7, 0.71, 0.95], "env_steps": steps}, 0.7) == 100.0
    # an undefined correlation (every target equal) breaks the run, and a last update below the bar is "never"
    assert warmup.steps_to_bar({"corr": [0.8, None, 0.9, 0.9, 0.9], "env_steps": steps}, 0.7) == 300.0
    assert warmup.steps_to_bar({"corr": [0.8, 0.9, 0.9, 0.9, 0.5], "env_steps": steps}, 0.7) is None
    assert warmup.steps_to_bar({"corr": [], "env_steps": []}, 0.7) is None


class _Trainer:
    """What :func:`apply_design` touches of a trainer: ``train_step`` (recorded) and ``c.sampler``."""

    def __init__(self) -> None:
        self.c = SimpleNamespace(sampler="warm start's sampler", chat=None, pool=None, parser=None)
        self.calls: list[tuple[list[Any], int | None]] = []

    def train_step(self, datums: Any, timer: Any = None, substeps: int | None = None) -> dict[str, float]:
        self.calls.append((list(datums), substeps))
        return {}


def test_the_arms_design_leaves_the_trainer_alone() -> None:
    trainer = _Trainer()
    step = trainer.train_step
    assert warmup.apply_design(trainer, warmup.Design()) is None
    assert trainer.train_step == step
    assert warmup.Design().label() == "hH-s4-e1"


def test_own_weights_trains_only_the_critic_datums_once_per_epoch() -> None:
    trainer = _Trainer()
    actor = warmup.apply_design(trainer, warmup.Design(stride=1, substeps=16, epochs=2, own_weights=True))
    assert actor == "warm start's sampler"  # kept: it plays every episode from here on
    assert warmup.Design(stride=1, substeps=16, epochs=2, own_weights=True).label() == "h1-s16-e2-own"
    a, c1, c2 = (SimpleNamespace(tags={"role": r}) for r in ("actor", "critic", "critic"))
    trainer.train_step([a, c1, c2], None, substeps=16)
    assert trainer.calls == [([c1, c2, c1, c2], 32)]  # 2 passes, 16 steps each; the actor's Datum dropped
    shared = _Trainer()
    assert warmup.apply_design(shared, warmup.Design(epochs=3)) is None  # epochs alone: every Datum, 3 passes
    shared.train_step([a, c1], None, substeps=4)
    assert shared.calls == [([a, c1, a, c1, a, c1], 12)]


def test_replay_trains_every_earlier_updates_critic_datums_again() -> None:
    trainer = _Trainer()
    design = warmup.Design(stride=1, substeps=2, own_weights=True, replay=True)
    assert design.label() == "h1-s2-e1-own-replay"
    warmup.apply_design(trainer, design)
    a1, c1, c2, a2, c3 = (
        SimpleNamespace(tags={"role": r}) for r in ("actor", "critic", "critic", "actor", "critic")
    )
    trainer.train_step([a1, c1, c2], None, substeps=2)
    trainer.train_step([a2, c3], None, substeps=2)
    # update 2 trains update 1's critic Datums again, before its own; no actor Datum ever (own weights)
    assert trainer.calls == [([c1, c2], 2), ([c1, c2, c3], 2)]
    shared = _Trainer()
    warmup.apply_design(shared, warmup.Design(replay=True))  # shared weights: the actor's Datums once
    shared.train_step([a1, c1], None, substeps=4)
    shared.train_step([a2, c3], None, substeps=4)
    assert shared.calls == [([a1, c1], 4), ([c1, a2, c3], 4)]


def test_the_library_design_is_the_trainers_own_config_and_no_simulation() -> None:
    design = warmup.Design(stride=1, substeps=16, epochs=2, own_weights=True, replay=True, library=True)
    assert design.label() == "h1-s16-e2-own-replay-lib"
    assert design.tempo_settings() == {"critic_weights": "own", "warmup_replay": True, "warmup_substeps": 32}
    # the simulation asks the trainer for one set of weights and no replay, and adds them itself
    assert warmup.Design(own_weights=True).tempo_settings() == {
        "critic_weights": "shared",
        "warmup_replay": False,
    }
    trainer = _Trainer()
    step = trainer.train_step
    assert warmup.apply_design(trainer, design) is None and trainer.train_step == step


def test_quick_run_prints_one_curve_per_seed(tmp_path: Path) -> None:
    figures = run_benchmark("critic_warmup.py", "--quick", "--work", str(tmp_path))
    assert figures["benchmark"] == "critic_warmup" and figures["updates"] == 2
    curve = figures["seed0"]
    assert len(curve["corr"]) == len(curve["mean_estimate"]) == len(curve["env_steps"]) == 2
    assert 0 < curve["env_steps"][0] < curve["env_steps"][1]  # cumulative, every update plays games
    assert all(0.0 <= v <= 1.0 for v in curve["mean_estimate"])  # V_hat is an expectation over 0 and 1
    assert curve["env_steps_to_bar"] is None or curve["env_steps_to_bar"] in curve["env_steps"]
    probe = curve["probe"]  # the value probe after the warm-up: 1 held-out game x 2 branches, M = 2 rollouts
    assert figures["probe_games"] == 1 and figures["probe_rollouts"] == 2
    assert probe["states"] > 0 and probe["rollout_env_steps"] > 0
    assert (
        0.0 <= probe["mean_v"] <= 1.0
        and 0.0 <= probe["mean_vpi"] <= 1.0
        and 0.0 <= probe["mean_return"] <= 1.0
    )
    for key in ("corr_v_return", "corr_v_vpi", "ceiling_vpi_return"):
        assert probe[key] is None or -1.0 <= probe[key] <= 1.0
    assert probe["vpi_noise_share"] is None or probe["vpi_noise_share"] >= 0.0


def test_quick_run_with_a_critic_of_its_own(tmp_path: Path) -> None:
    args = ("--quick", "--work", str(tmp_path), "--own-weights", "--stride", "1", "--epochs", "2")
    figures = run_benchmark("critic_warmup.py", *args)
    assert figures["design"] == {
        "stride": 1,
        "substeps": 4,
        "epochs": 2,
        "own_weights": True,
        "replay": False,
        "library": False,
    }
    curve = figures["seed0"]
    assert len(curve["corr"]) == 2 and curve["probe"]["states"] > 0
    assert all(0.0 <= v <= 1.0 for v in curve["mean_estimate"])
