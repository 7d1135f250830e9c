"""The examples in the signal docstrings run and print what they claim."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["returns", "advantages", "critic", "prefix"])
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"tempo_rl.signals.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"no docstring example found in tempo_rl.signals.{name}"
    assert result.failed == 0
