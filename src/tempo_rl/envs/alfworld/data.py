"""Discovering ALFWorld games on disk.

The official layout (what ``alfworld-download`` installs) is::

    <root>/json_2.1.1/<split>/<task-dir>/<trial-dir>/{game.tw-pddl, traj_data.json}

with ``<split>`` one of :data:`SPLITS`. :func:`discover_games` accepts the data root, the ``json_2.1.1``
folder or a split folder. It keeps the six ALFWorld task types, drops ``movable`` / ``Sliced`` variants (as
ALFWorld's
own loader does), keeps only games whose ``game.tw-pddl`` says ``"solvable": true``, and counts every skip by
reason instead of failing on one bad file (``strict=True`` turns a corrupt file into an error naming it).
Game ids are ``"<split>:<task-dir>/<trial-dir>"``: stable across machines and data roots.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_ENV_VAR",
    "GAME_FILE",
    "SPLITS",
    "TASK_TYPES",
    "TRAJ_FILE",
    "AlfworldDataError",
    "Discovery",
    "GameRecord",
    "count_by_split_and_type",
    "default_data_root",
    "discover_games",
    "read_game_file",
    "resolve_split_dirs",
    "shuffle_games",
    "take_batch",
]

#: The six ALFWorld task types, in ALFWorld's own numbering order (1..6).
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
#: Split folder names of the ``json_2.1.1`` layout.
SPLITS: tuple[str, ...] = ("train", "valid_seen", "valid_unseen", "valid_train")
JSON_DIR = "json_2.1.1"
GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
DATA_ENV_VAR = "ALFWORLD_DATA"
_REQUIRED_GAME_KEYS = ("pddl_domain", "grammar", "pddl_problem")


class AlfworldDataError(ValueError):
    """ALFWorld data is missing, empty or malformed; the message names the path and the fix."""


_HOW_TO_GET_DATA = (
    "Download it with `tempo-rl data alfworld` (needs network), or point --data / the ALFWORLD_DATA "
    "environment variable at an existing folder that contains json_2.1.1/."
)


@dataclass(frozen=True)
class GameRecord:
    """One discovered game.

    Attributes:
        id: ``"<split>:<task-dir>/<trial-dir>"``, stable across machines.
        split: the split folder name (``train``, ``valid_seen``, ...).
        task_type: one of :data:`TASK_TYPES`.
        game_file: absolute path of ``game.tw-pddl``.
        traj_file: absolute path of ``traj_data.json``.
        has_walkthrough: the game file carries a non-empty ``walkthrough`` list (train games do not).
        pddl_params: ``traj_data.json``'s goal parameters (object / receptacle targets), critic-only.
    """

    id: str
    split: str
    task_type: str
    game_file: Path
    traj_file: Path
    has_walkthrough: bool
    pddl_params: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Discovery:
    """The result of :func:`discover_games`: the kept games and how many were skipped, by reason."""

    games: tuple[GameRecord, ...]
    skipped: Mapping[str, int]
    skipped_files: Mapping[str, tuple[str, ...]]

    def counts(self) -> dict[str, dict[str, int]]:
        """``{split: {task_type: n}}`` over the kept games (see :func:`count_by_split_and_type`)."""
        return count_by_split_and_type(self.games)

    def __len__(self) -> int:
        return len(self.games)


def default_data_root() -> Path:
    """``$ALFWORLD_DATA`` when set, else ``~/.cache/alfworld`` (ALFWorld's own default)."""
    value = os.environ.get(DATA_ENV_VAR)
    return Path(value).expanduser() if value else Path("~/.cache/alfworld").expanduser()


def resolve_split_dirs(root: str | os.PathLike[str], splits: Iterable[str] | None = None) -> dict[str, Path]:
    """Map each requested split to its folder under ``root``.

    ``root`` may be the data root (containing ``json_2.1.1``), the ``json_2.1.1`` folder itself, or one split
    folder. ``splits=None`` means every split present.

    Raises:
        AlfworldDataError: ``root`` does not exist, is not a directory, or holds none of the requested splits.
    """
    path = Path(root).expanduser()
    if not path.exists():
        raise AlfworldDataError(f"ALFWorld data folder {str(path)!r} does not exist. {_HOW_TO_GET_DATA}")
    if not path.is_dir():
        raise AlfworldDataError(f"ALFWorld data path {str(path)!r} is not a folder. {_HOW_TO_GET_DATA}")
    wanted = tuple(splits) if splits is not None else None
    if wanted is not None:
        unknown = [s for s in wanted if s not in SPLITS]
        if unknown:
            raise AlfworldDataError(f"unknown split(s) {unknown}; expected some of {list(SPLITS)}")
    path = path.resolve()
    if path.name in SPLITS:
        if wanted is not None and path.name not in wanted:
            raise AlfworldDataError(
                f"{str(path)!r} is the {path.name!r} split folder, but splits={list(wanted)}"
            )
        return {path.name: path}
    json_dir = path / JSON_DIR if (path / JSON_DIR).is_dir() else path
    found = {s: json_dir / s for s in (wanted or SPLITS) if (json_dir / s).is_dir()}
    if not found:
        what = f"the split(s) {list(wanted)}" if wanted else f"any split folder ({', '.join(SPLITS)})"
        raise AlfworldDataError(
            f"no ALFWorld data in {str(path)!r}: expected {JSON_DIR}/ with {what} inside. {_HOW_TO_GET_DATA}"
        )
    return found


def read_game_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a ``game.tw-pddl`` (JSON with ``pddl_domain``, ``grammar``, ``pddl_problem``).

    Raises:
        AlfworldDataError: the file is missing, not JSON, or lacks a required key; the message names the file.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise AlfworldDataError(f"game file {str(p)!r} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise AlfworldDataError(f"cannot read game file {str(p)!r}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AlfworldDataError(
            f"corrupt game file {str(p)!r}: not valid JSON ({exc}); re-download it or delete its folder"
        ) from exc
    if not isinstance(data, dict):
        raise AlfworldDataError(
            f"corrupt game file {str(p)!r}: expected a JSON object, got {type(data).__name__}"
        )
    missing = [k for k in _REQUIRED_GAME_KEYS if not isinstance(data.get(k), str) or not data.get(k)]
    if missing:
        raise AlfworldDataError(f"corrupt game file {str(p)!r}: missing or empty key(s) {missing}")
    walkthrough = data.get("walkthrough")
    if walkthrough is not None and not (
        isinstance(walkthrough, list) and all(isinstance(c, str) for c in walkthrough)
    ):
        raise AlfworldDataError(f"corrupt game file {str(p)!r}: 'walkthrough' must be a list of strings")
    return data


def _skip(reason: str, path: Path, skipped: Counter[str], files: dict[str, list[str]]) -> None:
    skipped[reason] += 1
    files.setdefault(reason, []).append(str(path))


def discover_games(
    root: str | os.PathLike[str] | None = None,
    splits: str | Sequence[str] | None = None,
    task_types: Iterable[str] | None = None,
    *,
    strict: bool = False,
) -> Discovery:
    """Find playable ALFWorld games under ``root``, sorted by id.

    Args:
        root: data root, ``json_2.1.1`` folder or a split folder; ``None`` means :func:`default_data_root`.
        splits: one split name, several, or ``None`` for every split present.
        task_types: keep only these task types (each one of :data:`TASK_TYPES`); ``None`` keeps all six.
        strict: raise on a corrupt game or trajectory file instead of counting it as skipped.

    Returns:
        A :class:`Discovery` with the kept games and skip counts under the reasons ``"movable_or_sliced"``,
        ``"missing_traj_data"``, ``"corrupt"``, ``"unsolvable"`` and ``"task_type"`` (filtered or unknown).

    Raises:
        AlfworldDataError: missing folder, no split, an unknown task type, or no game found at all.
    """
    root_path = Path(root) if root is not None else default_data_root()
    split_list = [splits] if isinstance(splits, str) else splits
    wanted_types: frozenset[str] | None = None
    if task_types is not None:
        wanted_types = frozenset(task_types)
        unknown = sorted(wanted_types - set(TASK_TYPES))
        if unknown:
            raise AlfworldDataError(f"unknown task type(s) {unknown}; expected some of {list(TASK_TYPES)}")
    split_dirs = resolve_split_dirs(root_path, split_list)
    games: list[GameRecord] = []
    skipped: Counter[str] = Counter()
    files: dict[str, list[str]] = {}
    for split, split_dir in sorted(split_dirs.items()):
        for game_file in sorted(split_dir.rglob(GAME_FILE)):
            rel = game_file.parent.relative_to(split_dir).as_posix()
            if "movable" in rel or "Sliced" in rel:
                _skip("movable_or_sliced", game_file, skipped, files)
                continue
            traj_file = game_file.parent / TRAJ_FILE
            if not traj_file.is_file():
                _skip("missing_traj_data", game_file, skipped, files)
                continue
            try:
                data = read_game_file(game_file)
                traj = json.loads(traj_file.read_text(encoding="utf-8"))
                if not isinstance(traj, dict) or not isinstance(traj.get("task_type"), str):
                    raise AlfworldDataError(
                        f"corrupt trajectory file {str(traj_file)!r}: no 'task_type' string"
                    )
            except (AlfworldDataError, json.JSONDecodeError, OSError, UnicodeDecodeError) as exc:
                if strict:
                    if isinstance(exc, AlfworldDataError):
                        raise
                    raise AlfworldDataError(f"corrupt trajectory file {str(traj_file)!r}: {exc}") from exc
                _skip("corrupt", game_file, skipped, files)
                continue
            if data.get("solvable") is not True:
                _skip("unsolvable", game_file, skipped, files)
                continue
            task_type = traj["task_type"]
            if task_type not in TASK_TYPES or (wanted_types is not None and task_type not in wanted_types):
                _skip("task_type", game_file, skipped, files)
                continue
            params = traj.get("pddl_params")
            games.append(
                GameRecord(
                    id=f"{split}:{rel}",
                    split=split,
                    task_type=task_type,
                    game_file=game_file,
                    traj_file=traj_file,
                    has_walkthrough=bool(data.get("walkthrough")),
                    pddl_params=dict(params) if isinstance(params, dict) else {},
                )
            )
    if not games:
        detail = f" (skipped: {dict(skipped)})" if skipped else ""
        raise AlfworldDataError(
            f"no playable ALFWorld game found in {[str(p) for p in split_dirs.values()]}{detail}. "
            + _HOW_TO_GET_DATA
        )
    games.sort(key=lambda g: g.id)
    return Discovery(
        games=tuple(games),
        skipped=dict(skipped),
        skipped_files={k: tuple(v) for k, v in files.items()},
    )


def count_by_split_and_type(games: Iterable[GameRecord]) -> dict[str, dict[str, int]]:
    """``{split: {task_type: n}}``, every one of the six task types present (0 when absent), splits sorted."""
    counts: dict[str, dict[str, int]] = {}
    for g in games:
        per = counts.setdefault(g.split, dict.fromkeys(TASK_TYPES, 0))
        per[g.task_type] += 1
    return dict(sorted(counts.items()))


def shuffle_games(games: Sequence[GameRecord], seed: int) -> list[GameRecord]:
    """A seeded permutation of ``games`` (same seed and input order -> same output; input untouched)."""
    out = list(games)
    random.Random(seed).shuffle(out)
    return out


def take_batch(games: Sequence[GameRecord], start: int, size: int) -> list[GameRecord]:
    """``size`` games starting at ``start``, wrapping around (cycling) the sequence.

    Raises:
        ValueError: empty ``games``, negative ``start`` or ``size < 1``.
    """
    if not games:
        raise ValueError("take_batch needs at least one game")
    if size < 1 or start < 0:
        raise ValueError(f"take_batch needs size >= 1 and start >= 0, got size={size}, start={start}")
    return [games[(start + i) % len(games)] for i in range(size)]
