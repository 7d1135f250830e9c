"""``tempo-rl data alfworld [--dir DIR]``: get ALFWorld game data (or build it offline).

* Without options: if ``DIR`` (``--dir``/``--data``, else ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``)
  already holds ``json_2.1.1/``, print the playable games per split and task type and stop. Otherwise download
  the text games with ALFWorld's official downloader (``alfworld-download``: the json, pddl and tw-pddl
  archives; ``--full`` runs the whole official script, detector weights included). A short reachability check
  runs first, so an offline machine fails within ``--timeout`` seconds with instructions instead of hanging.
* ``--generate N``: write N offline games per task type (all six) into ``DIR`` with the bundled generator; no
  network needed.
* ``--plan GAMES``: precompute a planner walkthrough (the critic's privileged information) for every game under
  ``GAMES`` that has none in its file (ALFWorld's train split): ``--workers`` processes, a progress bar, each
  plan verified (replaying it must win) and cached by the game's content hash in ``--cache-dir`` (default
  ``$TEMPO_RL_CACHE/alfworld``, else ``~/.cache/tempo_rl/alfworld``: where training looks). Cached games are
  skipped, so a killed run resumes where it stopped. A game that fails (no plan, a plan that does not win, a
  planner error, or no plan within ``--plan-timeout`` seconds: the worker is killed) is counted, listed and
  skipped.

Exit codes: 0 success, 1 download failed or some games could not be planned (listed), 2 bad arguments or the
``alfworld`` extra missing, 3 offline.
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

from tempo_rl.cli import CommandError, add_documented_parser, checks, command

DOWNLOAD_HOST = ("github.com", 443)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``data`` sub-command (with one sub-command per dataset: ``alfworld``)."""
    parser = add_documented_parser(
        subparsers, "data", __doc__, "download or generate environment data (ALFWorld games)"
    )
    datasets = parser.add_subparsers(dest="dataset", metavar="DATASET")
    alf = add_documented_parser(datasets, "alfworld", __doc__, "ALFWorld text games (json_2.1.1)")
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
    alf.add_argument(
        "--plan",
        type=Path,
        default=None,
        metavar="GAMES",
        help="precompute verified planner walkthroughs for every game under GAMES that lacks one",
    )
    alf.add_argument(
        "--workers",
        type=int,
        default=None,
        help="planner processes for --plan (default: the number of CPU cores)",
    )
    alf.add_argument(
        "--plan-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="per-game limit for --plan; a game still planning is killed and counted (default 300)",
    )
    alf.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="walkthrough cache for --plan (default $TEMPO_RL_CACHE/alfworld, else ~/.cache/tempo_rl/alfworld)",
    )
    alf.set_defaults(func=run_alfworld)

    def show_help(_args: argparse.Namespace) -> int:  # `tempo-rl data` with no dataset
        parser.print_help()
        return 2

    parser.set_defaults(func=show_help)
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


def _check(args: argparse.Namespace) -> None:
    """Check every option before anything is generated, planned or downloaded.

    Raises:
        CommandError: a number out of range, or a folder option that names a file or cannot be written.
    """
    checks.whole("--generate", args.generate, at_least=0)
    checks.number("--timeout", args.timeout, above=0.0)
    checks.whole("--workers", args.workers, at_least=1)
    checks.number("--plan-timeout", args.plan_timeout, above=0.0)
    if not args.split or "/" in args.split or args.split in (".", ".."):
        raise CommandError(f"--split {args.split!r} is not a split name; pass a folder name such as train")
    if args.plan is not None:
        checks.existing_dir(
            "--plan", args.plan, what="a folder of ALFWorld games (e.g. DIR/json_2.1.1/train)"
        )
        if args.cache_dir is not None:
            checks.output_dir("--cache-dir", args.cache_dir, fix="pass a folder for the walkthrough cache")
        return
    root = _target_dir(args)
    if root.exists() and not root.is_dir():
        raise CommandError(f"{_dir_option(args)} {root} is a file, not a folder; pass --dir with a folder")


