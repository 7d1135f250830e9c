"""Importing the backend and rollout packages pulls in no heavy optional dependency."""

from __future__ import annotations

import subprocess
import sys


def test_no_heavy_imports() -> None:
    code = (
        "import sys\n"
        "import tempo_rl.backends, tempo_rl.backends.local, tempo_rl.backends.testing\n"
        "import tempo_rl.backends.pytrio, tempo_rl.backends.tinker, tempo_rl.rollout\n"
        "mods = ('torch', 'transformers', 'tokenizers', 'pytrio', 'tinker', 'peft')\n"
        "heavy = [m for m in mods if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "", f"imported at package import time: {out.stdout.strip()}"
