"""A checkpoint taken outside an update (after the warm start / initial evaluation) saves the live RNG state.

The initial evaluation draws one sampling seed from the trainer RNG; the checkpoint written right after it must
hold the RNG *after* that draw, or a run resumed from it would reuse the seed and diverge from an uninterrupted
run (review H12).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from test_train_local import _config_text

from tempo_rl.training.checkpoint import latest_checkpoint
from tempo_rl.training.config import load_config
from tempo_rl.training.run import train_run


@pytest.mark.slow
def test_checkpoint_after_initial_eval_holds_the_advanced_rng(tmp_path: Path) -> None:
    text = _config_text(warmup=0, td=0, warmstart=False).replace(
        "checkpoint_every = 1", "checkpoint_every = 1\neval_every = 1\neval_episodes = 1"
    )
    cfg_file = tmp_path / "tiny.toml"
    cfg_file.write_text(text)
    config = load_config(cfg_file)
    train_run(tmp_path / "run", config, console=False)
    ckpt = latest_checkpoint(tmp_path / "run")
    assert ckpt is not None and ckpt.trainer_state["warmstart_done"] is True
    # the evaluation's one rollout drew exactly one seed: integers(0, 2**31 - 1) from PCG64(run.seed)
    expected = np.random.Generator(np.random.PCG64(config.run.seed))
    fresh_state = dict(expected.bit_generator.state)
    expected.integers(0, 2**31 - 1)
    assert ckpt.trainer_state["rng_state"] != fresh_state, "checkpoint saved the RNG before the eval draw"
    assert ckpt.trainer_state["rng_state"] == dict(expected.bit_generator.state)
