"""A local run on a checkpoint directory (``backend.model_path``, as a user brings one) keeps its backend states
inside the run directory, as a run of the built-in model does, never in the current directory."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from tempo_rl.training.config import load_config
from tempo_rl.training.run import _create_clients, run_tokenizer


def _checkpoint(tmp_path: Path) -> Path:
    from tempo_rl.backends.local import build_tiny_model, build_tokenizer

    tok = build_tokenizer(["go to desk 1", "You see a desk 1."] * 10, vocab_size=300)
    out = tmp_path / "ckpt"
    build_tiny_model(len(tok), hidden_size=16, num_layers=1, num_heads=2).save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


@pytest.mark.parametrize("state_dir", [None, "explicit"])
def test_backend_states_of_a_checkpoint_model_live_in_the_run_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_dir: str | None
) -> None:
    model = _checkpoint(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    extra = f'\nstate_dir = "{tmp_path / state_dir}"' if state_dir else ""
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text(
        f'[env]\nname = "keydoor"\n\n[backend]\nkind = "local"\nmodel_path = "{model}"{extra}\n'
    )
    run_dir = tmp_path / "run"
    config = load_config(cfg_file)
    training, _, tok = _create_clients(config, run_dir, run_tokenizer(config, run_dir, resume=False), None)
    expected = tmp_path / state_dir if state_dir else run_dir / "backend_states"
    assert Path(training.inner.state_dir) == expected
    saved = Path(training.save_state("s0"))
    assert saved.parent == expected and not (cwd / "checkpoints").exists()
    assert len(tok) == len(training.get_tokenizer())  # the checkpoint's own tokenizer
