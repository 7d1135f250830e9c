"""Snapshots: an immutable, JSON-serialisable, versioned description of an intermediate env state.

A snapshot does not pickle the live env. It holds what is needed to *rebuild* the state: the env spec
(registered name + constructor arguments), the reset seed and the action history, plus a digest of every
observation along the way (index 0 = the reset observation, index i = the observation after action i), and,
when the env offers one, a digest of its hidden state after every step. Restore replays the actions and
verifies every digest; see :mod:`tempo_rl.envs.restore`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tempo_rl.envs.core import Observation

__all__ = ["SNAPSHOT_FORMAT_VERSION", "EnvSpec", "Snapshot", "observation_digest"]

#: Bumped whenever the on-disk meaning of a snapshot changes. Newer snapshots are rejected, not guessed at.
SNAPSHOT_FORMAT_VERSION = 1


def observation_digest(observation: Observation) -> str:
    """SHA-256 (hex, first 32 chars) over the observation text and its admissible actions.

    Both are part of what the agent sees, so both must replay identically.
    """
    payload = json.dumps(
        [
            observation.text,
            list(observation.admissible_actions) if observation.admissible_actions is not None else None,
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]


class EnvSpec(BaseModel):
    """How to build an env: a registered name and JSON-serialisable constructor keyword arguments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("kwargs")
    @classmethod
    def _json_serialisable(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            json.dumps(value)
        except TypeError as exc:
            raise ValueError(
                f"env kwargs must be JSON-serialisable so snapshots can be stored: {exc}"
            ) from exc
        return value

    def key(self) -> str:
        """A stable string key for this spec (name + sorted kwargs)."""
        return self.name + ":" + json.dumps(self.kwargs, sort_keys=True, separators=(",", ":"))


class Snapshot(BaseModel):
    """An intermediate env state, rebuildable by reset(seed) + replay(actions) and verifiable step by step.

    Attributes:
        format_version: :data:`SNAPSHOT_FORMAT_VERSION` at creation; newer versions fail validation.
        env: the env spec to rebuild from.
        seed: the reset seed.
        actions: the action history, in order.
        observation_digests: ``len(actions) + 1`` digests (reset observation first).
        state_digests: optional per-observation hidden-state fingerprints (same length, entries may be None).
        last_observation: the text of the final observation (for diffs and prompt building).
        last_admissible: the admissible actions at the final observation, when known.
        observation_texts: optional full texts of every observation (same length as ``observation_digests``),
            kept only so that a replay divergence can show a diff of expected vs actual text at any step.
            Not part of :attr:`id`; digests remain the source of truth.
        round_index: the number of env steps taken (``len(actions)``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = SNAPSHOT_FORMAT_VERSION
    env: EnvSpec
    seed: int | None = None
    actions: tuple[str, ...] = ()
    observation_digests: tuple[str, ...]
    state_digests: tuple[str | None, ...] | None = None
    last_observation: str = ""
    last_admissible: tuple[str, ...] | None = None
    observation_texts: tuple[str, ...] | None = None

    @field_validator("format_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value > SNAPSHOT_FORMAT_VERSION:
            raise ValueError(
                f"snapshot format_version {value} is newer than this tempo-rl understands "
                f"({SNAPSHOT_FORMAT_VERSION}); upgrade tempo-rl to read it"
            )
        if value < 1:
            raise ValueError(f"snapshot format_version must be >= 1, got {value}")
        return value

    @model_validator(mode="after")
    def _consistent_lengths(self) -> Snapshot:
        if len(self.observation_digests) != len(self.actions) + 1:
            raise ValueError(
                f"observation_digests must have len(actions) + 1 = {len(self.actions) + 1} entries "
                f"(the reset observation first), got {len(self.observation_digests)}"
            )
        if self.state_digests is not None and len(self.state_digests) != len(self.observation_digests):
            raise ValueError("state_digests must have the same length as observation_digests")
        if self.observation_texts is not None and len(self.observation_texts) != len(
            self.observation_digests
        ):
            raise ValueError("observation_texts must have the same length as observation_digests")
        return self

    @property
    def round_index(self) -> int:
        """How many actions have been applied since reset."""
        return len(self.actions)

    @property
    def id(self) -> str:
        """A content hash identifying this exact state (spec, seed, actions and digests)."""
        payload = json.dumps(
            [self.env.key(), self.seed, list(self.actions), list(self.observation_digests)],
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:24]

    def to_json(self) -> str:
        """Serialise to a JSON string (stable field order)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, data: str | bytes) -> Snapshot:
        """Parse and validate a JSON string produced by :meth:`to_json`."""
        return cls.model_validate_json(data)
