"""``tempo-rl check-replay``: passes on every built-in env, fails (exit 1) on a non-deterministic one."""

from __future__ import annotations

import json
import random

import pytest

from tempo_rl.cli import main
from tempo_rl.envs import Observation, ReplayableEnv, StepResult, register, unregister


class Dice(ReplayableEnv):
    """Deliberately non-deterministic: rolls an unseeded die on every step."""

    def reset(self, seed: int | None = None) -> Observation:
        return Observation("Roll the die.", ("roll",))

    def step(self, action: str) -> StepResult:
        return StepResult(Observation(f"You rolled {random.randint(1, 6_000_000)}.", ("roll",)))


@pytest.mark.parametrize(
    "spec",
    [
        "knights",
        "knights:feedback=final,size=5,place=4",
        "keydoor",
        "keydoor:horizon=60",
        "gymnasium:id=FrozenLake-v1",
    ],
)
def test_check_replay_passes_on_builtin_envs(spec, capsys):
    assert main(["check-replay", spec, "--steps", "60", "--trials", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["replay_restores"] >= 3 and report["divergences"] == []


def test_check_replay_passes_on_a_textworld_game(z8_game, capsys):
    assert main(["check-replay", f"textworld:path={z8_game}", "--steps", "20", "--trials", "1"]) == 0
    assert "OK" in capsys.readouterr().out


def test_check_replay_catches_a_random_env(capsys):
    register("test-dice", Dice, overwrite=True)
    try:
        code = main(["check-replay", "test-dice", "--steps", "10", "--trials", "2", "--restores", "2"])
    finally:
        unregister("test-dice")
    out = capsys.readouterr().out
    assert code == 1 and "FAILED" in out and "replay diverged at step 1 after action 'roll'" in out


def test_check_replay_bad_spec_lists_what_is_available(capsys):
    assert main(["check-replay", "chess"]) == 2
    err = capsys.readouterr().err
    assert "unknown env 'chess'" in err and "keydoor" in err and "knights" in err
    assert main(["check-replay", "keydoor:speed=3"]) == 2
    assert "accepted arguments: horizon=40" in capsys.readouterr().err


def test_check_replay_imports_a_user_module(tmp_path, monkeypatch, capsys):
    (tmp_path / "h2_user_envs.py").write_text(
        "from tempo_rl.envs import register\n"
        "from tempo_rl.envs.knights import KnightsEnv\n"
        "register('user-knights', KnightsEnv, overwrite=True)\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["check-replay", "user-knights:size=5", "--import", "h2_user_envs", "--trials", "2"])
    finally:
        unregister("user-knights")
    assert code == 0 and "OK" in capsys.readouterr().out
    assert main(["check-replay", "knights", "--import", "no_such_module_h2"]) == 2
