"""Builders shared by the store tests."""

from __future__ import annotations

from collections.abc import Sequence

from tempo_rl.envs.snapshot import EnvSpec, Snapshot
from tempo_rl.training.store import StoredState, make_state_id


def snapshot(actions: Sequence[str], game: str = "g0") -> Snapshot:
    return Snapshot(
        env=EnvSpec(name="toy", kwargs={"game": game}),
        seed=7,
        actions=tuple(actions),
        observation_digests=tuple(f"{i:032d}" for i in range(len(actions) + 1)),
        last_observation=f"obs after {len(actions)} actions",
    )


def state(
    prefix: Sequence[int],
    *,
    game: str = "g0",
    version: int = 0,
    actions: Sequence[str] = ("look",),
    parent: str | None = None,
    macro: int = 1,
    sid: str | None = None,
) -> StoredState:
    snap = snapshot(actions, game)
    return StoredState(
        id=sid or make_state_id(snap, prefix),
        snapshot=snap,
        game_id=game,
        task=f"task of {game}",
        initial_observation="You are in a room.",
        history=tuple((a, f"you did {a}") for a in actions),
        token_prefix=tuple(prefix),
        prefix_logprob_sum=-1.25,
        policy_version=version,
        macro_index=macro,
        parent_id=parent,
        privileged_info="walkthrough: look",
        extra={"note": "x"},
    )
