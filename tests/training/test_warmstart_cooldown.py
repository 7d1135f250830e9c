"""``warmstart.cooldown``: the warm start's step size falls linearly over the last share of its optimiser steps."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tempo_rl.training.config import load_config
from tempo_rl.training.options import TrainerOptions
from tempo_rl.training.warmstart import cooldown_learning_rate


def test_cooldown_by_hand() -> None:
    # 6 steps, cooldown 0.5: c = 3 steps cool down, lr * (6 - k) / 4 for k = 3, 4, 5
    assert [cooldown_learning_rate(k, 6, 1.0, 0.5) for k in range(6)] == [1.0, 1.0, 1.0, 0.75, 0.5, 0.25]
    # all of them: c = 4, lr * (4 - k) / 5
    assert [cooldown_learning_rate(k, 4, 2.0, 1.0) for k in range(4)] == pytest.approx([1.6, 1.2, 0.8, 0.4])
    # a share that is not a whole number of steps rounds up: ceil(0.1 * 6) = 1 step, at lr / 2
    assert [cooldown_learning_rate(k, 6, 1.0, 0.1) for k in range(6)] == [1.0] * 5 + [0.5]
    # the benchmark's keydoor_rule: 3 epochs of 128 steps, the last epoch cools down (c = 128)
    rates = [cooldown_learning_rate(k, 384, 3e-3, 1 / 3) for k in range(384)]
    assert rates[:256] == [3e-3] * 256
    assert rates[256] == pytest.approx(3e-3 * 128 / 129) and rates[-1] == pytest.approx(3e-3 / 129)


def test_no_cooldown_is_constant() -> None:
    assert {cooldown_learning_rate(k, 5, 3e-3, 0.0) for k in range(5)} == {3e-3}


def test_step_outside_the_run_is_refused() -> None:
    with pytest.raises(ValueError, match=r"step 5 outside 0\.\.4"):
        cooldown_learning_rate(5, 5, 1.0, 0.5)
    with pytest.raises(ValueError, match="outside"):
        cooldown_learning_rate(-1, 5, 1.0, 0.5)


@given(
    total=st.integers(1, 500),
    cooldown=st.floats(0.0, 1.0),
    learning_rate=st.floats(1e-6, 1.0),
)
def test_cooldown_never_rises_stays_positive_and_cools_its_share(
    total: int, cooldown: float, learning_rate: float
) -> None:
    rates = [cooldown_learning_rate(k, total, learning_rate, cooldown) for k in range(total)]
    assert all(0 < r <= learning_rate for r in rates)
    assert all(b <= a for a, b in itertools.pairwise(rates))
    cooled = sum(r < learning_rate for r in rates)
    assert cooled == math.ceil(cooldown * total)


# over test_warmstart_expert's KeyDoor config (T = 48; that module needs torch, so it is imported where used):
# a warm start of 3 demos in batches of 2 for 2 epochs
OVERRIDES = [
    "warmstart.episodes=3",
    "warmstart.epochs=2",
    "warmstart.batch_size=2",
    "warmstart.learning_rate=0.01",
]


def test_warm_start_steps_at_the_cooled_rates(tmp_path: Path) -> None:
    """3 demos in batches of 2, 2 epochs: 4 optimiser steps, the last 2 cooled: 0.01, 0.01, 0.01 * 2/3,
    0.01 * 1/3."""
    pytest.importorskip("torch")
    from test_warmstart_expert import CONFIG

    from tempo_rl.training.run import build_trainer
    from tempo_rl.training.warmstart import warm_start

    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG)
    trainer = build_trainer(
        load_config(path, OVERRIDES), tmp_path / "run", options=TrainerOptions(warmstart_cooldown=0.5)
    )
    client = trainer.c.training_client
    seen: list[float] = []
    step = client.optim_step

    def recording(adam: Any) -> Any:
        seen.append(adam.learning_rate)
        return step(adam)

    client.optim_step = recording  # type: ignore[method-assign]
    metrics = warm_start(trainer)
    assert metrics["warmstart/optim_steps"] == 4
    assert seen == pytest.approx([0.01, 0.01, 0.01 * 2 / 3, 0.01 / 3])


def test_cooldown_is_a_share() -> None:
    assert TrainerOptions().warmstart_cooldown == 0.0  # the library default: a constant step size
    assert TrainerOptions(warmstart_cooldown=0.5).warmstart_cooldown == 0.5
    with pytest.raises(ValueError, match="warmstart_cooldown"):
        TrainerOptions(warmstart_cooldown=1.5)
