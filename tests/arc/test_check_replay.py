"""Both ARC adapters pass ``check_replay`` / ``tempo-rl check-replay`` (toolkit: Python 3.12+)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tempo_rl.envs import check_replay

GAMES = Path(__file__).parent / "games"


def test_arc_stub_passes_check_replay_by_replay_and_fork() -> None:
    report = check_replay("arc-stub:scale=8,max_steps=40", steps=30, trials=4, restores=3)
    assert report.ok, report.summary()
    assert report.replay_restores >= 4 and report.fork_restores == report.replay_restores
    assert report.steps_played > 0


def test_check_replay_catches_a_nondeterministic_arc_env() -> None:
    """The check can fail: an adapter whose frames depend on hidden global state is caught."""
    from tempo_rl.envs import register, unregister
    from tempo_rl.envs.arc import ArcStubEnv

    counter = {"resets": 0}

    class Leaky(ArcStubEnv):
        def _new_game(self, seed: int) -> None:
            counter["resets"] += 1
            super()._new_game(seed + counter["resets"])  # a different layout on every reset

    register("arc-leaky-test", Leaky)
    try:
        report = check_replay("arc-leaky-test:scale=8", steps=5, trials=1, restores=2)
    finally:
        unregister("arc-leaky-test")
    assert not report.ok
    assert any(d.method == "replay" for d in report.divergences)


def test_cli_check_replay_on_arc_stub(capsys: pytest.CaptureFixture[str]) -> None:
    from tempo_rl.cli import COMMANDS, main

    assert "check-replay" in COMMANDS
    code = main(["check-replay", "arc-stub:scale=8", "--steps", "20", "--trials", "2", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out.strip().splitlines()[-1])["ok"] is True


@pytest.mark.skipif(sys.version_info < (3, 12), reason="the arc-agi toolkit needs Python >= 3.12")
def test_arc_toolkit_passes_check_replay() -> None:
    pytest.importorskip("arc_agi", reason="the 'arc' extra (arc-agi toolkit) is not installed")
    spec = f"arc:game_id=lock,environments_dir={GAMES},scale=8,list_clicks=true,max_steps=40"
    report = check_replay(spec, steps=25, trials=3, restores=3)
    assert report.ok, report.summary()
    assert report.fork_restores == report.replay_restores >= 3
