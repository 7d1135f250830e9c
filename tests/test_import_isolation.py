"""``import tempo_rl`` (and the signals and envs packages) must not import any optional heavy dependency.

Checked in a fresh subprocess, because this test session itself may already have imported torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

HEAVY = (
    "torch",
    "textworld",
    "alfworld",
    "pytrio",
    "tinker",
    "ray",
    "gymnasium",
    "transformers",
    "matplotlib",
)

PROBE = textwrap.dedent(
    """
    import json, sys
    import tempo_rl, tempo_rl.signals, tempo_rl.envs
    from tempo_rl.signals import branch_returns, critic_rewards, group_advantages, td_targets
    import numpy as np
    returns = branch_returns(np.array([0.0, 0.0, 1.0, 0.0]), [0.6, 0.2, 0.9, 0.3], [False, False, True, True])
    adv = group_advantages(critic_rewards([0.5, float("nan"), 0.45, 0.9], td_targets(returns)))
    assert type(adv).__module__ == "numpy", type(adv)
    heavy = %r
    print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
    """
)


def test_core_imports_pull_in_no_optional_dependency() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    leaked = json.loads(proc.stdout.strip().splitlines()[-1])
    assert leaked == [], f"importing tempo_rl / tempo_rl.signals / tempo_rl.envs imported {leaked}"


def test_probe_detects_a_heavy_import() -> None:
    """Guard against a probe that cannot fail: the same check sees a deliberately imported module."""
    probe = (
        "import json, sys, email.mime.text\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('email'))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(proc.stdout.strip()) != []
