"""Training config: defaults, TOML round trip, overrides, and errors that name the field."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tempo_rl.training.config import ConfigError, TrainConfig, apply_overrides, load_config, parse_override


def test_defaults_are_the_reference_settings() -> None:
    cfg = TrainConfig()
    t = cfg.tempo
    assert (t.macro_rounds, t.branches, t.critic_samples, t.max_rounds, t.endpoint_samples) == (
        10,
        4,
        4,
        50,
        2,
    )
    assert t.fresh_share == 0.25 and cfg.store.capacity == 256 and t.error == "l1"
    assert cfg.total_updates() == t.warmup_updates + t.td_updates


def test_toml_round_trip(tmp_path: Path) -> None:
    cfg = load_config(
        None, ["tempo.branches=8", "env.kwargs={horizon=30, keys=2}", 'run.loggers=["wandb:x"]']
    )
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml())
    assert load_config(path) == cfg
    assert tomllib.loads(cfg.to_toml())["tempo"]["branches"] == 8


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("tempo.max_rounds=45", "tempo.max_rounds"),  # T not a multiple of H
        ("tempo.branches=1", "tempo.branches"),
        ("tempo.fresh_share=1.5", "tempo.fresh_share"),
        ('tempo.error="l2"', "tempo.error"),
        ("tempo.bogus=1", "tempo.bogus"),
        ("optim.learning_rate=-1", "optim.learning_rate"),
        ('backend.kind="nope"', "backend"),
        ('backend.hidden_size="wide"', "backend.local.hidden_size"),
        ("sampling.max_tokens=20000", "sampling.max_tokens"),
    ],
)
def test_invalid_configs_name_the_field(override: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    assert field in str(info.value)


def test_t_multiple_of_h_message_suggests_a_fix() -> None:
    with pytest.raises(ConfigError, match=r"must be a multiple of tempo.macro_rounds \(H=10\); e.g. set"):
        load_config(None, ["tempo.max_rounds=45"])


def test_a_critic_of_its_own_needs_the_local_backend_and_the_generative_critic() -> None:
    assert load_config(None, ['tempo.critic_weights="own"']).tempo.critic_weights == "own"
    assert TrainConfig().tempo.critic_weights == "shared"  # TEMPO as published: one model for both
    with pytest.raises(ConfigError, match=r"needs backend.kind = 'local' \(got 'pytrio'\)"):
        load_config(
            None, ['tempo.critic_weights="own"', 'backend.kind="pytrio"', 'sampling.critic_answer="sampled"']
        )
    with pytest.raises(ConfigError, match=r"tempo.critic = 'generative' \(got 'oracle'\)"):
        load_config(None, ['tempo.critic_weights="own"', 'tempo.critic="oracle"'])
    with pytest.raises(ConfigError, match=r"tempo\.critic_weights"):
        load_config(None, ['tempo.critic_weights="separate"'])


def test_warmup_replay_needs_the_log_loss_critic() -> None:
    replay = ["tempo.warmup_replay=true"]
    assert load_config(None, [*replay, 'sampling.critic_answer="expected"']).tempo.warmup_replay
    with pytest.raises(
        ConfigError, match=r"sampling.critic_answer = 'expected' \(got 'generative' and 'sampled'\)"
    ):
        load_config(None, [*replay, 'sampling.critic_answer="sampled"'])
    with pytest.raises(ConfigError, match=r"tempo\.warmup_replay = false"):
        load_config(None, [*replay, 'sampling.critic_answer="constrained"'])


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[tempo\nbranches = 4")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_override_parsing() -> None:
    assert parse_override("tempo.branches=8") == (["tempo", "branches"], 8)
    assert parse_override("optim.learning_rate=5e-4") == (["optim", "learning_rate"], 5e-4)
    assert parse_override("env.name=keydoor") == (["env", "name"], "keydoor")  # bare words are strings
    assert parse_override("run.swanlab=true") == (["run", "swanlab"], True)
    assert parse_override("env.kwargs={horizon=30}") == (["env", "kwargs"], {"horizon": 30})
    for bad in ("tempo.branches", "=3", "a..b=1"):
        with pytest.raises(ConfigError):
            parse_override(bad)


@given(st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=8))
def test_overrides_set_exactly_the_given_value(h: int, m: int) -> None:
    data = apply_overrides({}, [f"tempo.macro_rounds={h}", f"tempo.max_rounds={h * m}"])
    assert data == {"tempo": {"macro_rounds": h, "max_rounds": h * m}}
    cfg = load_config(None, [f"tempo.macro_rounds={h}", f"tempo.max_rounds={h * m}"])
    assert cfg.tempo.max_rounds % cfg.tempo.macro_rounds == 0


def test_game_folders(tmp_path: Path) -> None:
    for name in ("b", "a"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "game.tw-pddl").write_text("{}")
    cfg = load_config(None, ["env.name=alfworld", f'env.games_dir="{tmp_path}"', "env.kwargs={max_steps=5}"])
    spec0, _ = cfg.env.train_game(0)
    spec1, _ = cfg.env.train_game(1)
    spec2, _ = cfg.env.train_game(2)
    assert spec0.kwargs["game_file"].endswith("a/game.tw-pddl") and spec0.kwargs["max_steps"] == 5
    assert spec1.kwargs["game_file"].endswith("b/game.tw-pddl")
    assert spec2 == spec0  # cycles
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("")
    alfworld = ["env.name=alfworld", "env.kwargs={max_steps=5}"]
    empty = load_config(None, [*alfworld, f'env.games_dir="{tmp_path / "c"}"'])  # no game.tw-pddl there
    with pytest.raises(ConfigError, match=r"env\.games_dir"):
        empty.env.train_game(0)


def test_merged_settings_read_as_one() -> None:
    cfg = load_config(None, [])
    assert cfg.optim.loss_fn == "importance_sampling" and cfg.optim.ppo_clip is None
    ppo = load_config(None, ["optim.ppo_clip=[0.8, 1.2]"])
    assert ppo.optim.loss_fn == "ppo" and ppo.optim.ppo_clip == (0.8, 1.2)
    assert ppo.optim.adam().eps == 1e-6 and ppo.optim.adam(0.5).learning_rate == 0.5
    assert not cfg.warmstart.enabled and load_config(None, ["warmstart.episodes=3"]).warmstart.enabled
    logs = load_config(None, ['run.loggers=["console", "wandb:my-project"]']).run
    assert logs.logs_to("console") and logs.logs_to("wandb") and not logs.logs_to("swanlab")
    assert logs.logger_project() == "my-project" and cfg.run.logger_project() is None
    for bad in ('run.loggers=["tensorboard"]', 'run.loggers=["console:x"]', 'run.loggers=["wandb:"]'):
        with pytest.raises(ConfigError, match=r"run\.loggers"):
            load_config(None, [bad])
    assert load_config(None, ["workers.ray=true"]).workers.ray is True
    assert load_config(None, ['workers.ray="auto"']).workers.ray == "auto"
