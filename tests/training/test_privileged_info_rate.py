"""Every update logs critic/privileged_info_rate, and training warns at the start when games lack it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from trainer_doubles import scripted_components, tiny_config

from tempo_rl.critic.privileged import PRIVILEGED_INFO_RATE, PrivilegedInfoWarning
from tempo_rl.envs import register, unregister
from tempo_rl.envs.keydoor import KeyDoorEnv
from tempo_rl.training.grpo import GrpoTrainer
from tempo_rl.training.tempo import TempoTrainer


class EvenSeedsOnly(KeyDoorEnv):
    """KeyDoor whose privileged information exists for even training seeds only (none for eval seeds)."""

    def privileged_info(self) -> str | None:
        seed = self._seed
        return super().privileged_info() if seed is not None and seed < 1000 and seed % 2 == 0 else None


@pytest.fixture(autouse=True)
def _registered() -> Iterator[None]:
    """Registered only while these tests run (collection must not leave it in the global registry)."""
    register("test-even-seeds-keydoor", EvenSeedsOnly, overwrite=True)
    yield
    unregister("test-even-seeds-keydoor")


def _rates(trainer_cls, *overrides: str) -> list[float]:
    cfg = tiny_config("env.name='test-even-seeds-keydoor'", *overrides)
    comps, _sampler, _training = scripted_components(cfg, p_right=0.5, undecided=0.5)
    logged: list[dict[str, float]] = []
    trainer = trainer_cls(cfg, comps, log=lambda step, m: logged.append(dict(m)))
    trainer.train()
    return [m[PRIVILEGED_INFO_RATE] for m in logged]


def test_warmup_updates_log_the_share_of_their_starts() -> None:
    # 2 games per warm-up update: seeds (0, 1) then (2, 3) -> 1 of 2 each. The evaluation after update 1
    # starts 2 games without privileged info (seeds 1000000+): counted, they would give update 2 (1+0)/(2+2).
    rates = _rates(
        TempoTrainer,
        "tempo.warmup_updates=2",
        "tempo.td_updates=1",
        "run.eval_every=1",
        "run.eval_episodes=2",
    )
    assert rates[:2] == [0.5, 0.5]
    assert 0.0 <= rates[2] <= 1.0  # TD: restored states keep their start's privileged info


def test_grpo_runs_log_it_too() -> None:
    rates = _rates(GrpoTrainer, "algorithm='grpo'", "grpo.updates=2", "grpo.games_per_batch=2")
    assert rates == [0.5, 0.5]  # seeds (0, 1), then (2, 3)


def test_keydoor_always_has_it() -> None:
    cfg = tiny_config("tempo.warmup_updates=1", "tempo.td_updates=0")
    comps, _s, _t = scripted_components(cfg, p_right=0.5, undecided=0.5)
    logged: list[dict[str, float]] = []
    TempoTrainer(cfg, comps, log=lambda step, m: logged.append(dict(m))).train()
    assert [m[PRIVILEGED_INFO_RATE] for m in logged] == [1.0]


def test_training_warns_at_the_start(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs the local extra")
    from tempo_rl.training.config import load_config
    from tempo_rl.training.run import train_run

    blind = load_config(None, ["env.name='test-even-seeds-keydoor'", "env.train_seed_start=1"])
    with pytest.warns(PrivilegedInfoWarning, match=r"first training game \(test-even-seeds-keydoor:1\)"):
        train_run(tmp_path / "blind", blind, max_updates=0, console=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivilegedInfoWarning)
        train_run(tmp_path / "seen", load_config(None, []), max_updates=0, console=False)
