"""docs/api/index.md lists, per package, exactly the names its ``__all__`` exports."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "api" / "index.md"
PACKAGES = ["signals", "envs", "rollout", "critic", "backends", "training"]


def _documented() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    current = None
    for line in PAGE.read_text().splitlines():
        heading = re.match(r"^## `tempo_rl\.(\w+)`", line)
        if heading:
            current = heading.group(1)
            out[current] = set()
        elif current and line.startswith("| `"):
            out[current].add(line.split("`")[1])
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_the_public_api_page_lists_each_package_all(package: str) -> None:
    exported = set(importlib.import_module(f"tempo_rl.{package}").__all__)
    documented = _documented().get(package)
    assert documented is not None, f"docs/api/index.md has no section for tempo_rl.{package}"
    assert documented == exported, (
        f"tempo_rl.{package}: documented but not exported {sorted(documented - exported)}, "
        f"exported but not documented {sorted(exported - documented)}"
    )
