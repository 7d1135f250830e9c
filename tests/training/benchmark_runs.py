"""Run a script of ``benchmarks/`` as a user does and read the one JSON line it must print."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(script: str, *args: str, timeout: int = 600) -> dict[str, Any]:
    """``python benchmarks/<script> <args>`` from the repository root; fails unless it exits 0 and prints
    exactly one non-empty line, a JSON object, which is returned."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout
    figures = json.loads(lines[0])
    assert isinstance(figures, dict), lines[0]
    return figures


def load_benchmark(script: str) -> ModuleType:
    """``benchmarks/<script>.py`` imported as a module (a script, not part of the package), registered in
    ``sys.modules`` under ``<script>_benchmark`` so that its dataclasses resolve their module."""
    spec = importlib.util.spec_from_file_location(f"{script}_benchmark", REPO / "benchmarks" / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
