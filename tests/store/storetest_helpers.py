"""Builders shared by the store tests."""

from __future__ import annotations

from collections.abc import Sequence

from tempo_rl.envs.snapshot import EnvSpec, Snapshot
from tempo_rl.rollout.renderer import PromptWindow
from tempo_rl.training.types import PrefixSpan, StoredState, make_state_id


def snapshot(actions: Sequence[str], game: str = "g0") -> Snapshot:
    return Snapshot(
        env=EnvSpec(name="toy", kwargs={"game": game}),
        seed=7,
        actions=tuple(actions),
        observation_digests=tuple(f"{i:032d}" for i in range(len(actions) + 1)),
        last_observation=f"obs after {len(actions)} actions",
        observation_texts=("You are in a room.", *(f"you did {a}" for a in actions)),
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
        token_prefix=tuple(prefix),
        policy_version=version,
        macro_index=macro,
        prompt=PromptWindow(messages=({"role": "user", "content": "You are in a room."},), head=1)
        if len(prefix)
        else None,
        spans=(PrefixSpan(0, 1, version, -1.25),) if len(prefix) else (),
        parent_id=parent,
        privileged_info="walkthrough: look",
    )
