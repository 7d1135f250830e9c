"""``tempo-rl train`` argument handling (no training)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tempo_rl.cli import build_parser, main


def test_train_is_registered_with_its_options() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["train", "--config", "x.toml", "--set", "tempo.branches=8", "--set", "run.seed=3"]
    )
    assert args.command == "train" and args.overrides == ["tempo.branches=8", "run.seed=3"]


def test_invalid_config_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[tempo]\nmacro_rounds = 10\nmax_rounds = 45\n")
    assert main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "tempo.max_rounds" in err and "tempo.macro_rounds" in err
    assert not (tmp_path / "run").exists()


def test_unknown_override_field_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["train", "--set", "tempo.brnaches=8", "--run-dir", str(tmp_path / "r")]) == 2
    assert "tempo.brnaches" in capsys.readouterr().err


def test_resume_needs_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "not a tempo-rl run directory" in capsys.readouterr().err


def test_refuses_to_overwrite_an_existing_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.toml").write_text("")
    assert main(["train", "--run-dir", str(tmp_path)]) == 2
    assert "--resume" in capsys.readouterr().err
    # --overwrite would start anew; with an invalid override it stops before touching the directory
    assert main(["train", "--run-dir", str(tmp_path), "--overwrite", "--set", "tempo.branches=0"]) == 2
    assert (tmp_path / "config.toml").exists()


def test_train_imports_user_modules_before_building_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--import MODULE`` makes a user's env registration visible to ``train`` (as for ``check-replay``)."""
    from tempo_rl.cli import main
    from tempo_rl.envs.registry import available, unregister

    (tmp_path / "my_env_module_for_train.py").write_text(
        "from tempo_rl.envs import register\n"
        "from tempo_rl.envs.keydoor import KeyDoorEnv\n"
        "register('my-keydoor-for-train', KeyDoorEnv, overwrite=True)\n"
    )
    monkeypatch.chdir(tmp_path)
    try:
        # an invalid config (T not a multiple of H) stops the run after the import, before any training
        rc = main(
            [
                "train",
                "--import",
                "my_env_module_for_train",
                "--set",
                "env.name=my-keydoor-for-train",
                "--set",
                "tempo.macro_rounds=7",
                "--run-dir",
                str(tmp_path / "run"),
            ]
        )
        assert rc == 2
        assert "my-keydoor-for-train" in available()
        assert "macro_rounds" in capsys.readouterr().err
        assert main(["train", "--import", "no_such_module_xyz"]) == 2
        assert "no_such_module_xyz" in capsys.readouterr().err
    finally:
        unregister("my-keydoor-for-train")
