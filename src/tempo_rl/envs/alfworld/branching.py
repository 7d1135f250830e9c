"""Fast verified restore of ALFWorld snapshots into N live branches.

:func:`restore_branches` is the ALFWorld-specific fast path of :func:`tempo_rl.envs.restore_branches`:
each branch
takes a warm engine from the pool (no process, no translation) and calls :meth:`AlfworldEnv.replay`, which
applies the recorded PDDL operators without generating text, checks the fact digest at every step, and checks
the text + admissible list at the end (and at the reset when the snapshot has no state digest for it).

It is registered with :func:`tempo_rl.envs.restore.register_restorer` for ``"alfworld"``, so the generic
``restore`` / ``restore_branches`` use it on a cache miss.

Cost per branch at depth d: one state rebuild (~5-50 ms) + d x (~1 ms) + one full text step (~30-130 ms),
versus the reference's fresh worker process, 2 translations and d full text steps.
"""

from __future__ import annotations

from tempo_rl.envs.alfworld.env import AlfworldEnv
from tempo_rl.envs.core import Observation
from tempo_rl.envs.recorder import RecordedEnv
from tempo_rl.envs.snapshot import Snapshot

__all__ = ["ALFWORLD_ENV_NAME", "adopt_record", "restore_branches"]

#: The registry name snapshots of this adapter carry.
ALFWORLD_ENV_NAME = "alfworld"


def adopt_record(env: RecordedEnv, snapshot: Snapshot, observation: Observation, done: bool) -> RecordedEnv:
    """Make ``env``'s record equal to ``snapshot``'s after its wrapped env was replayed to that state."""
    return env.adopt(snapshot, observation, done)


def restore_branches(snapshot: Snapshot, n: int = 1, *, verify: bool = True) -> list[RecordedEnv]:
    """``n`` independent live ALFWorld envs at ``snapshot``'s state, each replayed and verified on its own.

    Args:
        snapshot: a snapshot of an ``alfworld`` env (``snapshot.env.name == "alfworld"``).
        n: the number of branches (>= 1).
        verify: check fact digests at every step and the observation digest at the end (recommended).

    Raises:
        ValueError: ``n < 1`` or a snapshot of another env.
        ReplayDivergenceError: a branch did not reproduce the snapshot (the message names the step).
    """
    if n < 1:
        raise ValueError(f"restore_branches needs n >= 1 branches, got {n}")
    if snapshot.env.name != ALFWORLD_ENV_NAME:
        raise ValueError(f"this is the ALFWorld restore; the snapshot is of env {snapshot.env.name!r}")
    branches: list[RecordedEnv] = []
    try:
        for _ in range(n):
            inner = AlfworldEnv(**snapshot.env.kwargs)
            rec = RecordedEnv(inner, snapshot.env)
            branches.append(rec)
            observation = inner.replay(
                snapshot.actions,
                snapshot.observation_digests if verify else None,
                snapshot.state_digests if verify else None,
            )
            adopt_record(rec, snapshot, observation, inner.done)
    except BaseException:
        for b in branches:
            b.close()
        raise
    return branches
