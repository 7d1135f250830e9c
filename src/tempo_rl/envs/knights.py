"""Knights: the TEMPO blog's knight-placement puzzle with a hidden rule.

A ``size x size`` board (files ``a..``, ranks ``1..``) starts with ``preplaced`` fixed pieces; the actor must
place ``place`` more so that no two pieces *conflict*. The rule, hidden from the actor, is that two pieces
conflict when they are a knight's move apart (``|dx|, |dy| = {1, 2}``); since a knight's move always changes
square colour, pieces on squares of one colour never conflict. The actor learns the rule from feedback:

* ``feedback="immediate"`` (default): a placement that would conflict is refused with
  ``"Rejected: two pieces conflict."`` (the board is unchanged).
* ``feedback="final"``: every placement is accepted; when ``place`` pieces are on the board the env gives its
  verdict, ``"Solved."`` or ``"Not solved: some pieces conflict."`` (the actor may then remove pieces).

Actions: ``place <square>`` on an empty square, ``remove <square>`` for a piece the actor placed (fixed pieces
cannot move). Any other text is refused with feedback, never an exception; a refused action still uses a step.

Reward 1 and ``terminated=True`` when ``place`` non-conflicting pieces have been added; ``truncated=True``
with
reward 0 after ``max_steps`` steps. Instances are seeded and guaranteed solvable (a solution is found by
depth-first search when the instance is generated). Privileged info: the rule and one solution; every
observation's :attr:`~tempo_rl.envs.Observation.privileged_state` (critic-only) names the pairs of pieces that
conflict now (``"Pieces b1 c3 conflict."``) or says ``"No two pieces conflict."``.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from typing import Literal

from tempo_rl.envs.core import Observation, ReplayableEnv, StepResult, check_steps_left

__all__ = ["KnightsEnv", "knight_attacks", "square_name"]

_KNIGHT_DELTAS = ((1, 2), (2, 1), (-1, 2), (-2, 1), (1, -2), (2, -1), (-1, -2), (-2, -1))

Square = tuple[int, int]


def square_name(square: Square) -> str:
    """Algebraic name of a 0-based ``(file, rank)`` square, e.g. ``(2, 0) -> "c1"``."""
    return f"{chr(ord('a') + square[0])}{square[1] + 1}"


def knight_attacks(a: Square, b: Square) -> bool:
    """True when ``a`` and ``b`` are a knight's move apart (``{|dx|, |dy|} == {1, 2}``)."""
    dx, dy = abs(a[0] - b[0]), abs(a[1] - b[1])
    return (dx, dy) in ((1, 2), (2, 1))


def _solve(size: int, fixed: frozenset[Square], count: int, rng: random.Random) -> tuple[Square, ...] | None:
    """Depth-first search for ``count`` more squares, none attacking each other or ``fixed``; None if none."""
    candidates = [
        (x, y)
        for x in range(size)
        for y in range(size)
        if (x, y) not in fixed and not any(knight_attacks((x, y), f) for f in fixed)
    ]
    rng.shuffle(candidates)
    chosen: list[Square] = []

    def search(start: int) -> bool:
        if len(chosen) == count:
            return True
        if len(candidates) - start < count - len(chosen):
            return False
        for index in range(start, len(candidates)):
            square = candidates[index]
            if any(knight_attacks(square, other) for other in chosen):
                continue
            chosen.append(square)
            if search(index + 1):
                return True
            chosen.pop()
        return False

    return tuple(chosen) if search(0) else None


