"""The env registry and the spec syntax: errors list what is available / accepted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tempo_rl.envs import (
    EnvSpec,
    RecordedEnv,
    UnknownEnvError,
    available,
    make,
    parse_spec,
    register,
    unregister,
)
from tempo_rl.envs.knights import KnightsEnv
from tempo_rl.envs.registry import spec_string


def test_builtins_are_registered_and_make_returns_a_recorded_env():
    assert {"knights", "keydoor", "textworld", "gymnasium"} <= set(available())
    env = make("keydoor:horizon=30")
    assert isinstance(env, RecordedEnv) and env.spec == EnvSpec(name="keydoor", kwargs={"horizon": 30})
    assert make(EnvSpec(name="knights", kwargs={"size": 5}), place=4).spec == EnvSpec(
        name="knights", kwargs={"size": 5, "place": 4}
    )


def test_unknown_env_lists_available():
    with pytest.raises(UnknownEnvError) as info:
        make("chess")
    message = str(info.value)
    assert "chess" in message and "knights" in message and "keydoor" in message and "register" in message


def test_bad_kwargs_list_accepted_arguments():
    with pytest.raises(TypeError) as info:
        make("knights", colour="red")
    assert "colour" in str(info.value) and "size=6" in str(info.value) and "max_steps=None" in str(info.value)
    with pytest.raises(ValueError) as info2:
        make("knights", size=3)
    assert "size must be an int in 4..8" in str(info2.value) and "accepted arguments" in str(info2.value)
    with pytest.raises(ValueError, match="too short"):
        make("keydoor", horizon=14, keys=3)
    with pytest.raises(TypeError, match="required"):
        make("textworld")  # path is required


def test_parse_spec_examples_and_errors():
    assert parse_spec("knights") == EnvSpec(name="knights")
    assert parse_spec("keydoor:horizon=40") == EnvSpec(name="keydoor", kwargs={"horizon": 40})
    assert parse_spec("gymnasium:id=FrozenLake-v1,is_slippery=false,x=0.5,n=null") == EnvSpec(
        name="gymnasium", kwargs={"id": "FrozenLake-v1", "is_slippery": False, "x": 0.5, "n": None}
    )
    assert parse_spec("textworld:path=games/g 1.z8") == EnvSpec(
        name="textworld", kwargs={"path": "games/g 1.z8"}
    )
    for bad in ("", "keydoor:horizon", "keydoor:=3", "keydoor:a=1,a=2"):
        with pytest.raises(ValueError):
            parse_spec(bad)


@given(
    st.dictionaries(
        st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
        st.one_of(
            st.integers(-1000, 1000),
            st.booleans(),
            st.from_regex(r"[A-Za-z][A-Za-z_./-]{0,10}", fullmatch=True),
        ),
        max_size=4,
    )
)
def test_spec_string_roundtrip(kwargs):
    kwargs = {k: v for k, v in kwargs.items() if v not in ("true", "false", "null")}
    spec = EnvSpec(name="env", kwargs=kwargs)
    assert parse_spec(spec_string(spec)) == spec


def test_register_rules():
    with pytest.raises(ValueError, match="already registered"):
        register("knights", KnightsEnv)
    with pytest.raises(ValueError, match="contain no"):
        register("a:b", KnightsEnv)
    with pytest.raises(TypeError, match="callable"):
        register("thing", 42)  # type: ignore[arg-type]
    register("lazy-knights", "tempo_rl.envs.knights:KnightsEnv")
    try:
        assert isinstance(make("lazy-knights").env, KnightsEnv)
    finally:
        unregister("lazy-knights")


def test_find_games_lists_matching_files_sorted_and_names_an_empty_folder(tmp_path) -> None:
    from tempo_rl.envs.games import NoGamesError, find_games

    for name in ("b", "a", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "game.tw-pddl").write_text("{}")
    (tmp_path / "a" / "other.json").write_text("{}")
    files = find_games(str(tmp_path), "**/game.tw-pddl")
    assert [f.split("/")[-2] for f in files] == ["a", "b", "c"]
    with pytest.raises(NoGamesError, match=r"no game file matches '\*\.z8' under"):
        find_games(str(tmp_path), "*.z8")
