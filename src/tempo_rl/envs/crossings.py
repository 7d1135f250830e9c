"""Crossings: a long trail with several river crossings, where each slow choice costs steps the end may lack.

The agent walks a one-way trail of ``R`` rooms to a camp. ``crossings`` of the rooms hold a river with two ways
across, a bridge and a ford (``"A river. Ways across: ford, bridge."``, the order drawn per crossing):

* the **quick** way puts the agent in the next room at once (``"You cross by the bridge."``);
* the **slow** way leads along the river bank for ``detour`` rooms (``"The ford is a long way round."``, then
  ``go on`` along the bank) before the next room: it costs exactly ``detour`` extra steps.

Reward is 1 only on reaching the camp (``go on`` in the last room, ``terminated=True``); reaching ``horizon``
steps first gives ``truncated=True`` and reward 0. The trail is sized so that the expert walk takes ``R = horizon
- slack`` steps with ``slack = max(3, horizon // 8)``; by default ``detour = slack // 2 + 1``, so one slow choice
still leaves a few spare steps and a second loses the episode. Nothing says so when it happens: the episode runs
on to its step limit.

Unlike :mod:`~tempo_rl.envs.keydoor`, no single choice decides the episode: the outcome turns on how many slow
choices the whole walk makes (and on the steps wasted on refused actions), so the return is a late, joint
consequence of every crossing, the credit-assignment problem macro-step values address.

Actions (2 words): ``take bridge``, ``take ford`` (at a river), ``go on`` (elsewhere; at a river ``"The river
blocks the way."``). Anything else -> ``"Nothing happens."`` (a step is still used). Observations: the step
feedback, ``Room r of R.``, the room, the steps left. Privileged info (critic only): the layout with each
crossing's quick way, and how the expert walks it; with ``state_note`` every observation's
:attr:`~tempo_rl.envs.Observation.privileged_state` gives the spare steps and the crossings ahead
(:meth:`CrossingsEnv.spare_note`).

``quick`` picks which way is quick: ``"random"`` (default; drawn per crossing with the layout and shown to
nobody but the critic: the walk is a coin toss at each river) or a way (``"bridge"``: the bridge is quick at
every crossing of every game, a rule an agent can learn from reward alone).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from tempo_rl.envs.core import check_steps_left
from tempo_rl.envs.goal import GoalEnv

__all__ = ["WAYS", "Crossing", "CrossingsEnv"]

#: The two ways across a river.
WAYS = ("bridge", "ford")

_TASK = "Reach the camp at the end of the trail."


@dataclass(frozen=True)
class Crossing:
    """One river on the trail.

    Attributes:
        room: the room index (0-based) that holds the river.
        quick: the way that crosses at once; the other is a ``detour``-room walk along the bank.
        shown: the two ways in the order the room lists them.
    """

    room: int
    quick: str
    shown: tuple[str, str]


class CrossingsEnv(GoalEnv):
    """The Crossings trail (see the module docstring for the rules).

    Args:
        horizon: the step limit T, 12..200.
        crossings: the number of rivers, 1..(R - 2) // 2 (rivers never sit in the first or last room nor side by
            side); default 4 from horizon 40, else 3 from 24, else 2.
        detour: the extra steps a slow way costs, >= 1; default ``slack // 2 + 1`` (one slow way is survivable
            with ``slack - detour`` steps to spare, two are not).
        quick: ``"random"`` (default), ``"bridge"`` or ``"ford"``: which way is quick (see the module docstring).
        state_note: every observation carries a critic-only
            :attr:`~tempo_rl.envs.Observation.privileged_state` with the spare steps and the crossings ahead
            (:meth:`spare_note`). Default ``False``.
    """

    task = _TASK

    def __init__(
        self,
        horizon: int = 48,
        crossings: int | None = None,
        detour: int | None = None,
        quick: str = "random",
        state_note: bool = False,
    ) -> None:
        if not isinstance(horizon, int) or isinstance(horizon, bool) or not 12 <= horizon <= 200:
            raise ValueError(f"horizon must be an int in 12..200, got {horizon!r}")
        slack = max(3, horizon // 8)
        rooms = horizon - slack
        if crossings is None:
            crossings = 4 if horizon >= 40 else 3 if horizon >= 24 else 2
        most = (rooms - 2) // 2
        if not isinstance(crossings, int) or isinstance(crossings, bool) or not 1 <= crossings <= most:
            raise ValueError(
                f"crossings must be an int in 1..{most} for horizon {horizon}, got {crossings!r}"
            )
        if detour is None:
            detour = slack // 2 + 1
        if not isinstance(detour, int) or isinstance(detour, bool) or detour < 1:
            raise ValueError(f"detour must be an int >= 1 (extra steps of a slow way), got {detour!r}")
        if quick not in ("random", *WAYS):
            raise ValueError(f"quick must be 'random', 'bridge' or 'ford', got {quick!r}")
        if not isinstance(state_note, bool):
            raise ValueError(f"state_note must be true or false, got {state_note!r}")
        self.horizon = horizon
        self.crossings = crossings
        self.detour = detour
        self.quick = quick
        self.state_note = state_note
        self.rooms = rooms
        self._seed: int | None = None
        self._rivers: dict[int, Crossing] = {}
        self._room = 0
        self._bank = 0  # 0 on the trail, else the bank room (1..detour) of the river in ``_room``
        self._steps = 0
        self._done = False
        self._won = False

    # ------------------------------------------------------------------ layout
    def _generate(self, seed: int | None) -> dict[int, Crossing]:
        rng = random.Random(f"crossings:{self.horizon}:{self.crossings}:{0 if seed is None else seed}")
        # rivers in rooms 1..R-2, never side by side: choose c of the R-2-(c-1) slots, spread by one
        slots = sorted(rng.sample(range(self.rooms - 2 - (self.crossings - 1)), self.crossings))
        rivers = {}
        for n, slot in enumerate(slots):
            room = 1 + slot + n
            drawn = rng.choice(WAYS)  # drawn in every mode, so that a fixed way changes nothing else
            shown = (WAYS[0], WAYS[1]) if rng.random() < 0.5 else (WAYS[1], WAYS[0])
            rivers[room] = Crossing(room, drawn if self.quick == "random" else self.quick, shown)
        return rivers

    def layout(self) -> tuple[Crossing, ...]:
        """The rivers of the current episode, in trail order (privileged)."""
        return tuple(self._rivers[r] for r in sorted(self._rivers))

    # ------------------------------------------------------------------ text
    def _describe(self) -> str:
        if self._bank:
            return f"A river bank. Steps to the far side: {self.detour - self._bank + 1}."
        river = self._rivers.get(self._room)
        if river is not None:
            return f"A river. Ways across: {', '.join(river.shown)}."
        return "The camp is ahead." if self._room == self.rooms - 1 else "A trail."

    def _admissible(self) -> tuple[str, ...]:
        if self._done:
            return ()
        river = self._rivers.get(self._room)
        if river is not None and not self._bank:
            return tuple(f"take {way}" for way in river.shown)
        return ("go on",)

    def _where(self) -> str:
        return f"Room {self._room + 1} of {self.rooms}. {self._describe()}"

    def _note(self) -> str:
        return self.spare_note()

    # ------------------------------------------------------------------ env protocol
    def _start(self, seed: int | None) -> None:
        self._rivers = self._generate(seed)
        self._room = 0
        self._bank = 0

    def _apply(self, action: str) -> tuple[str, bool]:
        river = self._rivers.get(self._room)
        if self._bank:
            if action != "go on":
                return "Nothing happens.", False
            if self._bank < self.detour:
                self._bank += 1
                return "You walk the bank.", False
            self._bank = 0
            self._room += 1
            return "You reach the far side.", False
        if river is not None:
            verb, _, way = action.partition(" ")
            if verb == "take" and way in WAYS:
                if way == river.quick:
                    self._room += 1
                    return f"You cross by the {way}.", False
                self._bank = 1
                return f"The {way} is a long way round.", False
            if action == "go on":
                return "The river blocks the way.", False
            return "Nothing happens.", False
        if action == "go on":
            if self._room == self.rooms - 1:
                return "You reach the camp. You win.", True
            self._room += 1
            return "You go on.", False
        return "Nothing happens.", False

    # ------------------------------------------------------------------ privileged / replay support
    def shortest_exit_steps(self) -> int | None:
        """The fewest steps from the current state to the camp (None once the episode is over).

        On the trail in room ``i`` (0-based): ``R - i`` (one step per room, each river by its quick way, and the
        ``go on`` into the camp). On the bank room ``p`` of the river in room ``i``: ``detour - p + 1`` steps to
        room ``i + 1``, so ``detour - p + R - i`` in all."""
        if self._done:
            return None
        if self._bank:
            return self.detour - self._bank + self.rooms - self._room
        return self.rooms - self._room

    def spare_steps(self) -> int | None:
        """``(horizon - steps) - shortest_exit_steps``: the steps the agent can still waste and win (negative:
        the camp is out of reach; None once the episode is over)."""
        need = self.shortest_exit_steps()
        return None if need is None else self.horizon - self._steps - need

    def spare_note(self) -> str:
        """The critic-only note of the state: ``"The camp is out of reach."`` when the spare steps
        (:meth:`spare_steps`) are negative, else ``"Spare steps: <s>. Rivers ahead: <c>."`` with ``c`` the
        crossings not yet reached (the one the agent stands at counts until it is across). A slow way spends
        ``detour`` of the spare steps; whether the agent will take it is the value the critic estimates."""
        spare = self.spare_steps()
        if spare is None or spare < 0:
            return "The camp is out of reach."
        ahead = sum(1 for r in self._rivers if r > self._room or (r == self._room and not self._bank))
        return f"Spare steps: {spare}. Rivers ahead: {ahead}."

    def oracle_value(self, steps_left: int) -> float | None:
        """``V* = 1`` when the camp can be reached within ``min(steps_left, horizon - steps)`` more steps, else 0
        (:meth:`shortest_exit_steps`). 0 once the episode is over."""
        check_steps_left(steps_left)
        need = self.shortest_exit_steps()
        budget = min(steps_left, self.horizon - self._steps)
        return 1.0 if need is not None and need <= budget else 0.0

    def expert_action(self) -> str | None:
        """The quick way at a river, else ``go on``; None when the episode is over or the camp is out of
        reach."""
        spare = self.spare_steps()
        if spare is None or spare < 0:
            return None
        river = self._rivers.get(self._room)
        return f"take {river.quick}" if river is not None and not self._bank else "go on"

    def walkthrough(self) -> tuple[str, ...] | None:
        return tuple(
            f"take {self._rivers[r].quick}" if r in self._rivers else "go on" for r in range(self.rooms)
        )

    def privileged_info(self) -> str | None:
        rivers = [
            f"room {c.room + 1}: river, the {c.quick} is quick, the other way a {self.detour}-room detour"
            for c in self.layout()
        ]
        return (
            "Hidden layout: "
            + "; ".join(rivers)
            + f"; room {self.rooms}: camp. Each slow way costs {self.detour} steps. The expert walk takes the quick "
            + f"way at every river and goes on everywhere else: {self.rooms} steps of the {self.horizon}."
        )

    def fork(self) -> CrossingsEnv:
        copy = CrossingsEnv.__new__(CrossingsEnv)
        copy.__dict__.update(self.__dict__)
        return copy

    def state_fingerprint(self) -> str | None:
        payload = f"{self._seed}|{self._room}|{self._bank}|{self._steps}|{self._done}|{self._won}"
        return hashlib.sha256(payload.encode()).hexdigest()[:16]
