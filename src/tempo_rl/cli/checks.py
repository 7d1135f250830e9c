"""The input checks every ``tempo-rl`` command runs before it does any work.

Each check returns the checked value or raises :class:`~tempo_rl.cli.CommandError` with one line that names the
input (the option as typed, e.g. ``--out``) and the fix; :func:`tempo_rl.cli.main` prints it and exits with
status 2. None of them writes anything: a folder a command will write into is checked for being creatable and
writable, and made only when the command writes its first file.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from tempo_rl.cli import CommandError

__all__ = [
    "existing_dir",
    "existing_file",
    "number",
    "output_dir",
    "output_file",
    "run_to_read",
    "whole",
]


def number(
    option: str,
    value: float | None,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
) -> float | None:
    """``value`` when it is finite and within the bounds (None passes: the option was not given)."""
    if value is None:
        return None
    bounds = []
    if above is not None:
        bounds.append(f"> {above:g}")
    if at_least is not None:
        bounds.append(f">= {at_least:g}")
    if at_most is not None:
        bounds.append(f"<= {at_most:g}")
    wanted = "a finite number" + (" " + " and ".join(bounds) if bounds else "")
    if (
        not math.isfinite(value)
        or (above is not None and not value > above)
        or (at_least is not None and not value >= at_least)
        or (at_most is not None and not value <= at_most)
    ):
        raise CommandError(f"{option} {value:g} is not {wanted}; pass {wanted}")
    return value


def whole(option: str, value: int | None, *, at_least: int) -> int | None:
    """``value`` when it is at least ``at_least`` (None passes: the option was not given)."""
    if value is not None and value < at_least:
        raise CommandError(f"{option} {value} is below {at_least}; pass a whole number >= {at_least}")
    return value


def _file_above(path: Path) -> Path | None:
    """The first ancestor of ``path`` that exists and is not a directory (a path below a file), if any."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def _nearest_existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or ".")


def existing_dir(option: str, path: Path | str, *, what: str = "a folder") -> Path:
    """``path`` when it is an existing directory (``what`` names what the option expects, for the message)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise CommandError(f"{option} {p}: no such folder; pass {what}")
    if not p.is_dir():
        raise CommandError(f"{option} {p} is a file, not a folder; pass {what}")
    if not os.access(p, os.R_OK | os.X_OK):
        raise CommandError(f"{option} {p} cannot be read (permission denied); fix its permissions")
    return p


def existing_file(option: str, path: Path | str, *, what: str = "a file") -> Path:
    """``path`` when it is an existing, readable file."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise CommandError(f"{option} {p} is a folder, not a file; pass {what}")
    if not p.exists():
        raise CommandError(f"{option} {p}: no such file; pass {what}")
    if not os.access(p, os.R_OK):
        raise CommandError(f"{option} {p} cannot be read (permission denied); fix its permissions")
    return p


def output_dir(option: str, path: Path | str, *, fix: str = "choose another folder") -> Path:
    """``path`` when a command can write files into it: an existing writable folder, or one that can be
    created (its nearest existing ancestor is a writable folder). Nothing is created here."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise CommandError(f"{option} {p} is a file, not a folder; {fix}")
    above = _file_above(p)
    if above is not None:
        raise CommandError(f"{option} {p} lies below {above}, which is a file, not a folder; {fix}")
    base = _nearest_existing(p)
    if not os.access(base, os.W_OK | os.X_OK):
        raise CommandError(f"{option} {p} cannot be written ({base} is read-only for this user); {fix}")
    return p


def output_file(option: str, path: Path | str, *, example: str, fix: str = "choose another file") -> Path:
    """``path`` when a command can write it (create it, or replace the file there); a folder is refused, with
    ``example`` (a file name) as the path inside it to pass instead."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise CommandError(f"{option} {p} is a folder, not a file; pass a file path such as {p / example}")
    output_dir(option, p.parent, fix=fix)
    return p


def run_to_read(path: Path | str, *, needs: str) -> Path:
    """``path`` when it is a readable run directory holding ``needs`` (a file name, e.g. ``config.toml``)."""
    p = existing_dir("RUN_DIR", path, what="the run directory of a `tempo-rl train` run (its run.run_dir)")
    if not (p / needs).is_file():
        raise CommandError(
            f"RUN_DIR {p} holds no {needs}: it is not a tempo-rl run directory; pass the run.run_dir of a "
            "`tempo-rl train` run"
        )
    return p
