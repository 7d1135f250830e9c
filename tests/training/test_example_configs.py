"""The shipped configs: they validate, the built-in main job equals its example file, and the ALFWorld + PyTRIO
example trains offline against the recording PyTRIO stub."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tempo_rl.training.config import load_config
from tempo_rl.training.run import DEFAULT_CONFIG

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "examples" / "configs"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.toml")), ids=lambda p: p.name)
def test_example_configs_validate(path: Path) -> None:
    load_config(path)


def test_builtin_main_job_is_the_example_file() -> None:
    assert DEFAULT_CONFIG.read_text() == (CONFIGS / "keydoor_local.toml").read_text()
    cfg = load_config(DEFAULT_CONFIG)
    assert cfg.backend.kind == "local" and cfg.env.name == "keydoor"
    assert cfg.tempo.warmup_updates > 0 and cfg.tempo.td_updates > 0 and cfg.warmstart.enabled


def _shared_games() -> Path:
    """The real valid_seen games vendored into the repository (tests/data/alfworld, MIT)."""
    games = REPO / "tests" / "data" / "alfworld" / "json_2.1.1" / "valid_seen"
    assert games.is_dir(), f"the vendored ALFWorld games are missing from {games}"
    return games


@pytest.mark.slow
@pytest.mark.alfworld
def test_alfworld_pytrio_config_trains_against_the_pytrio_stub(tmp_path: Path) -> None:
    pytest.importorskip("alfworld")
    pytest.importorskip("pytrio")
    pytest.importorskip("torch")
    from tempo_rl.backends.local import LocalTrainingClient, build_tiny_model, build_tokenizer
    from tempo_rl.backends.testing import RecordingPyTrioService
    from tempo_rl.training.run import env_corpus, train_run

    shared = _shared_games()
    games = tmp_path / "games"
    # one short game (look_at_obj_in_light) is enough to exercise restore, rollout, critic and the stub
    src = sorted(p for p in shared.iterdir() if p.name.startswith("look_at_obj_in_light"))[0]
    shutil.copytree(src, games / src.name)
    overrides = [
        f'env.games_dir="{games}"',
        f'env.eval_games_dir="{games}"',
        "env.kwargs={max_steps=4}",
        "tempo.max_rounds=4",
        "tempo.macro_rounds=2",
        "tempo.branches=2",
        "tempo.critic_samples=2",
        "tempo.endpoint_samples=1",
        "tempo.states_per_batch=2",
        "tempo.warmup_updates=1",
        "tempo.warmup_games_per_batch=1",
        "tempo.td_updates=1",
        "sampling.max_tokens=24",
        "sampling.critic_max_tokens=8",
        "sampling.critic_max_prompt_tokens=1500",
        "sampling.max_trajectory_tokens=3000",
        "run.loggers=[]",
    ]
    cfg = load_config(CONFIGS / "alfworld_pytrio.toml", overrides)
    tokenizer = build_tokenizer(env_corpus(cfg, games=1), vocab_size=600)
    model = build_tiny_model(len(tokenizer), hidden_size=32, num_layers=1)
    local = LocalTrainingClient(model, tokenizer, state_dir=tmp_path / "backend_states")  # not the cwd
    service = RecordingPyTrioService(local)
    run_dir = tmp_path / "run"
    summary = train_run(run_dir, cfg, service_client=service)
    assert summary["updates_done"] == 2
    methods = {name for name, _ in service.calls}
    assert {"create_lora_training_client", "save_state", "save_weights_and_get_sampling_client"} <= methods
    assert methods & {"sample", "sample_async"}  # rollouts and the critic sampled through the stub
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert records[1]["td/reused_states"] + records[1]["td/fresh_states"] == 2
