"""Config fuzzing: every invalid combination of field values yields a ConfigError naming each bad field.

Invalid values are derived from the pydantic model itself (each field's type, ``Literal`` choices and numeric /
length bounds), so a field added later is fuzzed without touching this file.
"""

from __future__ import annotations

import math
import re
import types
import typing
from typing import Any, Literal

import annotated_types as at
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tempo_rl.training.config import ConfigError, TrainConfig, load_config, validate_config


def _bounds(field: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for meta in field.metadata:
        for name in ("ge", "gt", "le", "lt", "min_length"):
            value = getattr(meta, name, None)
            if value is not None and isinstance(meta, at.BaseMetadata):
                out[name] = value
    return out


def _invalid_values(annotation: Any, field: Any) -> list[Any]:
    """Values that must fail validation for a field of this annotation and these bounds."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):  # X | None: what is invalid for X (None is valid)
        inner = [a for a in args if a is not type(None)]
        if set(inner) == {bool, str}:  # a switch or an address
            return [123, ["x"]]
        return _invalid_values(inner[0], field) if len(inner) == 1 else ["not-a-value"]
    if origin is Literal:
        return ["not-" + "-".join(map(str, args)), 12345]
    bounds = _bounds(field)
    if annotation is bool:
        return ["maybe", 2, [True]]
    if annotation is int or annotation is float:
        bad: list[Any] = ["ten", [1], {"a": 1}]
        if annotation is int:
            bad.append(1.5)
        step = 1 if annotation is int else 0.5
        if "ge" in bounds:
            bad.append(bounds["ge"] - step)
        if "gt" in bounds:
            bad.append(bounds["gt"])
        if "le" in bounds:
            bad.append(bounds["le"] + step)
        if "lt" in bounds:
            bad.append(bounds["lt"])
        if annotation is float and bounds:
            bad.append(math.nan)
        return bad
    if annotation is str:
        bad = [123, ["x"]]
        if bounds.get("min_length", 0) >= 1:
            bad.append("")
        return bad
    if origin is tuple:
        return ["x", [0.1], [2.0, 0.5], [-1.0, 2.0]]
    if origin is list:
        return ["not-a-list", ["not-an-item"], 3]
    if origin is dict or annotation is dict:
        return ["not-a-table", 3, ["a"]]
    raise AssertionError(f"no invalid values known for {annotation!r}: extend _invalid_values")


def _catalogue() -> dict[str, list[Any]]:
    """``dotted field path -> invalid values`` for every field of every section of TrainConfig."""
    out: dict[str, list[Any]] = {}
    for section, sfield in TrainConfig.model_fields.items():
        ann = sfield.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            for name, f in ann.model_fields.items():
                out[f"{section}.{name}"] = _invalid_values(f.annotation, f)
            out[f"{section}.no_such_field"] = [1]
        elif section == "backend":
            continue  # validated by the backend config (see test_bad_backend_fields_are_named)
        else:
            out[section] = _invalid_values(ann, sfield)
    return out


CATALOGUE = _catalogue()


def test_the_catalogue_covers_every_field() -> None:
    for section, sfield in TrainConfig.model_fields.items():
        ann = sfield.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            for name in ann.model_fields:
                assert CATALOGUE[f"{section}.{name}"], f"{section}.{name} has no invalid value"
    assert len(CATALOGUE) > 60


def _with(data: dict[str, Any], path: str, value: Any) -> None:
    node = data
    *head, last = path.split(".")
    for part in head:
        node = node.setdefault(part, {})
    node[last] = value


@st.composite
def invalid_combos(draw: st.DrawFn) -> dict[str, Any]:
    paths = draw(st.lists(st.sampled_from(sorted(CATALOGUE)), min_size=1, max_size=6, unique=True))
    return {p: draw(st.sampled_from(CATALOGUE[p])) for p in paths}


@settings(max_examples=250)
@given(invalid_combos())
def test_every_invalid_field_combination_names_each_bad_field(combo: dict[str, Any]) -> None:
    data: dict[str, Any] = {}
    for path, value in combo.items():
        _with(data, path, value)
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    message = str(info.value)
    for path in combo:
        named = re.search(rf"(^|\s){re.escape(path)}[.:]", message, re.MULTILINE)  # a.b: or a.b.0: (items)
        assert named, f"{path}={combo[path]!r} not named in:\n{message}"
    assert "Traceback" not in message


CROSS_FIELD = [
    ({"tempo": {"max_rounds": 50, "macro_rounds": 7}}, ["tempo.max_rounds", "tempo.macro_rounds"]),
    ({"optim": {"ppo_clip": [1.5, 1.2]}}, ["optim.ppo_clip"]),
    ({"optim": {"betas": [0.9, 1.0]}}, ["optim.betas"]),
    ({"tempo": {"unparsed_endpoint": 2.0}}, ["tempo.unparsed_endpoint"]),
    ({"sampling": {"max_tokens": 500, "max_trajectory_tokens": 400}}, ["sampling.max_tokens"]),
]


@pytest.mark.parametrize(("data", "names"), CROSS_FIELD)
def test_cross_field_rules_name_their_fields(data: dict[str, Any], names: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    for name in names:
        assert name in str(info.value)


@settings(max_examples=60)
@given(h=st.integers(1, 30), m=st.integers(1, 10), extra=st.integers(1, 29))
def test_any_t_that_is_not_a_multiple_of_h_is_refused(h: int, m: int, extra: int) -> None:
    t = h * m + (extra % h if h > 1 else 0)
    if t % h == 0:
        validate_config({"tempo": {"max_rounds": t, "macro_rounds": h}})
        return
    with pytest.raises(ConfigError, match=r"tempo\.max_rounds .*tempo\.macro_rounds"):
        validate_config({"tempo": {"max_rounds": t, "macro_rounds": h}})


@pytest.mark.parametrize(
    ("backend", "name"),
    [
        ({"kind": "local", "hidden_size": 2}, r"backend\.(local\.)?hidden_size:"),
        ({"kind": "local", "typo": 1}, r"backend\.(local\.)?typo:"),
        ({"kind": "no-such-backend"}, r"backend(\.kind)?:"),
    ],
)
def test_bad_backend_fields_are_named(backend: dict[str, Any], name: str) -> None:
    # the backend table is a tagged union; the message may carry the tag (backend.local.hidden_size)
    with pytest.raises(ConfigError, match=name):
        validate_config({"backend": backend})


def test_command_line_overrides_are_validated_the_same_way() -> None:
    with pytest.raises(ConfigError, match=r"tempo\.branches:"):
        load_config(None, ["tempo.branches=1"])
    with pytest.raises(ConfigError, match=r"run\.eval_episodes:"):
        load_config(None, ["run.eval_episodes=-1"])
    with pytest.raises(ConfigError, match="key=value"):
        load_config(None, ["tempo.branches"])
