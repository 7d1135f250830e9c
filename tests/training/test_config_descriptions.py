"""Every config field's description says what the field does: no seed, work period, date or results page."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from tempo_rl.training.config import TrainConfig

HISTORY = re.compile(
    r"\bseeds? \d|\b(first|second|third|\w+th) stop\b|\b20\d\d-\d\d-\d\d\b|results\.md|\bmeasured\b|\blifted\b",
    re.IGNORECASE,
)


def _fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(_fields(ann, f"{prefix}{name}."))
        out.append((f"{prefix}{name}", field))
    return out


def test_the_history_pattern_flags_history_and_nothing_else() -> None:
    stop, date = "ninth " + "stop", "2026-" + "12-05"  # split: the product-words test reads this file too
    for text in ("lifted seed 3's critic", f"measured on the {stop}", f"as set on {date}", "docs/results.md"):
        assert HISTORY.search(text), text
    for text in (
        "random seed of the run",
        "stop tokens end a turn",
        "the seed of each game",
        "steps per update",
    ):
        assert not HISTORY.search(text), text


def test_no_description_names_a_seed_a_period_or_a_date() -> None:
    fields = _fields(TrainConfig)
    assert len(fields) > 50
    bad = {name: f.description for name, f in fields if f.description and HISTORY.search(f.description)}
    assert not bad, bad


def _leaves(model: type[BaseModel], prefix: str = "") -> list[str]:
    """The dotted names of the settings a user can set: every field, a sub-model's fields in its place (the
    backend, a union of models, counts as one)."""
    out: list[str] = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(_leaves(ann, f"{prefix}{name}."))
        else:
            out.append(f"{prefix}{name}")
    return out


def test_the_config_fits_on_one_screen() -> None:
    leaves = _leaves(TrainConfig)
    assert "backend" in leaves and "tempo.branches" in leaves
    assert len(leaves) <= 70, f"{len(leaves)} settings: {leaves}"


def test_every_setting_has_a_description() -> None:
    leaves = set(_leaves(TrainConfig))
    missing = [name for name, f in _fields(TrainConfig) if name in leaves and not f.description]
    assert not missing, missing
