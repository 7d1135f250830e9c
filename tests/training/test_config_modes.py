"""A setting that the configured mode never reads is rejected, naming it and the setting that rules it out; a job
that holds several algorithms' settings gives each algorithm its own (``config_for`` / ``configs_for``)."""

from __future__ import annotations

from typing import Any

import pytest

from tempo_rl.training.config import (
    ConfigError,
    config_for,
    configs_for,
    load_config,
    read_config_file,
    settings_without_effect,
    validate_config,
)
from tempo_rl.training.race import RACE_ALGORITHMS, RACE_CONFIG
from tempo_rl.training.run import DEFAULT_CONFIG

#: (section, field, a valid non-default value, the algorithms that read it)
SETTINGS = [
    ("tempo", "branches", 8, {"tempo"}),
    ("tempo", "td_updates", 3, {"tempo"}),
    ("store", "capacity", 16, {"tempo"}),
    ("grpo", "updates", 3, {"grpo", "gigpo"}),
    ("grpo", "group_size", 8, {"grpo", "gigpo"}),
    ("gigpo", "step_weight", 0.5, {"gigpo"}),
]
ALGORITHMS = ("tempo", "grpo", "gigpo")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(("section", "name", "value", "readers"), SETTINGS)
def test_a_setting_acts_under_its_algorithms_and_is_rejected_under_the_others(
    algorithm: str, section: str, name: str, value: Any, readers: set[str]
) -> None:
    data = {"algorithm": algorithm, section: {name: value}}
    if algorithm in readers:
        assert getattr(getattr(validate_config(data), section), name) == value
        return
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    message = str(info.value)
    assert f"{section}.{name} = {value!r} has no effect with algorithm = {algorithm!r}" in message
    assert f"drop {section}.{name}" in message and "or set algorithm = " in message


def test_every_algorithm_reads_the_episode_limit_the_return_range_and_the_critic_kind() -> None:
    # T is the episode's step limit of every algorithm; H needs to divide it only where macro-steps exist
    grpo = validate_config(
        {"algorithm": "grpo", "tempo": {"max_rounds": 48, "r_max": 2.0, "critic": "oracle"}}
    )
    assert (grpo.tempo.max_rounds, grpo.tempo.r_max, grpo.tempo.critic) == (48, 2.0, "oracle")
    assert grpo.tempo.macro_rounds == 10  # 48 is no multiple of 10: not an error without macro-steps
    with pytest.raises(ConfigError, match=r"must be a multiple of tempo\.macro_rounds"):
        validate_config({"algorithm": "tempo", "tempo": {"max_rounds": 48}})


def test_critic_settings_act_only_with_their_critic() -> None:
    with pytest.raises(
        ConfigError, match=r"tempo\.critic_rollouts = 8 has no effect with tempo\.critic = 'generative'"
    ):
        validate_config({"tempo": {"critic_rollouts": 8}})
    assert (
        validate_config({"tempo": {"critic": "monte_carlo", "critic_rollouts": 8}}).tempo.critic_rollouts == 8
    )
    with pytest.raises(
        ConfigError, match=r"tempo\.unparsed_endpoint = 0\.5 has no effect with tempo\.critic = 'oracle'"
    ):
        validate_config({"tempo": {"critic": "oracle", "unparsed_endpoint": 0.5}})


def test_every_unread_setting_is_named_once_each_on_its_own_line() -> None:
    data = {"algorithm": "grpo", "tempo": {"branches": 8, "error": "brier"}, "gigpo": {"gamma": 0.5}}
    found = settings_without_effect(
        validate_config({"algorithm": "tempo", "tempo": {"branches": 8}}).model_copy(
            update={"algorithm": "grpo"}
        )
    )
    assert [path for path, _ in found] == ["tempo.branches"]
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    lines = str(info.value).splitlines()[1:]
    assert [line.split(" = ")[0].strip() for line in lines] == [
        "tempo.branches",
        "tempo.error",
        "gigpo.gamma",
    ]


def test_switching_the_algorithm_of_a_file_leaves_out_its_settings_of_the_other() -> None:
    tempo = load_config(DEFAULT_CONFIG)
    grpo = load_config(DEFAULT_CONFIG, ['algorithm="grpo"'])
    assert grpo.algorithm == "grpo"
    assert grpo.tempo.max_rounds == tempo.tempo.max_rounds == 12  # read by both
    assert (
        tempo.tempo.macro_rounds == 4 and grpo.tempo.macro_rounds == 10
    )  # the file's TEMPO setting left out
    assert grpo.env == tempo.env and grpo.warmstart == tempo.warmstart and grpo.kl == tempo.kl
    # what the command line itself sets is never left out
    with pytest.raises(ConfigError, match=r"tempo\.branches = 8 has no effect with algorithm = 'grpo'"):
        load_config(DEFAULT_CONFIG, ['algorithm="grpo"', "tempo.branches=8"])
    # without a switch the file's own settings are held to its mode
    with pytest.raises(ConfigError, match=r"grpo\.updates = 3 has no effect with algorithm = 'tempo'"):
        load_config(DEFAULT_CONFIG, ["grpo.updates=3"])


def test_a_file_that_names_one_algorithm_and_sets_anothers_settings_is_rejected(tmp_path: Any) -> None:
    path = tmp_path / "mixed.toml"
    path.write_text('algorithm = "grpo"\n[tempo]\nbranches = 8\n[grpo]\nupdates = 3\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"tempo\.branches = 8 has no effect with algorithm = 'grpo'"):
        load_config(path)


def test_a_job_gives_each_algorithm_its_own_settings_and_the_config_round_trips() -> None:
    job = read_config_file(RACE_CONFIG)
    arms = configs_for(job, RACE_ALGORITHMS)
    tempo, grpo = arms["tempo"], arms["grpo"]
    assert (tempo.algorithm, grpo.algorithm) == ("tempo", "grpo")
    assert tempo.tempo.critic_weights == "own" and grpo.tempo.critic_weights == "shared"
    assert tempo.grpo.games_per_batch == 4 and grpo.grpo.games_per_batch == 2
    assert tempo.env == grpo.env and tempo.sampling == grpo.sampling and tempo.warmstart == grpo.warmstart
    assert tempo.tempo.max_rounds == grpo.tempo.max_rounds == 48
    for config in arms.values():  # what a run directory stores validates as it is
        assert load_config_text(config.to_toml()) == config
    assert config_for(job, "gigpo").grpo.group_size == 4


def test_a_job_setting_that_no_algorithm_reads_is_an_error() -> None:
    job = {**read_config_file(RACE_CONFIG), "gigpo": {"step_weight": 0.5}}
    with pytest.raises(
        ConfigError, match=r"gigpo\.step_weight: read by none of algorithm = 'tempo' / 'grpo'"
    ):
        configs_for(job, RACE_ALGORITHMS)


def load_config_text(text: str) -> Any:
    import tomllib

    return validate_config(tomllib.loads(text))
