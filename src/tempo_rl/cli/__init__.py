"""The ``tempo-rl`` command line: ``tempo-rl <command> ...``.

Each command lives in its own module under :mod:`tempo_rl.cli` and exposes two functions:
``add_parser(subparsers)`` (registers its argparse sub-parser and sets ``func``: :func:`set_command`) and the ``func`` it sets, which
takes the parsed ``argparse.Namespace`` and returns a process exit code. Commands are imported lazily so that
``tempo-rl --help`` needs no optional dependency.

Failing cleanly is done here, once, for every command: :func:`main` runs the command and turns an expected
error into one line on stderr, ``tempo-rl COMMAND: error: MESSAGE``, without a traceback
(:func:`describe_failure`). Expected errors are :class:`CommandError` (raised by the checks of
:mod:`tempo_rl.cli.checks`, which every command runs on its inputs before it does any work), the library's own
errors that name their fix (an invalid config, an unusable run directory, a damaged checkpoint, an unknown
env, a missing extra...), a full disk and a refused permission. Exit codes: 2 a bad input (nothing was done or
written), 1 the work failed on the way (a full disk: the line says whether and from where the run resumes),
130 interrupted. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import functools
import importlib
import os
import sqlite3
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tempo_rl._version import __version__

#: command name -> module (relative to tempo_rl.cli) that registers it
COMMANDS: dict[str, str] = {
    "train": "train",
    "race": "race",
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


def add_config_options(parser: argparse.ArgumentParser, *, default: str, example: str) -> None:
    """``--config/-c FILE``, the TOML config (``default`` names the one used without it), and ``--set KEY=VALUE``
    (repeatable; ``example`` is one), a config field overridden."""
    parser.add_argument("--config", "-c", type=Path, default=None, help=f"TOML config (default: {default})")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a config field, e.g. --set {example} (repeatable)",
    )


def set_command(
    parser: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int], *, imports: bool = False
) -> None:
    """The last step of registering a command: ``func`` runs it and, with ``imports``, it takes ``--import
    MODULE`` (repeatable): user modules (e.g. one that registers an env) that :func:`command` imports before
    ``func`` runs."""
    if imports:
        parser.add_argument(
            "--import",
            dest="imports",
            action="append",
            default=[],
            metavar="MODULE",
            help="import MODULE first (repeatable), e.g. the module of your own adapter that calls "
            "tempo_rl.envs.register(); the current directory is importable",
        )
    parser.set_defaults(func=func)


class CommandError(Exception):
    """An expected failure of a command: ``message`` is the one line shown to the user (it names the input and
    the fix), ``code`` the exit status (2: a bad input, nothing was done; 1: the work failed on the way)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def import_user_modules(command: str, modules: Sequence[str]) -> bool:
    """Import ``modules`` with the current directory importable; returns True.

    Raises:
        CommandError: a module is not found, has a syntax error or raises; the one line names the module, the
            error and where it happened (file and line).
    """
    if not modules:
        return True
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module.startswith(exc.name):
                raise CommandError(
                    f"--import {module}: no module named {exc.name!r}; run from the folder that holds "
                    f"{exc.name.split('.')[0]}.py (the current directory is importable) or add its folder to "
                    "PYTHONPATH"
                ) from None
            raise CommandError(_import_failure(module, exc)) from None
        except SyntaxError as exc:
            where = f"{exc.filename}, line {exc.lineno}" if exc.filename else "its source"
            raise CommandError(
                f"--import {module}: syntax error in {where}: {exc.msg}; fix the module or drop --import"
            ) from None
        except (Exception, SystemExit) as exc:
            raise CommandError(_import_failure(module, exc)) from None
    return True