class KnightsEnv(ReplayableEnv):
    """The knight-placement puzzle (see the module docstring for the rules and texts).

    Args:
        size: board side, 4..8.
        preplaced: fixed pieces at reset (mutually non-conflicting), >= 0.
        place: pieces the actor must add, >= 1.
        max_steps: step limit (truncation); default ``4 * place``.
        feedback: ``"immediate"`` (refuse conflicting placements) or ``"final"`` (verdict when full).
    """

    def __init__(
        self,
        size: int = 6,
        preplaced: int = 2,
        place: int = 6,
        max_steps: int | None = None,
        feedback: Literal["immediate", "final"] = "immediate",
    ) -> None:
        if not isinstance(size, int) or not 4 <= size <= 8:
            raise ValueError(f"size must be an int in 4..8, got {size!r}")
        if not isinstance(preplaced, int) or preplaced < 0:
            raise ValueError(f"preplaced must be an int >= 0, got {preplaced!r}")
        if not isinstance(place, int) or place < 1:
            raise ValueError(f"place must be an int >= 1, got {place!r}")
        # A knight's move changes colour, so one colour class (ceil(size^2 / 2) squares) is conflict-free; the
        # maximum for size >= 3 is exactly that.
        if preplaced + place > (size * size + 1) // 2:
            raise ValueError(
                f"preplaced + place = {preplaced + place} exceeds the most non-conflicting pieces on a "
                f"{size}x{size} board ({(size * size + 1) // 2}); lower them or enlarge the board"
            )
        if max_steps is None:
            max_steps = 4 * place
        if not isinstance(max_steps, int) or max_steps < place:
            raise ValueError(f"max_steps must be an int >= place ({place}), got {max_steps!r}")
        if feedback not in ("immediate", "final"):
            raise ValueError(f"feedback must be 'immediate' or 'final', got {feedback!r}")
        self.size = size
        self.preplaced = preplaced
        self.place = place
        self.max_steps = max_steps
        self.feedback = feedback
        self._seed: int | None = None
        self._fixed: frozenset[Square] = frozenset()
        self._placed: list[Square] = []
        self._solution: tuple[Square, ...] = ()
        self._steps = 0
        self._done = False
        self._won = False

    # ------------------------------------------------------------------ instance generation
    def _generate(self, seed: int | None) -> None:
        rng = random.Random(
            f"knights:{self.size}:{self.preplaced}:{self.place}:{0 if seed is None else seed}"
        )
        squares = [(x, y) for x in range(self.size) for y in range(self.size)]
        for _ in range(10_000):
            fixed: list[Square] = []
            for square in rng.sample(squares, len(squares)):
                if len(fixed) == self.preplaced:
                    break
                if not any(knight_attacks(square, f) for f in fixed):
                    fixed.append(square)
            if len(fixed) < self.preplaced:
                continue
            solution = _solve(self.size, frozenset(fixed), self.place, rng)
            if solution is not None:
                self._fixed = frozenset(fixed)
                self._solution = tuple(sorted(solution))
                return
        raise RuntimeError("could not generate a solvable knights instance")  # pragma: no cover

    # ------------------------------------------------------------------ text
    def _names(self, squares: object) -> str:
        ordered = sorted(squares)  # type: ignore[call-overload]
        return " ".join(square_name(s) for s in ordered) if ordered else "none"

    def task(self) -> str:
        """The task sentence (also at the start of the reset observation)."""
        board = f"{self.size}x{self.size}"
        return f"Place {self.place} more pieces on the {board} board so that no two pieces conflict."

    def _observation(self, feedback: str) -> Observation:
        steps_left = self.max_steps - self._steps
        parts = [feedback] if feedback else []
        parts.append(
            f"Fixed: {self._names(self._fixed)}. Placed: {self._names(self._placed)}. "
            f"Placed {len(self._placed)} of {self.place}. Steps left: {steps_left}."
        )
        return Observation(
            text=" ".join(parts),
            admissible_actions=None if self._done else self._admissible(),
            info={"task": self.task(), "placed": len(self._placed), "steps_left": steps_left},
            privileged_state=self._conflict_note(),
        )

    def conflicting_pairs(self) -> list[tuple[Square, Square]]:
        """The pairs of pieces on the board (fixed and placed) a knight's move apart, in board order."""
        pieces = sorted(self._fixed | set(self._placed))
        return [(a, b) for i, a in enumerate(pieces) for b in pieces[i + 1 :] if knight_attacks(a, b)]

    def _conflict_note(self) -> str:
        pairs = self.conflicting_pairs()
        if not pairs:
            return "No two pieces conflict."
        return "Pieces " + ", ".join(f"{square_name(a)} {square_name(b)}" for a, b in pairs) + " conflict."

    def _admissible(self) -> tuple[str, ...]:
        occupied = self._fixed | set(self._placed)
        actions = [
            f"place {square_name((x, y))}"
            for y in range(self.size)
            for x in range(self.size)
            if (x, y) not in occupied and len(self._placed) < self.place
        ]
        actions += [f"remove {square_name(s)}" for s in sorted(self._placed, key=lambda s: (s[1], s[0]))]
        return tuple(actions)

    def _parse_square(self, text: str) -> Square | None:
        if len(text) < 2 or not text[1:].isdigit():
            return None
        x, y = ord(text[0]) - ord("a"), int(text[1:]) - 1
        if 0 <= x < self.size and 0 <= y < self.size:
            return (x, y)
        return None

    def _conflicts(self) -> bool:
        return bool(self.conflicting_pairs())

    # ------------------------------------------------------------------ env protocol
    def reset(self, seed: int | None = None) -> Observation:
        self._seed = seed
        self._generate(seed)
        self._placed = []
        self._steps = 0
        self._done = False
        self._won = False
        return self._observation(f"Task: {self.task()}")

    def step(self, action: str) -> StepResult:
        if self._done:
            return StepResult(self._observation("The episode is over."), 0.0, self._won, not self._won)
        self._steps += 1
        feedback = self._apply(" ".join(str(action).strip().lower().split()))
        reward = 0.0
        terminated = False
        if len(self._placed) == self.place and not self._conflicts():
            feedback += " Solved."
            reward, terminated, self._won = 1.0, True, True
        elif self.feedback == "final" and len(self._placed) == self.place and feedback.startswith("Placed"):
            feedback += " Not solved: some pieces conflict."
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        return StepResult(self._observation(feedback), reward, terminated, truncated, info={"won": self._won})

    def _apply(self, action: str) -> str:
        verb, _, target = action.partition(" ")
        square = self._parse_square(target.strip())
        if verb not in ("place", "remove") or square is None:
            return "Rejected: unknown action. Use place or remove with a square such as c3."
        name = square_name(square)
        if verb == "remove":
            if square in self._fixed:
                return f"Rejected: {name} is fixed."
            if square not in self._placed:
                return f"Rejected: no piece on {name}."
            self._placed.remove(square)
            return f"Removed {name}."
        if square in self._fixed or square in self._placed:
            return f"Rejected: {name} is taken."
        if len(self._placed) >= self.place:
            return f"Rejected: all {self.place} pieces are placed. Remove one first."
        if self.feedback == "immediate" and any(
            knight_attacks(square, other) for other in self._fixed | set(self._placed)
        ):
            return "Rejected: two pieces conflict."
        self._placed.append(square)
        return f"Placed {name}."

    # ------------------------------------------------------------------ privileged / replay support
    def privileged_info(self) -> str | None:
        solution = " ".join(square_name(s) for s in self._solution)
        return (
            "Hidden rule: two pieces conflict when they are a knight's move apart (two squares in one "
            "direction and one in the other). A knight's move always changes square colour, so pieces on "
            "squares of the "
            f"same colour never conflict. Fixed pieces: {self._names(self._fixed)}. "
            f"One solution: place {solution}."
        )

    def walkthrough(self) -> tuple[str, ...] | None:
        return tuple(f"place {square_name(s)}" for s in self._solution)

    def expert_action(self) -> str | None:
        """The next action towards a solution from the current state (noisy demonstrations); None when done.

        Removes a placed piece that is not part of the stored solution, else places the next missing one.
        """
        if self._done:
            return None
        for square in self._placed:
            if square not in self._solution:
                return f"remove {square_name(square)}"
        for square in self._solution:
            if square not in self._placed:
                return f"place {square_name(square)}"
        return None  # pragma: no cover - solved states are done

    def shortest_solve_steps(self) -> int | None:
        """The fewest steps from the current state to a solved board (None once the episode is over).

        Exact: a solution is a set ``S`` of ``place`` squares, none attacking another or a fixed piece. From the
        placed pieces ``P`` it takes ``|P - S|`` removals (done first, so every later placement is legal in
        both feedback modes) and ``|S - P|`` placements, so with ``k = |P & S|``::

            steps = (|P| - k) + (place - k)

        minimised by the largest subset of ``P`` (conflict-free, with the fixed pieces) that a depth-first
        search extends by ``place - k`` more squares to a solution. The instance is solvable by construction,
        so ``k = 0`` always succeeds.
        """
        if self._done:
            return None
        placed = list(self._placed)
        for k in range(len(placed), -1, -1):
            for keep in itertools.combinations(placed, k):
                board = self._fixed | set(keep)
                pieces = sorted(board)
                if any(knight_attacks(a, b) for i, a in enumerate(pieces) for b in pieces[i + 1 :]):
                    continue
                if _solve(self.size, frozenset(board), self.place - k, random.Random(0)) is not None:
                    return (len(placed) - k) + (self.place - k)
        return None  # pragma: no cover - the instance is solvable by construction (k = 0 succeeds)

    def oracle_value(self, steps_left: int) -> float | None:
        """``V* = 1`` when a solved board is reachable within ``min(steps_left, max_steps - steps)`` more steps,
        else 0 (reward 1 only when solved; see :meth:`shortest_solve_steps`). 0 once the episode is over."""
        check_steps_left(steps_left)
        need = self.shortest_solve_steps()
        budget = min(steps_left, self.max_steps - self._steps)
        return 1.0 if need is not None and need <= budget else 0.0

    def fork(self) -> KnightsEnv:
        copy = KnightsEnv.__new__(KnightsEnv)
        copy.__dict__.update(self.__dict__)
        copy._placed = list(self._placed)
        return copy

    def state_fingerprint(self) -> str | None:
        payload = (
            f"{self.size}|{sorted(self._fixed)}|{self._placed}|{self._steps}|{self._done}|{self._won}|"
            f"{self._seed}"
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]
