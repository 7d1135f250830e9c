"""Errors a config meets only against its env or backend are found before the first file is written.

Each case runs ``tempo-rl train`` and expects exit code 2, a message naming the problem and the fix (no
traceback), and the run directory as it was (absent, or holding the same files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tempo_rl.cli import main
from tempo_rl.envs import register, unregister
from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult
from tempo_rl.envs.keydoor import KeyDoorEnv

TINY = [
    "--set",
    "backend.hidden_size=16",
    "--set",
    "backend.num_layers=1",
    "--set",
    "backend.num_heads=2",
    "--set",
    "backend.max_positions=2048",
    "--quiet",
]


class IntTextEnv(KeyDoorEnv):
    """Breaks the contract: its observation text is an int."""

    def reset(self, seed: int | None = None) -> Observation:
        obs = super().reset(seed)
        return Observation(text=len(obs.text), admissible_actions=obs.admissible_actions, info=obs.info)  # type: ignore[arg-type]


class StrStepEnv(KeyDoorEnv):
    """Breaks the contract: ``step`` returns a str."""

    def step(self, action: str) -> StepResult:
        return "you moved"  # type: ignore[return-value]


@pytest.fixture
def bad_envs() -> Any:
    register("int-text-env", IntTextEnv, overwrite=True)
    register("str-step-env", StrStepEnv, overwrite=True)
    yield
    unregister("int-text-env")
    unregister("str-step-env")


CASES = {
    "unknown-env": (["--set", "env.name=no-such-env"], ["env.name", "no-such-env", "--import"]),
    "negative-horizon": (["--set", "env.kwargs.horizon=-1"], ["env.kwargs", "horizon must be"]),
    "unknown-kwarg": (["--set", "env.kwargs.bogus=1"], ["env.kwargs", "bogus", "accepted arguments"]),
    "heads": (["--set", "backend.num_heads=3"], ["backend.num_heads = 3", "hidden_size = 16", "e.g. 2"]),
    "max-tokens": (
        ["--set", "sampling.max_tokens=4096", "--set", "sampling.max_trajectory_tokens=8192"],
        ["sampling.max_tokens = 4096", "2048 positions", "backend.max_positions"],
    ),
    "int-observation": (["--set", "env.name=int-text-env"], ["ReplayableEnv contract", "int", "adapter"]),
    "str-step": (["--set", "env.name=str-step-env"], ["ReplayableEnv contract", "step()", "str"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("existing", [False, True], ids=["new-dir", "existing-dir"])
def test_errors_after_validation_exit_2_and_leave_the_directory_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad_envs: None, case: str, existing: bool
) -> None:
    run_dir = tmp_path / "run"
    if existing:
        run_dir.mkdir()
        (run_dir / "notes.txt").write_text("mine")
    args, expected = CASES[case]
    code = main(["train", "--run-dir", str(run_dir), *TINY, *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    for part in expected:
        assert part in err, (part, err)
    if existing:
        assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]
    else:
        assert not run_dir.exists()


def test_a_non_utf8_config_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "latin1.toml"
    cfg.write_bytes('[run]\nproject = "caf\xe9"\n'.encode("latin-1"))
    assert main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "not UTF-8" in err and "re-save it as UTF-8" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_directory_as_config_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(tmp_path), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "does not exist" not in err


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("optim.learning_rate=inf", "optim.learning_rate"),
        ("optim.learning_rate=nan", "optim.learning_rate"),
        ("tempo.td_updates=1e24", "tempo.td_updates"),
        ("tempo.td_updates=1e15", "tempo.td_updates"),
        ("store.capacity=2.0", "store.capacity"),
    ],
)
def test_non_finite_floats_and_whole_floats_for_ints_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str, field: str
) -> None:
    assert main(["train", "--run-dir", str(tmp_path / "run"), "--set", override]) == 2
    err = capsys.readouterr().err
    assert f"{field}: " in err and ("finite number" in err or "must be an integer" in err), err
    assert not (tmp_path / "run").exists()


def test_a_flaky_env_passes_the_preflight(tmp_path: Path) -> None:
    """The preflight tries a raising env again on a fresh one: a transient fault does not refuse the run."""
    from tempo_rl.training.config import load_config
    from tempo_rl.training.preflight import preflight

    calls = {"n": 0}

    class FirstStepFails(KeyDoorEnv):
        def step(self, action: str) -> StepResult:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("transient")
            return super().step(action)

    register("first-step-fails", FirstStepFails, overwrite=True)
    try:
        preflight(load_config(None, ["env.name=first-step-fails"]))
    finally:
        unregister("first-step-fails")
    assert calls["n"] == 2
    assert isinstance(FirstStepFails(), ReplayableEnv)