def _import_failure(module: str, exc: BaseException) -> str:
    """One line for a module that raised while it was imported: the error and the innermost place it rose."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}, line {frames[-1].lineno}" if frames else ""
    return (
        f"--import {module} raised {type(exc).__name__}: {exc}{where}; fix the module (python -c 'import "
        f"{module}' shows the traceback) or drop --import"
    )


# ------------------------------------------------------------------------------------------------ failures

#: errno values of a full disk / of a refused write
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_NO_PERMISSION = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def _library_error(exc: BaseException) -> int | None:
    """The exit code of a library error whose message names its fix (None for any other exception).

    The error classes are looked up in :data:`sys.modules` only: an exception of a class whose module was never
    imported cannot have been raised, and the check imports nothing.
    """
    codes = (
        ("tempo_rl.training.config", "ConfigError", 2),  # RunDirError and RunDirLockedError included
        ("tempo_rl.training.checkpoint", "CheckpointError", 2),
        ("tempo_rl.training.plots", "MetricsFileError", 2),
        ("tempo_rl._optional", "MissingDependencyError", 2),
        ("tempo_rl.envs.registry", "UnknownEnvError", 2),
        ("tempo_rl.envs.alfworld.data", "AlfworldDataError", 2),
        ("tempo_rl.backends.local.pretrained", "ModelFetchError", 1),
    )
    for module_name, class_name, code in codes:
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return code
    return None


def _disk_problem(exc: BaseException) -> str | None:
    """``"full"`` or ``"permission"`` when ``exc`` is a full disk or a refused write (an ``OSError`` or
    SQLite's own wording of them), else None."""
    if isinstance(exc, OSError):
        if exc.errno in _NO_SPACE:
            return "full"
        if exc.errno in _NO_PERMISSION:
            return "permission"
        return None
    if isinstance(exc, sqlite3.Error):
        text = str(exc).lower()
        if "disk is full" in text or "disk full" in text:
            return "full"
        if "readonly" in text or "read-only" in text or "unable to open database file" in text:
            return "permission"
    return None


def _where(exc: BaseException) -> str:
    """The path an ``OSError`` names, as `` (PATH)``; empty when it names none."""
    name = getattr(exc, "filename", None)
    return f" ({name})" if name else ""


def resume_note(run_dir: Path) -> str:
    """Whether and from where the run in ``run_dir`` resumes, as the end of a failure's line."""
    from tempo_rl.training.checkpoint import CheckpointError, latest_checkpoint
    from tempo_rl.training.rundir import CONFIG_FILE

    if not (run_dir / CONFIG_FILE).is_file():
        return "nothing of the new run was kept; run the same command again"
    try:
        checkpoint = latest_checkpoint(run_dir)
    except (CheckpointError, OSError):
        checkpoint = None
    if checkpoint is None:
        return f"the run has no checkpoint yet: `tempo-rl train --resume {run_dir}` starts it over in place"
    return (
        f"the run is resumable from checkpoint {checkpoint.path.name} (after update {checkpoint.update}): "
        f"tempo-rl train --resume {run_dir}"
    )


def describe_failure(exc: BaseException, args: argparse.Namespace) -> tuple[str, int] | None:
    """The one line and exit code of an expected error raised by a command, None for anything else (a bug,
    which keeps its traceback).

    A command that writes a run sets ``args.active_run`` (its run directory) before it starts writing; a full
    disk or a refused write then says that the run is resumable, and from which checkpoint.
    """
    if isinstance(exc, CommandError):
        return str(exc), exc.code
    code = _library_error(exc)
    if code is not None:
        return str(exc), code
    problem = _disk_problem(exc)
    if problem is None:
        return None
    run_dir = getattr(args, "active_run", None)
    if problem == "full":
        what = f"the disk is full{_where(exc)}: {exc}"
        fix = "free disk space"
    else:
        what = f"a write was refused{_where(exc)}: {exc}"
        fix = "fix the permissions (or choose a writable folder)"
    if run_dir is None:
        return f"{what}; {fix} and run the command again", 1
    return f"{what}; {fix}, then continue: {resume_note(Path(run_dir))}", 1


def command_name(args: argparse.Namespace) -> str:
    """``train``, ``data alfworld``, ``model fetch``...: the command as typed, for messages."""
    words = [str(getattr(args, "command", None) or getattr(args, "command_label", "") or "")]
    for sub in ("dataset", "action"):
        value = getattr(args, sub, None)
        if isinstance(value, str):
            words.append(value)
    return " ".join(words)


def run_command(args: argparse.Namespace, func: Callable[[argparse.Namespace], int] | None = None) -> int:
    """Run the parsed command (``func``, default ``args.func``); an expected error becomes one line on stderr
    and its exit code (see the module docstring)."""
    name = command_name(args).strip() or "command"
    try:
        return int((func or args.func)(args) or 0)
    except KeyboardInterrupt:
        run_dir = getattr(args, "active_run", None)
        if run_dir is not None:
            print(
                f"tempo-rl {name}: interrupted; the run stays resumable from its last checkpoint: "
                f"tempo-rl train --resume {run_dir}",
                file=sys.stderr,
            )
        else:
            print(f"tempo-rl {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        failure = describe_failure(exc, args)
        if failure is None:
            raise
        message, code = failure
        print(f"tempo-rl {name}: error: {message}", file=sys.stderr)
        return code


def command(
    name: str,
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Decorate the ``func`` of command ``name``: the modules of its ``--import`` option
    (:func:`set_command`) are imported first, and called directly (as tests and embedders do) it turns
    expected errors into a message and an exit code exactly as :func:`main` does, which also covers undecorated
    commands."""

    def decorate(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        def body(args: argparse.Namespace) -> int:
            import_user_modules(name, getattr(args, "imports", []))
            return func(args)

        @functools.wraps(func)
        def wrapped(args: argparse.Namespace) -> int:
            if not getattr(args, "command", None):
                args.command_label = name
            return run_command(args, body)

        return wrapped

    return decorate


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
    return run_command(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
