"""``tempo-rl data alfworld``: existing data, ALFWORLD_DATA, offline fail-fast, offline generation."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from alfworld_testlib import SMALL_GAME, copy_game, needs_alfworld

from tempo_rl.cli import data as data_cli
from tempo_rl.cli import main


def _tree_with_one_game(root: Path) -> Path:
    copy_game(SMALL_GAME, root)
    return root


def test_existing_data_is_listed_not_downloaded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree_with_one_game(tmp_path)
    monkeypatch.setattr(data_cli, "reachable", lambda *a: pytest.fail("must not touch the network"))
    assert main(["data", "alfworld", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 playable games" in out and "valid_seen: 1" in out and "look_at_obj_in_light=1" in out


def test_alfworld_data_env_var_is_the_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree_with_one_game(tmp_path)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    monkeypatch.setattr(data_cli, "reachable", lambda *a: pytest.fail("must not touch the network"))
    assert main(["data", "alfworld"]) == 0
    assert str(tmp_path) in capsys.readouterr().out


def test_offline_fails_fast_with_instructions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[float] = []

    def offline(host: tuple[str, int], timeout: float) -> str:
        calls.append(timeout)
        return "gaierror: [Errno -2] Name or service not known"

    monkeypatch.setattr(data_cli, "reachable", offline)
    t0 = time.perf_counter()
    assert main(["data", "alfworld", "--dir", str(tmp_path / "empty"), "--timeout", "1.5"]) == 3
    assert time.perf_counter() - t0 < 5 and calls == [1.5]
    err = capsys.readouterr().err
    assert "cannot reach github.com" in err and "ALFWORLD_DATA" in err and "--generate" in err
    assert "json_2.1.1" in err


def test_reachability_probe_gives_up_within_its_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def hang(*args: object, **kwargs: object) -> None:
        time.sleep(3)
        raise OSError("late")

    monkeypatch.setattr(socket, "create_connection", hang)
    t0 = time.perf_counter()
    why = data_cli.reachable(("example.invalid", 443), 0.3)
    assert why is not None and "0.3" in why and time.perf_counter() - t0 < 2

    def refuse(*args: object, **kwargs: object) -> None:
        raise ConnectionRefusedError("refused")

    monkeypatch.setattr(socket, "create_connection", refuse)
    assert "ConnectionRefusedError" in (data_cli.reachable(("example.invalid", 443), 1) or "")


def test_bare_data_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data"]) == 2
    assert "alfworld" in capsys.readouterr().out


@pytest.mark.slow
def test_generate_offline_games(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    needs_alfworld()
    assert main(["data", "alfworld", "--dir", str(tmp_path), "--generate", "1", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "generated 6 games (6 solvable)" in out and "train: 6" in out
