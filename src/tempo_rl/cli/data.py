"""``tempo-rl data alfworld [--dir DIR]``: get ALFWorld game data (or build it offline).

* Without options: if ``DIR`` (``--dir``/``--data``, else ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``)
  already holds ``json_2.1.1/``, print the playable games per split and task type and stop. Otherwise download
  the text games with ALFWorld's official downloader (``alfworld-download``: the json, pddl and tw-pddl
  archives; ``--full`` runs the whole official script, detector weights included). A short reachability check
  runs first, so an offline machine fails within ``--timeout`` seconds with instructions instead of hanging.
* ``--generate N``: write N offline games per task type (all six) into ``DIR`` with the bundled generator; no
  network needed.

Exit codes: 0 success, 1 download failed, 2 bad arguments or the ``alfworld`` extra missing, 3 offline.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

DOWNLOAD_HOST = ("github.com", 443)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``data`` sub-command (with one sub-command per dataset: ``alfworld``)."""
    parser = subparsers.add_parser(
        "data",
        help="download or generate environment data (ALFWorld games)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    datasets = parser.add_subparsers(dest="dataset", metavar="DATASET")
    alf = datasets.add_parser(
        "alfworld",
        help="ALFWorld text games (json_2.1.1)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    alf.add_argument(
        "--dir",
        "--data",
        dest="dir",
        type=Path,
        default=None,
        help="data folder (default: $ALFWORLD_DATA, else ~/.cache/alfworld)",
    )
    alf.add_argument(
        "--timeout", type=float, default=5.0, help="seconds for the reachability check (default 5)"
    )
    alf.add_argument("--force", action="store_true", help="download even if the folder already holds games")
    alf.add_argument("--full", action="store_true", help="run the full official alfworld-download script")
    alf.add_argument(
        "--generate",
        type=int,
        default=0,
        metavar="N",
        help="generate N offline games per task type instead of downloading",
    )
    alf.add_argument("--seed", type=int, default=0, help="first seed for --generate (default 0)")
    alf.add_argument("--split", default="train", help="split folder for --generate (default train)")
    alf.set_defaults(func=run_alfworld)
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])
    return parser


def _target_dir(args: argparse.Namespace) -> Path:
    if args.dir is not None:
        return Path(args.dir).expanduser()
    from tempo_rl.envs.alfworld.data import default_data_root

    return default_data_root()


def _print_counts(root: Path) -> bool:
    """Print the playable games under ``root``; False when there are none."""
    from tempo_rl.envs.alfworld.data import AlfworldDataError, discover_games

    try:
        found = discover_games(root)
    except AlfworldDataError:
        return False
    print(f"ALFWorld data in {root}: {len(found)} playable games")
    for split, per in found.counts().items():
        print(f"  {split}: {sum(per.values())}  " + ", ".join(f"{t}={n}" for t, n in per.items()))
    if found.skipped:
        print("  skipped: " + ", ".join(f"{k}={v}" for k, v in sorted(found.skipped.items())))
    return True


def reachable(host: tuple[str, int], timeout: float) -> str | None:
    """None when a TCP connection to ``host`` opens within ``timeout`` s (DNS included), else why not."""
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            with socket.create_connection(host, timeout=timeout):
                outcome.append(None)
        except OSError as exc:
            outcome.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return f"no answer within {timeout:g} s"
    return outcome[0]


def _offline_help(root: Path, why: str) -> str:
    return (
        f"cannot reach {DOWNLOAD_HOST[0]} to download ALFWorld ({why}).\n"
        "To use ALFWorld without network, either\n"
        f"  * copy an existing ALFWorld data folder (the one that contains json_2.1.1/) to {root},\n"
        "    or point --dir / the ALFWORLD_DATA environment variable at it, or\n"
        f"  * generate offline games: tempo-rl data alfworld --generate 10 --dir {root}"
    )


def _downloader() -> str | None:
    found = shutil.which("alfworld-download")
    if found:
        return found
    candidate = Path(sys.executable).parent / "alfworld-download"
    return str(candidate) if candidate.is_file() else None


def run_alfworld(args: argparse.Namespace) -> int:
    """Show, download or generate ALFWorld data; see the module docstring for exit codes."""
    root = _target_dir(args)
    if args.generate < 0:
        print("error: --generate must be >= 0", file=sys.stderr)
        return 2
    if args.generate:
        try:
            from tempo_rl.envs.alfworld.generator import generate_games

            games = generate_games(root, per_type=args.generate, seed=args.seed, split=args.split)
        except ImportError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"generated {len(games)} games ({sum(g.solvable for g in games)} solvable) in {root}")
        _print_counts(root)
        return 0
    if not args.force and _print_counts(root):
        return 0
    why = reachable(DOWNLOAD_HOST, args.timeout)
    if why is not None:
        print("error: " + _offline_help(root, why), file=sys.stderr)
        return 3
    script = _downloader()
    if script is None:
        print(
            "error: alfworld-download not found; install the extra: pip install 'tempo-rl[alfworld]'",
            file=sys.stderr,
        )
        return 2
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ALFWORLD_DATA": str(root)}
    if args.full:
        code = subprocess.call([script, "--data-dir", str(root)], env=env)
        return 0 if code == 0 and _print_counts(root) else 1
    os.environ["ALFWORLD_DATA"] = str(root)
    try:
        official = runpy.run_path(script, run_name="alfworld_download")
        for url in (official["JSON_FILES_URL"], official["PDDL_FILES_URL"], official["TW_PDDL_FILES_URL"]):
            archive = official["download"](url, dst=str(root), force=False)
            official["unzip"](archive, dst=str(root), force=False)
            os.remove(archive)
    except Exception as exc:  # network errors, bad archives
        print(
            f"error: download failed: {type(exc).__name__}: {exc}\n" + _offline_help(root, "download failed"),
            file=sys.stderr,
        )
        return 1
    return 0 if _print_counts(root) else 1
