"""The ``tempo-rl`` command line: ``tempo-rl <command> ...``.

Each command lives in its own module under :mod:`tempo_rl.cli` and exposes two functions:
``add_parser(subparsers)`` (registers its argparse sub-parser and sets ``func``) and the ``func`` it sets, which
takes the parsed ``argparse.Namespace`` and returns a process exit code. Commands are imported lazily so that
``tempo-rl --help`` needs no optional dependency.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from tempo_rl._version import __version__

#: command name -> module (relative to tempo_rl.cli) that registers it
COMMANDS: dict[str, str] = {
    "train": "train",
    "eval": "evaluate",
    "plot": "plot",
    "report": "report",
    "check-replay": "check_replay",
    "data": "data",
    "model": "model",
}


def add_documented_parser(subparsers: Any, name: str, doc: str | None, help: str) -> argparse.ArgumentParser:
    """Register sub-command ``name`` (one line of ``help`` in ``tempo-rl --help``); its own ``--help`` shows
    ``doc``, the command module's docstring, with its line breaks kept."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    return parser


def add_import_option(parser: argparse.ArgumentParser) -> None:
    """``--import MODULE`` (repeatable): import user modules (e.g. one that registers an env) before running."""
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (repeatable), e.g. the module of your own adapter that calls "
        "tempo_rl.envs.register(); the current directory is importable",
    )


def import_user_modules(command: str, modules: Sequence[str]) -> bool:
    """Import ``modules`` with the current directory importable; print the error and return False on failure."""
    if not modules:
        return True
    import os

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            print(f"tempo-rl {command}: error: --import {module}: {exc}", file=sys.stderr)
            return False
    return True


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="tempo-rl", description="Long-horizon RL for LLM agents with TEMPO."
    )
    parser.add_argument("--version", action="version", version=f"tempo-rl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMANDS.values():
        try:
            module = importlib.import_module(f"tempo_rl.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tempo_rl.cli.{module_name}":
                continue  # command not built yet
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tempo-rl`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    code = args.func(args)
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
