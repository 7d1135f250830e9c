"""The product speaks of the product: no words about how it was built in its tree.

A reader of the code, the docs, the tests or the benchmarks should learn what the library does and what was
measured (and how to reproduce it), not which work period, ticket, machine or day a change came from. This test
scans every text file under ``src/``, ``docs/``, ``benchmarks/``, ``tests/`` and ``examples/``, plus ``README.md``
and ``mkdocs.yml``, and every file *name* there (result files are named for what they hold), for a short list of
patterns. Data files under ``benchmarks/results/`` are checked by name only (their JSON holds run metadata).

A date is allowed in one place: a table row of ``docs/results.md`` (or of a ``CHANGELOG``) may give the date a
figure was measured, once per row.

Each pattern is pinned by examples it must flag and normal words it must leave alone
(:func:`test_patterns_flag_work_words` and :func:`test_patterns_leave_normal_words`).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: what is scanned: folders (every file below them) and single files, relative to the repository root
SCANNED = ("src", "docs", "benchmarks", "tests", "examples", "README.md", "mkdocs.yml")
#: folders whose data files are checked by name only (the run metadata inside is not prose)
NAMES_ONLY = ("benchmarks/results",)
#: files whose table rows may carry one date each (when the figure in that row was measured)
DATED_TABLES = ("docs/results.md", "CHANGELOG.md")
#: build and cache output below the scanned folders, not part of the product
SKIPPED_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "site", ".hypothesis"}

_ORDINALS = (
    r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|"
    r"fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|\d+(?:st|nd|rd|th)"
)
#: what may follow "stop" when it is the sampler's stop (a stop token, the stop reason, ...), not a work period
_STOP_AS_SAMPLING = (
    r"(?![-_ ]?(?:tokens?|strings?|ids?|reasons?|sequences?|conditions?|criteri\w*|words?|rules?|sets?)\b)"
)

#: name -> compiled pattern (case-insensitive); each names one way of speaking about the work
PATTERNS: dict[str, re.Pattern[str]] = {
    "ordinal work stop": re.compile(
        rf"\b(?:{_ORDINALS}|this|last|previous|earlier|next|each|every)[- ]stop(?:'s|s)?\b{_STOP_AS_SAMPLING}",
        re.IGNORECASE,
    ),
    "numbered stop": re.compile(r"\bstops? #?\d+\b", re.IGNORECASE),
    "issue number": re.compile(r"\bissues?[- ]#?\d+\b|(?<![\w&#/=.:-])#\d{2,4}\b(?![0-9a-f])", re.IGNORECASE),
    "work session": re.compile(
        r"\b(?:this|that|previous|earlier|later|next|last|another) sessions?\b(?![-_ ]?(?:scoped?|fixtures?|ids?)\b)"
        r"|\bthe session (?:that|which|who|where|when|before|after)\b|\bsessions? ago\b",
        re.IGNORECASE,
    ),
    "a machine by name": re.compile(
        r"\b(?:this|that|the other|a second|the second|the first|the knights|the keydoor\w*) machine\b"
        r"|\bmachine[-_ ]?\d{1,2}\b",
        re.IGNORECASE,
    ),
    "a ticket's bar": re.compile(
        r"\bissue(?: \d+)?'s bars?\b|\bbars? (?:are|is|was|were) issue\b|\bthe \d*\.\d+ bar\b"
        r"|\b(?:its|their|every|each|one|all) bars?\b(?! (?:charts?|plots?|graphs?)\b)"
        r"|\b(?:clears?|cleared|meets?|met|miss(?:es|ed)?) (?:the|a|every|each|one|its|all) bars?\b",
        re.IGNORECASE,
    ),
    "date": re.compile(
        r"\b20\d\d-[01]\d-[0-3]\d\b|\b(?:since|until|as of) 20\d\d\b"
        r"|\b(?:since|until|on|as of) (?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]* \d{1,2}\b",
        re.IGNORECASE,
    ),
}

#: pattern name -> texts it must flag, stored in ROT13 so that this file does not itself read as notes
#: about the work (digits and punctuation are unchanged)
_FLAGGED_ROT13 = {
    "ordinal work stop": [
        "zrnfherq ng gur gjrysgu fgbc",
        "fvapr gur avagu fgbc gur pevgvp",
        "(guveq-fgbc) napubef",
        "gur friragu fgbc'f pevgvp",
        "gur 4gu fgbc sbhaq",
        "erfhygf bs gur cerivbhf fgbc",
        "xrlqbbe_ehyr-ba-gur-friragu-fgbcf-znpuvar",
    ],
    "numbered stop": ["nf va fgbc 3", "fgbc #12'f eha"],
    "issue number": ["vffhr 22", "frr Vffhr #21", "(vffhrf 22 naq 23)", "nf va #42 nobir", "vffhr-59"],
    "work session": [
        "Ab TCH jnf ninvynoyr va gur frffvba gung zrnfherq guvf",
        "va guvf frffvba jr sbhaq",
        "n yngre frffvba er-ena vg",
        "gjb frffvbaf ntb",
    ],
    "a machine by name": [
        "ba guvf znpuvar",
        "erfhygf sebz znpuvar2",
        "ba gur frpbaq znpuvar",
        "ba gur xavtugf znpuvar",
        "zrpunavfz-xrlqbbe-ehyr-znpuvar2",
    ],
    "a ticket's bar": [
        "vffhr 22'f onef",
        "gur onef ner vffhr 22'f",
        "pyrnef gur one sbe fhpprff",
        "rirel one uryq ba frrqf 0-4",
        "arne gur 0.7 one",
        "rnpu pbasvt zvffvat bar one ba bar frrq",
    ],
    "date": [
        "zrnfherq 2026-12-06",
        "gragu-fgbc-2026-12-06.wfbay",
        "fvapr 2026 gur qrsnhyg",
        "nf bs Qrp 4 vg",
    ],
}
FLAGGED = {name: [codecs.decode(t, "rot13") for t in texts] for name, texts in _FLAGGED_ROT13.items()}


#: pattern name -> normal text it must leave alone
NORMAL = {
    "ordinal work stop": [
        "stop tokens end a turn",
        "the first stop token",
        "each stop string is checked",
        "stop_reason='stop'",
        "the episode stops at the exit",
        "every trial stops at its first rejected action",
        "every 7th turn stops by length",
        "stop after this many updates",
    ],
    "numbered stop": ["stop=()", "the row stops when", "stop_ids 3"],
    "issue number": [
        "color: #374151;",
        "runs/é q#1",
        "page.md#5-configure-and-run",
        "&#39;",
        "x = y  # 10 steps",
        "an issue with the tokenizer",
    ],
    "work session": [
        "requests.Session()",
        '@pytest.fixture(scope="session")',
        "one game per test session",
        "a session-scoped fixture",
        "opens its service session",
        "this test session itself may have imported torch",
        "start_new_session=True",
    ],
    "a machine by name": [
        "a state machine",
        "machine learning",
        "the machine's cores",
        "copy the data from another machine",
    ],
    "a ticket's bar": [
        "a console progress bar",
        "show postfix figures next to the bar",
        "finish the bar",
        "ax.bar(arms, means)",
        "its bar chart",
        "the filter bar stays at the top",
    ],
    "date": ["version 2.1.1", "json_2.1.1/", "seed 2026", "1e-12", "on 2 cores"],
}


def hits(text: str) -> Iterator[tuple[str, str]]:
    """(pattern name, matched text) for every match of every pattern in ``text``."""
    for name, pattern in PATTERNS.items():
        for m in pattern.finditer(text):
            yield name, m.group(0)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_patterns_flag_work_words(name: str) -> None:
    for text in FLAGGED[name]:
        assert PATTERNS[name].search(text), f"{name!r} misses {text!r}"


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_patterns_leave_normal_words(name: str) -> None:
    for text in NORMAL[name]:
        assert not list(hits(text)), f"{text!r} is flagged: {list(hits(text))}"


def scanned_files() -> Iterator[Path]:
    """Every file under :data:`SCANNED` (this file aside: it holds the patterns' examples)."""
    me = Path(__file__).resolve()
    for entry in SCANNED:
        path = ROOT / entry
        if path.is_file():
            yield path
        elif path.is_dir():
            for p in sorted(path.rglob("*")):
                rel = p.relative_to(ROOT)
                if p.is_file() and not SKIPPED_DIRS.intersection(rel.parts) and p.resolve() != me:
                    yield p


def text_of(path: Path) -> str | None:
    """A file's text, or None for a binary file (an image) or one read by name only."""
    rel = path.relative_to(ROOT).as_posix()
    if any(rel.startswith(folder + "/") for folder in NAMES_ONLY) and path.suffix in (".json", ".jsonl"):
        return None
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def allowed(rel: str, line: str, found: list[tuple[str, str]]) -> bool:
    """A dated table row's one date."""
    return rel in DATED_TABLES and line.lstrip().startswith("|") and [n for n, _ in found] == ["date"]


def findings(path: Path) -> Iterator[str]:
    """``file:line: [pattern] text`` for each match in ``path``'s name (line 0) and text."""
    rel = path.relative_to(ROOT).as_posix()
    for name, text in hits(rel):
        yield f"{rel}:0: [{name}] {text!r} (file name)"
    body = text_of(path)
    if body is None:
        return
    for lineno, line in enumerate(body.splitlines(), 1):
        found = list(hits(line))
        if found and not allowed(rel, line, found):
            for name, text in found:
                yield f"{rel}:{lineno}: [{name}] {text!r}"


def test_allowed_dates_are_table_rows_once() -> None:
    assert allowed("docs/results.md", "| grpo | 0.30 | 2026-12-06 |", [("date", "2026-12-06")])
    two = [("date", "2026-12-05"), ("date", "2026-12-06")]
    assert not allowed("docs/results.md", "| grpo | 2026-12-05 | 2026-12-06 |", two)
    assert not allowed("docs/results.md", "Measured 2026-12-06 on knights.", [("date", "2026-12-06")])
    assert not allowed("docs/concepts.md", "| grpo | 0.30 | 2026-12-06 |", [("date", "2026-12-06")])


def test_the_walk_sees_the_whole_tree() -> None:
    rels = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    for expected in (
        "README.md",
        "mkdocs.yml",
        "docs/concepts.md",
        "src/tempo_rl/__init__.py",
        "tests/conftest.py",
    ):
        assert expected in rels
    assert any(r.startswith("benchmarks/results/") for r in rels) and any(
        r.startswith("examples/") for r in rels
    )


def test_no_work_words_in_the_product() -> None:
    found = [f for path in scanned_files() for f in findings(path)]
    assert not found, f"{len(found)} places speak of the work, not the product:\n" + "\n".join(found)
