"""Every example in ``examples/`` runs to completion with its CI settings (``--quick``), as a subprocess.

Examples whose optional dependency is missing are skipped with the reason (TRL for ``signals_in_trl.py``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env.setdefault("HF_HUB_OFFLINE", "1")
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_json(stdout: str) -> dict[str, object]:
    return json.loads(stdout.strip().splitlines()[-1])


def test_every_example_is_covered_here() -> None:
    tested = {"custom_env.py", "arc_agi3_stub.py", "signals_in_trl.py", "train_alfworld_pytrio.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="training examples need the 'local' extra (torch)"
)


@pytest.mark.slow
@needs_torch
def test_custom_env_example() -> None:
    done = run_example("custom_env.py", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "check-replay my-lock" in done.stdout and ": OK (" in done.stdout
    summary = last_json(done.stdout)
    assert summary["updates_done"] == 3 and summary["td_updates"] == 2


@pytest.mark.slow
@needs_torch
def test_arc_agi3_stub_example() -> None:
    done = run_example("arc_agi3_stub.py", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "frame (8x8, one hex colour per cell" in out
    assert "restored at depth 5 by replay and by fork" in out
    assert "check-replay arc-stub" in out and ": OK (" in out
    summary = last_json(out)
    assert summary["updates_done"] == 3 and summary["states_reused_total"] >= 1


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is not installed (pip install trl)")
def test_signals_in_trl_example() -> None:
    done = run_example("signals_in_trl.py", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert last_json(done.stdout)["trained_steps"] >= 1


@pytest.mark.slow
@needs_torch
@pytest.mark.skipif(
    importlib.util.find_spec("alfworld") is None or importlib.util.find_spec("pytrio") is None,
    reason="needs the 'alfworld' and 'pytrio' extras",
)
def test_train_alfworld_pytrio_example_against_the_stub() -> None:
    done = run_example("train_alfworld_pytrio.py", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "generated 1 offline ALFWorld game(s)" in done.stdout
    summary = last_json(done.stdout)
    calls = summary["pytrio_stub_calls"]
    assert isinstance(calls, dict)
    assert summary["updates_done"] == 2
    assert calls["create_lora_training_client"] == 1 and calls["sample_async"] > 0
    assert calls["forward_backward"] >= 1 and calls["optim_step"] == calls["forward_backward"]
