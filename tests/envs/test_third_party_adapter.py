"""A complete new adapter in under 50 lines, written only against the public API, restored and branched."""

from __future__ import annotations

from tempo_rl.envs import (
    ForkCache,
    Observation,
    ReplayableEnv,
    StepResult,
    check_replay,
    make,
    register,
    restore,
    restore_branches,
    unregister,
)


class Nim(ReplayableEnv):
    """Take 1-3 stones from a heap; whoever takes the last stone wins. The opponent plays heap % 4."""

    def __init__(self, heap: int = 15) -> None:
        self.start, self.heap = heap, heap

    def reset(self, seed: int | None = None) -> Observation:
        self.heap = self.start + (seed or 0) % 4
        return self._obs(f"Task: take the last stone. Heap: {self.heap}.")

    def _obs(self, text: str) -> Observation:
        moves = tuple(f"take {k}" for k in (1, 2, 3) if k <= self.heap)
        return Observation(text, moves, {"task": "Take the last stone."})

    def step(self, action: str) -> StepResult:
        if action not in self._obs("").admissible_actions:  # type: ignore[operator]
            return StepResult(self._obs(f"You cannot {action!r}. Heap: {self.heap}."))
        self.heap -= int(action.split()[1])
        if self.heap == 0:
            return StepResult(self._obs("You took the last stone. You win."), 1.0, terminated=True)
        reply = self.heap % 4 or 1
        self.heap -= reply
        if self.heap == 0:
            return StepResult(self._obs(f"I take {reply}. I win."), 0.0, terminated=True)
        return StepResult(self._obs(f"I take {reply}. Heap: {self.heap}."))

    def fork(self) -> Nim:
        copy = Nim(self.start)
        copy.heap = self.heap
        return copy

    def walkthrough(self) -> tuple[str, ...] | None:
        return None


def test_new_adapter_restores_branches_and_passes_check_replay():
    register("test-nim", Nim, overwrite=True)
    try:
        env = make("test-nim", heap=21)
        assert env.reset(seed=1).text == "Task: take the last stone. Heap: 22."
        env.step("take 2")  # 20 left, the opponent takes 20 % 4 or 1 = 1
        env.step("take five")  # refused with feedback
        assert env.last_observation.text == "You cannot 'take five'. Heap: 19."
        snap = env.snapshot()
        cache = ForkCache()
        first = restore(snap, cache=cache)
        assert first.last_observation == env.last_observation and cache.stats.misses == 1
        branches = restore_branches(snap, 3, cache=cache)
        assert cache.stats.hits == 1
        branches[0].step("take 3")
        # 19 - 3 = 16, the opponent replies 16 % 4 or 1 = 1: 15 left; the other branches are untouched
        assert [b.env.heap for b in branches] == [15, 19, 19]  # type: ignore[attr-defined]
        assert check_replay("test-nim:heap=30", steps=20, trials=3).ok
    finally:
        unregister("test-nim")