def _dir_option(args: argparse.Namespace) -> str:
    """How the user named the data folder, for messages."""
    return "--dir" if args.dir is not None else "the data folder ($ALFWORLD_DATA or ~/.cache/alfworld)"


def _check_writable(args: argparse.Namespace, root: Path) -> None:
    """Before games are generated or downloaded into ``root``: it can be created or written."""
    checks.output_dir(_dir_option(args), root, fix="pass --dir with a writable folder for the ALFWorld data")


@command("data")
def run_alfworld(args: argparse.Namespace) -> int:
    """Show, download or generate ALFWorld data; see the module docstring for exit codes."""
    _check(args)
    if args.plan is not None:
        return run_plan(args)
    root = _target_dir(args)
    if args.generate:
        _check_writable(args, root)
        try:
            from tempo_rl.envs.alfworld.generator import generate_games

            games = generate_games(root, per_type=args.generate, seed=args.seed, split=args.split)
        except (ImportError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        print(f"generated {len(games)} games ({sum(g.solvable for g in games)} solvable) in {root}")
        _print_counts(root)
        return 0
    if not args.force and _print_counts(root):
        return 0
    _check_writable(args, root)
    why = reachable(DOWNLOAD_HOST, args.timeout)
    if why is not None:
        raise CommandError(_offline_help(root, why), code=3)
    script = _downloader()
    if script is None:
        raise CommandError("alfworld-download not found; install the extra: pip install 'tempo-rl[alfworld]'")
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


def run_plan(args: argparse.Namespace) -> int:
    """``--plan GAMES``: plan, verify and cache walkthroughs; 0 when every game has one, 1 when some failed."""
    import importlib.util

    from tempo_rl.envs.alfworld.data import AlfworldDataError
    from tempo_rl.envs.alfworld.planning import discover_plan_targets, plan_walkthroughs
    from tempo_rl.envs.alfworld.walkthrough import default_cache_dir

    workers = args.workers if args.workers is not None else (os.cpu_count() or 1)
    missing = [m for m in ("textworld", "alfworld", "fast_downward") if importlib.util.find_spec(m) is None]
    if missing:
        raise CommandError(
            f"--plan needs the alfworld extra ({', '.join(missing)} missing): pip install 'tempo-rl[alfworld]'"
        )
    try:
        files, skipped = discover_plan_targets(args.plan)
    except AlfworldDataError as exc:
        raise CommandError(str(exc)) from None
    cache = Path(args.cache_dir).expanduser() if args.cache_dir is not None else default_cache_dir()
    from tempo_rl.training.metrics import ProgressBar

    bar = ProgressBar(len(files), desc="planning")
    failed = 0

    def progress(outcome: object) -> None:
        nonlocal failed
        failed += int(getattr(outcome, "failed", False))
        bar.update(1, {"failed": float(failed)})

    try:
        report = plan_walkthroughs(
            files, cache_dir=cache, workers=workers, timeout=args.plan_timeout, on_outcome=progress
        )
    except AlfworldDataError as exc:
        bar.close()
        raise CommandError(str(exc)) from None
    except OSError as exc:
        bar.close()
        raise CommandError(f"planning failed: {exc}; check --plan and --cache-dir") from None
    bar.close()
    print(f"{args.plan}: {report.summary()}")
    if skipped:
        print(
            "  not games (skipped by discovery): " + ", ".join(f"{k}={v}" for k, v in sorted(skipped.items()))
        )
    for outcome in report.failures:
        print(f"  FAILED {outcome.status}: {outcome.game_file}: {outcome.detail}")
    if cache == default_cache_dir():
        print(f"walkthroughs cached in {cache} (where training looks by default)")
    else:
        print(f"walkthroughs cached in {cache}; train with env.kwargs.cache_dir = {str(cache)!r}")
    return 1 if report.failures else 0
