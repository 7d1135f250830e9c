"""``check_replay``: does an env restore exactly? Random play, restores at random depths, compare every step.

For each trial the env is reset with seed ``seed + trial`` and played for up to ``steps`` random admissible
actions (the walkthrough, or ``"look"``, when the env lists none), taking a snapshot (and a native fork when
the env supports one) at ``restores`` random depths. Each snapshot is then

* restored by **replay** (fresh env + reset + replay, every observation digest and state fingerprint verified)
  and played ``continue_steps`` further with the recorded actions, verified again;
* when the env supports ``fork()``, the fork taken during play is played ``continue_steps`` further the same
  way (this catches forks that share state with their parent, which the original's later steps would change).

Any mismatch is recorded as a :class:`Divergence`; :attr:`ReplayCheckReport.ok` is False if there is one.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tempo_rl.envs.recorder import RecordedEnv
from tempo_rl.envs.registry import make, parse_spec
from tempo_rl.envs.restore import (
    ReplayDivergenceError,
    SnapshotMismatchError,
    continue_replay,
    restore,
    snapshot_prefix,
)
from tempo_rl.envs.snapshot import EnvSpec, Snapshot

__all__ = ["Divergence", "ReplayCheckReport", "check_replay"]


@dataclass(frozen=True)
class Divergence:
    """One failed restore: where it was restored from, how, and where it diverged."""

    trial: int
    depth: int
    method: str  # "replay" or "fork"
    step: int
    action: str | None
    message: str


@dataclass
class ReplayCheckReport:
    """The outcome of :func:`check_replay`.

    Attributes:
        spec: the env spec checked.
        trials: episodes played.
        steps_played: env steps taken over all trials (before restores).
        replay_restores: snapshots restored by replay.
        fork_restores: snapshots checked through a native fork (0 when the env cannot fork).
        divergences: every mismatch found.
        seconds: wall time of the whole check.
    """

    spec: EnvSpec
    trials: int = 0
    steps_played: int = 0
    replay_restores: int = 0
    fork_restores: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when no restore diverged."""
        return not self.divergences

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {
            "spec": self.spec.key(),
            "ok": self.ok,
            "trials": self.trials,
            "steps_played": self.steps_played,
            "replay_restores": self.replay_restores,
            "fork_restores": self.fork_restores,
            "divergences": [asdict(d) for d in self.divergences],
            "seconds": round(self.seconds, 4),
        }

    def summary(self) -> str:
        """A short human-readable verdict."""
        verdict = "OK" if self.ok else f"FAILED: {len(self.divergences)} divergence(s)"
        lines = [
            f"check-replay {self.spec.key()}: {verdict} ({self.trials} trials, {self.steps_played} steps, "
            f"{self.replay_restores} replay restores, {self.fork_restores} fork restores, "
            f"{self.seconds:.2f} s)"
        ]
        for d in self.divergences[:10]:
            lines.append(f"  trial {d.trial} depth {d.depth} via {d.method}: {d.message}")
        return "\n".join(lines)


def _choose(env: RecordedEnv, rng: random.Random, walkthrough: tuple[str, ...] | None) -> str:
    admissible = env.last_observation.admissible_actions
    if admissible:
        return rng.choice(admissible)
    if walkthrough and env.round_index < len(walkthrough):
        return walkthrough[env.round_index]
    return "look"


def _record(report: ReplayCheckReport, trial: int, depth: int, method: str, exc: Exception) -> None:
    if isinstance(exc, ReplayDivergenceError):
        report.divergences.append(Divergence(trial, depth, method, exc.step, exc.action, str(exc)))
    else:
        report.divergences.append(Divergence(trial, depth, method, -1, None, f"{type(exc).__name__}: {exc}"))


def check_replay(
    spec: EnvSpec | str,
    steps: int = 50,
    trials: int = 5,
    seed: int = 0,
    *,
    restores: int = 3,
    continue_steps: int = 5,
) -> ReplayCheckReport:
    """Play random episodes, restore at random depths, and report every divergence.

    Args:
        spec: an :class:`EnvSpec` or a spec string (``"keydoor:horizon=40"``).
        steps: the most random actions per trial (fewer when the episode ends first).
        trials: episodes, reset with seeds ``seed, seed + 1, ...``.
        seed: base seed of the env resets and of the random action choice.
        restores: random restore depths per trial (each in ``0..steps``, clamped to the episode's length).
        continue_steps: recorded actions replayed after each restore to check the restored env lives on
            identically.

    Raises:
        UnknownEnvError / TypeError / ValueError: the spec cannot be built (message lists what is accepted).
        ValueError: non-positive ``steps`` / ``trials`` or negative ``restores`` / ``continue_steps``.
    """
    if steps < 1 or trials < 1 or restores < 0 or continue_steps < 0:
        raise ValueError(
            "check_replay needs steps >= 1, trials >= 1, restores >= 0 and continue_steps >= 0; got "
            f"steps={steps}, trials={trials}, restores={restores}, continue_steps={continue_steps}"
        )
    spec = parse_spec(spec) if isinstance(spec, str) else spec
    report = ReplayCheckReport(spec=spec)
    start = time.perf_counter()
    for trial in range(trials):
        rng = random.Random(f"check-replay:{seed}:{trial}")
        depths = sorted({rng.randint(0, steps) for _ in range(restores)})
        env = make(spec)
        forks: dict[int, RecordedEnv] = {}
        try:
            env.reset(seed + trial)
            walkthrough = env.walkthrough()
            while True:
                if env.round_index in depths and env.supports_fork:
                    forks[env.round_index] = env.fork()
                if env.done or env.round_index >= steps:
                    break
                env.step(_choose(env, rng, walkthrough))
            played = env.round_index
            full: Snapshot = env.snapshot()
            if env.supports_fork and played not in forks and any(d > played for d in depths):
                forks[played] = env.fork()
        finally:
            env.close()
        report.trials += 1
        report.steps_played += played
        for depth in sorted({min(d, played) for d in depths}):
            target = snapshot_prefix(full, min(depth + continue_steps, played))
            try:
                restored = restore(snapshot_prefix(full, depth), verify=True)
                try:
                    continue_replay(restored, target, verify=True)
                finally:
                    restored.close()
            except (ReplayDivergenceError, SnapshotMismatchError, RuntimeError, ValueError) as exc:
                _record(report, trial, depth, "replay", exc)
            report.replay_restores += 1
            fork = forks.get(depth)
            if fork is not None:
                try:
                    continue_replay(fork, target, verify=True)
                except (ReplayDivergenceError, SnapshotMismatchError, RuntimeError, ValueError) as exc:
                    _record(report, trial, depth, "fork", exc)
                report.fork_restores += 1
        for fork in forks.values():
            fork.close()
    report.seconds = time.perf_counter() - start
    return report
