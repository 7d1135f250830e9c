"""Expert walkthroughs as critic-only privileged information.

Real ALFWorld data has two traps (both handled here):

* valid_unseen walkthroughs name entities by their raw PDDL ids (``take mug_bar__minus_02_dot_05_... from
  shelf_bar_...``). Replayed as stored every step answers "Nothing happens.". :func:`map_walkthrough` rewrites
  each id token to the name the agent sees (``mug 1``), using the demangled names of the loaded game.
* train games carry no walkthrough. :func:`planner_walkthrough` asks Fast Downward for a plan once, checks
  that it wins, and caches it on disk by the game's content hash; when that is not possible the walkthrough
  is reported absent (``None``), never as an unusable list.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "CACHE_ENV_VAR",
    "default_cache_dir",
    "format_walkthrough",
    "has_raw_ids",
    "load_cached_walkthrough",
    "map_walkthrough",
    "store_cached_walkthrough",
]

CACHE_ENV_VAR = "TEMPO_RL_CACHE"
_RAW_ID_MARKER = "_bar_"


def default_cache_dir() -> Path:
    """``$TEMPO_RL_CACHE/alfworld`` when set, else ``~/.cache/tempo_rl/alfworld``."""
    base = os.environ.get(CACHE_ENV_VAR)
    return (Path(base).expanduser() if base else Path("~/.cache/tempo_rl").expanduser()) / "alfworld"


def map_walkthrough(commands: Sequence[str], names: Mapping[str, str]) -> tuple[str, ...]:
    """Replace every raw PDDL id token in ``commands`` by the agent-visible name in ``names``.

    Tokens are whitespace-separated; the lookup is case-insensitive (TextWorld lower-cases PDDL ids). Tokens
    that are not ids (verbs, prepositions, already readable names) are kept. Whitespace is canonicalised to
    single spaces.

    Example:
        >>> map_walkthrough(["go to cabinet_bar__plus_00"], {"cabinet_bar__plus_00": "cabinet 1"})
        ('go to cabinet 1',)
    """
    lowered = {k.lower(): v for k, v in names.items()}
    out: list[str] = []
    for command in commands:
        tokens = [lowered.get(tok.lower(), tok) for tok in command.split()]
        out.append(" ".join(tokens))
    return tuple(out)


def has_raw_ids(commands: Sequence[str]) -> bool:
    """True when some command still contains a raw (mangled) ALFRED id, i.e. the walkthrough is unusable."""
    return any(_RAW_ID_MARKER in c for c in commands)


def format_walkthrough(commands: Sequence[str]) -> str:
    """Numbered, one command per line (the form put in a critic prompt)."""
    return "\n".join(f"{i}. {c}" for i, c in enumerate(commands, start=1))


def _cache_file(cache_dir: Path, key: str) -> Path:
    return cache_dir / "walkthroughs" / f"{key}.json"


def load_cached_walkthrough(cache_dir: Path, key: str) -> tuple[str, ...] | None:
    """A previously verified planner walkthrough for the game with content key ``key``, or None."""
    path = _cache_file(cache_dir, key)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    cmds = data.get("walkthrough") if isinstance(data, dict) else None
    if not isinstance(cmds, list) or not all(isinstance(c, str) for c in cmds) or not cmds:
        return None
    return tuple(cmds)


def store_cached_walkthrough(cache_dir: Path, key: str, commands: Sequence[str], source: str) -> Path:
    """Write a verified walkthrough atomically; returns the file written."""
    path = _cache_file(cache_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"walkthrough": list(commands), "source": source}), encoding="utf-8")
    tmp.replace(path)
    return path
