"""``check_replay``: does an env restore exactly? Random play, restores at random depths, compare every step.

For each trial the env is reset with seed ``seed + trial`` and played for up to ``steps`` random actions,
taking a snapshot (and a native fork when the env supports one) at ``restores`` random depths. Each action is,
with probability ``invalid_share``, one the env should reject (see :func:`invalid_action`): an inadmissible
command built from the admissible ones, or free text (an unreadable tool call's sentinel, prose, an empty
string); otherwise a random admissible action (the walkthrough, or ``"look"``, when the env lists none). Every
choice is drawn from a generator seeded by ``seed`` and the trial, so a check is exact to repeat. Playing
rejected actions matters because agents send them often: an env whose state or text changes
nondeterministically only after an action it rejects passes a check of admissible actions alone
(``invalid_share=0``). Each snapshot is then

* restored by **replay** (fresh env + reset + replay, every observation digest and state fingerprint verified)
  and played ``continue_steps`` further with the recorded actions, verified again;
* when the env supports ``fork()``, the fork taken during play is played ``continue_steps`` further the same
  way (this catches forks that share state with their parent, which the original's later steps would change).

Any mismatch is recorded as a :class:`Divergence`; :attr:`ReplayCheckReport.ok` is False if there is one. An
env that raises on a rejected action during play breaks the contract (a rejected action returns feedback,
never raises): it is recorded as a divergence of method ``"play"`` naming the step and the action, and the
trial's play stops there.
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

#: what agents send that is not a command: the sentinel the rollout sends for an unreadable tool call
#: (:data:`tempo_rl.rollout.tool_call.INVALID_ACTION`), prose, an empty or blank action, a compound command,
#: non-ASCII text and a long repetition
FREE_TEXT: tuple[str, ...] = (
    "__invalid_tool_call__",
    "I should look around first.",
    "",
    "   ",
    "help",
    "take everything and then open the door",
    "go; look; inventory",
    "prendre la clé → nord",
    "look " * 30,
)


@dataclass(frozen=True)
class Divergence:
    """One failed restore: where it was restored from, how, and where it diverged."""

    trial: int
    depth: int
    method: str  # "replay", "fork" or "play" (the env raised on an action while it was played)
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
        invalid_actions: how many of them were rejected-action draws (inadmissible commands and free text).
        replay_restores: snapshots restored by replay.
        fork_restores: snapshots checked through a native fork (0 when the env cannot fork).
        divergences: every mismatch found.
        seconds: wall time of the whole check.
    """

    spec: EnvSpec
    trials: int = 0
    steps_played: int = 0
    invalid_actions: int = 0
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
            "invalid_actions": self.invalid_actions,
            "replay_restores": self.replay_restores,
            "fork_restores": self.fork_restores,
            "divergences": [asdict(d) for d in self.divergences],
            "seconds": round(self.seconds, 4),
        }

    def summary(self) -> str:
        """A short human-readable verdict."""
        verdict = "OK" if self.ok else f"FAILED: {len(self.divergences)} divergence(s)"
        lines = [
            f"check-replay {self.spec.key()}: {verdict} ({self.trials} trials, {self.steps_played} steps of "
            f"which {self.invalid_actions} invalid, {self.replay_restores} replay restores, "
            f"{self.fork_restores} fork restores, {self.seconds:.2f} s)"
        ]
        for d in self.divergences[:10]:
            lines.append(f"  trial {d.trial} depth {d.depth} via {d.method}: {d.message}")
        return "\n".join(lines)


def invalid_action(admissible: tuple[str, ...] | None, rng: random.Random) -> str:
    """An action an env is expected to reject, drawn from ``rng``: half the time (when one can be built) an
    inadmissible command, else free text (:data:`FREE_TEXT`, less any entry the env lists as admissible).

    The inadmissible command is the first word of one admissible action followed by the rest of another
    (``"take"`` + ``"door"``); it is never one of ``admissible``. An env that lists no admissible actions gets
    free text only.
    """
    if admissible and rng.random() < 0.5:
        for _ in range(8):
            verb = rng.choice(admissible).split(" ", 1)[0]
            rest = rng.choice(admissible).split(" ", 1)[1:]
            command = " ".join([verb, *rest])
            if command not in admissible:
                return command
    texts = [t for t in FREE_TEXT if not admissible or t not in admissible]
    return rng.choice(texts) if texts else FREE_TEXT[0]


def _choose(
    env: RecordedEnv, rng: random.Random, walkthrough: tuple[str, ...] | None, invalid_share: float
) -> tuple[str, bool]:
    """The next action of the random play, and whether it is a rejected-action draw."""
    admissible = env.last_observation.admissible_actions
    if invalid_share > 0 and rng.random() < invalid_share:
        return invalid_action(admissible, rng), True
    if admissible:
        return rng.choice(admissible), False
    if walkthrough and env.round_index < len(walkthrough):
        return walkthrough[env.round_index], False
    return "look", False


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
    invalid_share: float = 0.2,
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
        invalid_share: the probability, in [0, 1], that an action of the random play is one the env should
            reject (an inadmissible command or free text, see :func:`invalid_action`) instead of an admissible
            one; 0 plays admissible actions only.

    Raises:
        UnknownEnvError / TypeError / ValueError: the spec cannot be built (message lists what is accepted).
        ValueError: non-positive ``steps`` / ``trials``, negative ``restores`` / ``continue_steps``, or
            ``invalid_share`` outside [0, 1].
    """
    if not 0.0 <= invalid_share <= 1.0:
        raise ValueError(f"check_replay needs invalid_share in [0, 1] (a probability); got {invalid_share!r}")
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
                action, invalid = _choose(env, rng, walkthrough, invalid_share)
                try:
                    env.step(action)
                except Exception as exc:  # the contract: a rejected action returns feedback, never raises
                    if not invalid:
                        raise
                    step = env.round_index + 1
                    report.divergences.append(
                        Divergence(
                            trial,
                            env.round_index,
                            "play",
                            step,
                            action,
                            f"the env raised on the rejected action {action!r} at step {step} (it must return "
                            f"feedback instead): {type(exc).__name__}: {exc}",
                        )
                    )
                    break
                report.invalid_actions += invalid
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
