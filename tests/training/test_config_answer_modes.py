"""Settings that a critic answering by its expectation never reads are rejected, naming both fields."""

from __future__ import annotations

from typing import Any

import pytest

from tempo_rl.training.config import ConfigError, load_config, validate_config
from tempo_rl.training.run import DEFAULT_CONFIG

#: a non-default value of each setting that only acts on sampled critic answers
UNUSED = [
    ("sampling", "critic_max_tokens", 6),
    ("tempo", "error", "brier"),
    ("tempo", "critic_samples", 2),
    ("tempo", "endpoint_samples", 1),
]
EXPECTED = {"sampling": {"critic_answer": "expected"}}


def _config(section: str, name: str, value: Any, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"sampling": {"critic_answer": "expected"}, **extra}
    data.setdefault(section, {})
    data[section] = {**data[section], name: value}
    return data


@pytest.mark.parametrize(("section", "name", "value"), UNUSED)
def test_a_setting_of_sampled_answers_is_rejected_with_expected_answers(
    section: str, name: str, value: Any
) -> None:
    with pytest.raises(ConfigError) as info:
        validate_config(_config(section, name, value))
    message = str(info.value)
    assert f"{section}.{name} = {value!r} has no effect with sampling.critic_answer = 'expected'" in message
    assert f"drop {section}.{name}" in message and "set sampling.critic_answer = 'sampled'" in message


@pytest.mark.parametrize(("section", "name", "value"), UNUSED)
def test_the_same_setting_is_accepted_with_sampled_answers(section: str, name: str, value: Any) -> None:
    sampled = {**{section: {name: value}}, "sampling": {"critic_answer": "sampled"}}
    if section == "sampling":
        sampled["sampling"] = {"critic_answer": "sampled", name: value}
    assert getattr(getattr(validate_config(sampled), section), name) == value


def test_defaults_and_the_main_job_validate_with_expected_answers() -> None:
    assert validate_config(EXPECTED).sampling.critic_answer == "expected"
    main = load_config(DEFAULT_CONFIG)
    assert main.sampling.critic_answer == "expected" and main.tempo.critic == "generative"


def test_every_unused_setting_is_named_at_once() -> None:
    data: dict[str, Any] = {"sampling": {"critic_answer": "expected", "critic_max_tokens": 6}}
    data["tempo"] = {"error": "brier", "critic_samples": 8}
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    for field in ("sampling.critic_max_tokens", "tempo.error", "tempo.critic_samples"):
        assert f"{field} = " in str(info.value)
    assert "tempo.endpoint_samples" not in str(info.value)


def test_an_override_on_the_main_job_is_rejected() -> None:
    with pytest.raises(
        ConfigError, match=r"tempo\.error = 'brier' has no effect with sampling\.critic_answer"
    ):
        load_config(DEFAULT_CONFIG, ['tempo.error="brier"'])


def test_expected_answers_are_the_local_default_and_remote_backends_sample() -> None:
    assert validate_config({}).sampling.critic_answer == "expected"
    remote = validate_config({"backend": {"kind": "tinker", "base_model": "m"}})
    assert remote.sampling.critic_answer == "sampled"
    with pytest.raises(ConfigError, match=r"sampling\.critic_answer = 'expected' is for the local backend"):
        validate_config(
            {"backend": {"kind": "tinker", "base_model": "m"}, "sampling": {"critic_answer": "expected"}}
        )
