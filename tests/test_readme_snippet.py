"""The README's "use the signals from your own GRPO code" snippet runs as written.

The snippet is the fenced ```python block right after the line ``<!-- signals-snippet -->`` in README.md; its
source of truth is ``docs/snippets/signals_quickstart.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- signals-snippet -->"
SNIPPET_FILE = REPO_ROOT / "docs" / "snippets" / "signals_quickstart.py"


def extract_snippet(readme: str) -> str:
    """The body of the ```python fenced block right after the marker line; ValueError if either is missing."""
    lines = readme.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == MARKER)
    except StopIteration:
        raise ValueError(f"README.md has no line {MARKER!r} marking the signals snippet") from None
    rest = "\n".join(lines[start + 1 :])
    match = re.match(r"\s*```python[ \t]*\n(.*?)\n```", rest, flags=re.DOTALL)
    if match is None:
        raise ValueError(f"no ```python fenced block directly follows {MARKER!r} in README.md")
    return match.group(1)


def _run(source: str, name: str) -> None:
    exec(compile(source, name, "exec"), {"__name__": "__snippet__"})


def test_readme_signals_snippet_runs() -> None:
    snippet = extract_snippet((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    assert "tempo_rl.signals" in snippet
    _run(snippet, "README.md:signals-snippet")


def test_snippet_source_file_runs() -> None:
    _run(SNIPPET_FILE.read_text(encoding="utf-8"), str(SNIPPET_FILE))


def test_extractor_rejects_missing_marker_or_block() -> None:
    with pytest.raises(ValueError, match="no line"):
        extract_snippet("# title\n```python\nx = 1\n```\n")
    with pytest.raises(ValueError, match="no ```python fenced block"):
        extract_snippet(f"{MARKER}\n\nSome prose.\n```python\nx = 1\n```\n")
    assert extract_snippet(f"{MARKER}\n\n```python\nx = 1\n```\n") == "x = 1"


def test_snippet_asserts_can_fail() -> None:
    """The snippet's asserts are real: corrupting one worked number makes it fail."""
    source = SNIPPET_FILE.read_text(encoding="utf-8").replace(
        "[0.15, -0.25, 0.55, -0.45]", "[0.15, -0.25, 0.55, 0.45]"
    )
    with pytest.raises(AssertionError):
        _run(source, "corrupted-snippet")


def test_every_python_block_in_the_readme_runs() -> None:
    """Not only the signals snippet: every ```python block of the README is executed as written."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python[ \t]*\n(.*?)\n```", readme, flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) >= 2, "the README should show the signals and the environment snippets"
    for i, block in enumerate(blocks):
        _run(block, f"README.md:python-block-{i}")


def test_readme_is_at_most_100_lines_besides_the_snippet() -> None:
    """The README is for users: at most 100 lines, not counting the marker and the signals snippet's
    fenced block; measurement history belongs in docs/results.md."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    snippet_lines = len(extract_snippet(readme).splitlines()) + 3  # the marker and the two fences
    counted = len(readme.splitlines()) - snippet_lines
    assert counted <= 100, f"README.md has {counted} lines besides the signals snippet; move detail to docs/"
