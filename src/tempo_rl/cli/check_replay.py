"""``tempo-rl check-replay <env spec> --steps N --trials K``: verify that an env restores exactly.

Plays random actions (admissible ones, and with probability ``--invalid-share`` one the env should reject: an
inadmissible command or free text, as agents send), restores at random depths (by replay, and by ``fork()``
where the env has one), continues each restored env with the recorded actions and compares every observation
digest and state fingerprint. Prints a summary (or one JSON line with ``--json``); exits 1 on any divergence and 2 when the
env spec is bad (the message lists the available envs or the accepted arguments). ``--import MODULE`` imports
a module first, so that an env registered there can be checked by name.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tempo_rl.cli import add_documented_parser, checks, command, set_command

#: the :func:`~tempo_rl.envs.check.check_replay` parameters this command sets from its options of the same
#: name (``--continue-steps`` sets ``continue_steps``)
_CHECK_OPTIONS = ("steps", "trials", "seed", "restores", "continue_steps", "invalid_share")


def add_parser(subparsers: Any) -> None:
    """Register the ``check-replay`` sub-command."""
    summary = "verify that an env restores exactly (random play, restores at random depths)"
    parser = add_documented_parser(subparsers, "check-replay", __doc__, summary)
    parser.add_argument(
        "spec",
        help="env spec: NAME or NAME:key=value,... e.g. knights, keydoor:horizon=40, textworld:path=game.z8",
    )
    parser.add_argument("--steps", type=int, default=50, help="random actions per trial (default 50)")
    parser.add_argument("--trials", type=int, default=5, help="episodes to play (default 5)")
    parser.add_argument(
        "--seed", type=int, default=0, help="base seed of resets and action choice (default 0)"
    )
    parser.add_argument("--restores", type=int, default=3, help="restore depths per trial (default 3)")
    parser.add_argument(
        "--continue-steps",
        type=int,
        default=5,
        help="recorded actions replayed after each restore (default 5)",
    )
    parser.add_argument(
        "--invalid-share",
        type=float,
        default=0.2,
        help="probability in [0, 1] that an action is one the env should reject: an inadmissible command or "
        "free text (default 0.2; 0 plays admissible actions only)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of a summary")
    set_command(parser, run, imports=True)


@command("check-replay")
def run(args: argparse.Namespace) -> int:
    """Run the check; 0 when every restore matched, 1 on any divergence, 2 on a bad spec or arguments."""
    from tempo_rl.envs import check_replay
    from tempo_rl.envs.registry import UnknownEnvError

    for option, at_least in (("steps", 1), ("trials", 1), ("restores", 0), ("continue_steps", 0)):
        checks.whole("--" + option.replace("_", "-"), getattr(args, option), at_least=at_least)
    checks.number("--invalid-share", args.invalid_share, at_least=0.0, at_most=1.0)
    try:
        report = check_replay(args.spec, **{name: getattr(args, name) for name in _CHECK_OPTIONS})
    except (UnknownEnvError, TypeError, ValueError, ImportError) as exc:
        print(f"tempo-rl check-replay: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict()) if args.json else report.summary())
    return 0 if report.ok else 1
