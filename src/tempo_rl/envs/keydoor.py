"""KeyDoor: a long-horizon corridor with delayed reward, where early key choices decide the outcome.

The agent walks a corridor of rooms to the exit. Along the way, for each of ``keys`` locks:

* a **clue** room shows a sign, ``"A sign shows a blue key."``;
* a few rooms later a **key** room offers keys of several colours (``"Keys here: red, blue, green."``); taking
  one (``take blue``) makes the others vanish, so the choice is final;
* much later (after every key room) a **lock** room holds ``"A locked door."``; ``open door`` opens it only if
  the agent carries the key of the colour its clue showed (the key is used up), else ``"The door stays
  locked."`` and the corridor beyond is unreachable.

The lock never names its colour, so the clue must be remembered from the sign until the key choice (unless
``clue_at_key`` repeats it in the key room), and a wrong (or skipped-and-forgotten) choice early in the episode
makes success impossible many steps later; nothing says "you lost": the episode simply runs to its step limit.
Reward is 1 only on leaving through the exit (``terminated=True``); reaching ``horizon`` steps first gives
``truncated=True`` and reward 0. The horizon is a parameter; the corridor is sized so that the expert
walkthrough takes about ``horizon - max(3, horizon // 8)`` steps, so there is little slack for detours.

Actions (2 words): ``go on``, ``go back``, ``take <colour>``, ``open door``. Anything else -> ``"Nothing
happens."`` (a step is still used). Observations are short templated sentences (< 40 words): the step
feedback, ``Room r of R.``, the room description, the carried keys and the steps left. Privileged info (critic
only): the whole layout with the colour each lock needs, and the expert walkthrough; with ``state_note`` every
observation's :attr:`~tempo_rl.envs.Observation.privileged_state` also says whether the keys carried and the key
rooms left can still open every lock, and how many steps the agent can still waste (:meth:`KeyDoorEnv.lock_note`).

Why it is the TEMPO testbed: the probability of success after a random key choice is ``1 / colours`` per lock,
so random play wins about ``colours ** -keys`` of episodes and trajectory-level GRPO sees mostly all-failure
groups, whereas a critic with the layout can value a state right after each key choice.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from tempo_rl.envs.core import check_steps_left
from tempo_rl.envs.goal import GoalEnv

__all__ = ["COLOURS", "KeyDoorEnv", "Room"]

#: Key colours, in the order they are drawn from.
COLOURS = ("red", "blue", "green", "yellow", "white")

_TASK = "Reach the exit at the end of the corridor."


@dataclass(frozen=True)
class Room:
    """One room of the corridor.

    Attributes:
        kind: ``"clue"``, ``"key"``, ``"lock"``, ``"plain"`` or ``"exit"``.
        lock: the index of the lock this clue/key/lock room belongs to (-1 for plain and exit rooms).
        colour: the colour the clue shows / the lock needs (``""`` otherwise).
        offered: the key colours offered in a key room, in display order.
    """

    kind: str
    lock: int = -1
    colour: str = ""
    offered: tuple[str, ...] = ()


class KeyDoorEnv(GoalEnv):
    """The KeyDoor corridor (see the module docstring for the rules).

    Args:
        horizon: the step limit, 12..200 (30-60 is the intended range).
        keys: the number of clue/key/lock triples; default 2 below horizon 30, 3 below 50, else 4.
        colours: how many key colours a key room offers, 2..5.
        clue_gap: the number of empty rooms between each clue and its key room (0 = adjacent, so the clue is
            the previous observation); ``None`` (default) draws the gaps at random with the layout. Fixing it
            bounds how far back the actor must remember (a curriculum knob for small models).
        lock_gap: the number of empty rooms between the last key room and the first lock; the corridor's other
            empty rooms are then drawn over the remaining gaps plus one between the last lock and the exit
            (with one key and ``clue_gap=0``, all of them lie there). ``None`` (default) puts every empty room
            before the locks (at least one between the last key room and the first lock). A small gap makes a
            key choice's consequence (``"The door stays locked."``) appear a few steps after the choice while
            the reward still comes only at the far exit: the regime where a critic can credit the choice long
            before the episode ends.
        clue_at_key: the key room repeats its clue's sign (``"A sign shows a blue key. Keys here: red,
            blue."``), so the key choice needs no memory across observations; its consequence is still delayed
            (the lock and the exit come later). A curriculum knob for small models, like ``clue_gap``.
            Default ``False``.
        lock_colour: which key each lock needs. ``"random"`` (default): drawn with the layout, and the lock's
            sign shows it. A colour (e.g. ``"blue"``): every lock needs that colour in every game and the signs
            show it (the rest of the layout is as with ``"random"``), so the right key no longer depends on the
            game: a rule an agent can learn from reward alone. ``"independent"``: each lock's colour is drawn
            apart from its sign's, so the signs say nothing and the walkthrough's key choices are random:
            demonstrations of the walk with no key preference (e.g. the warm start's games,
            ``warmstart.env_kwargs``, for a fixed colour).
        state_note: every observation carries a critic-only
            :attr:`~tempo_rl.envs.Observation.privileged_state` saying what the hidden lock colours make of the
            carried keys now and how many steps are to spare (:meth:`lock_note`). Default
            ``False``. The actor never sees it; like knights' conflict note it precomputes, for a small critic,
            a relation its privileged layout implies.
    """

    task = _TASK

    def __init__(
        self,
        horizon: int = 40,
        keys: int | None = None,
        colours: int = 3,
        clue_gap: int | None = None,
        lock_gap: int | None = None,
        clue_at_key: bool = False,
        lock_colour: str = "random",
        state_note: bool = False,
    ) -> None:
        if not isinstance(horizon, int) or not 12 <= horizon <= 200:
            raise ValueError(f"horizon must be an int in 12..200, got {horizon!r}")
        if keys is None:
            keys = 2 if horizon < 30 else 3 if horizon < 50 else 4
        if not isinstance(keys, int) or keys < 1:
            raise ValueError(f"keys must be an int >= 1, got {keys!r}")
        if not isinstance(colours, int) or not 2 <= colours <= len(COLOURS):
            raise ValueError(f"colours must be an int in 2..{len(COLOURS)}, got {colours!r}")
        slack = max(3, horizon // 8)
        # walkthrough length = rooms (one 'go on' each) + keys ('take') + keys ('open door')
        #                     = (3 * keys + 1 + plain) + 2 * keys
        plain = horizon - slack - (5 * keys + 1)
        if plain < 1:
            raise ValueError(
                f"horizon {horizon} is too short for {keys} keys (needs >= {5 * keys + 2 + slack}); "
                "raise horizon or lower keys"
            )
        max_gap = (plain - 1) // keys
        if clue_gap is not None and (not isinstance(clue_gap, int) or not 0 <= clue_gap <= max_gap):
            raise ValueError(
                f"clue_gap must be None or an int in 0..{max_gap} for horizon {horizon} and {keys} keys, "
                f"got {clue_gap!r}"
            )
        fixed = 0 if clue_gap is None else clue_gap * keys
        if lock_gap is not None and (not isinstance(lock_gap, int) or not 0 <= lock_gap <= plain - fixed):
            raise ValueError(
                f"lock_gap must be None or an int in 0..{plain - fixed} for horizon {horizon}, {keys} keys and "
                f"clue_gap {clue_gap}, got {lock_gap!r}"
            )
        if lock_colour not in ("random", "independent") and lock_colour not in COLOURS[:colours]:
            raise ValueError(
                f"lock_colour must be 'random', 'independent' or one of the {colours} colours "
                f"{', '.join(COLOURS[:colours])}, got {lock_colour!r}"
            )
        if not isinstance(clue_at_key, bool):
            raise ValueError(f"clue_at_key must be true or false, got {clue_at_key!r}")
        if not isinstance(state_note, bool):
            raise ValueError(f"state_note must be true or false, got {state_note!r}")
        self.horizon = horizon
        self.keys = keys
        self.colours = colours
        self.clue_gap = clue_gap
        self.lock_gap = lock_gap
        self.clue_at_key = clue_at_key
        self.lock_colour = lock_colour
        self.state_note = state_note
        self._plain = plain
        self._seed: int | None = None
        self._rooms: tuple[Room, ...] = ()
        self._room = 0
        self._carried: list[str] = []
        self._taken: list[bool] = []  # per room: the key choice was made (key rooms)
        self._opened: list[bool] = []  # per room: the lock was opened (lock rooms)
        self._steps = 0
        self._done = False
        self._won = False

    # ------------------------------------------------------------------ layout
    def _generate(self, seed: int | None) -> tuple[Room, ...]:
        rng = random.Random(
            f"keydoor:{self.horizon}:{self.keys}:{self.colours}:{0 if seed is None else seed}"
        )
        palette = list(COLOURS[: self.colours])
        needed = [rng.choice(palette) for _ in range(self.keys)]
        signs = list(needed)
        if self.lock_colour == "independent":  # a second stream: the rest of the layout does not change
            other = random.Random(f"keydoor-locks:{self.horizon}:{self.keys}:{self.colours}:{seed or 0}")
            needed = [other.choice(palette) for _ in range(self.keys)]
        elif self.lock_colour != "random":
            # a fixed colour: drawn all the same above, so that the rest of the layout does not change
            needed = signs = [self.lock_colour] * self.keys
        # gap slots: after each clue (before its key), after each key, before each lock, before the exit
        # gap i*2: clue i -> key i; i*2+1: after key i; 2*keys+i: before lock i; 3*keys: last lock -> exit
        slots = 3 * self.keys + 1
        gaps = [0] * slots
        free = [
            slot for slot in range(slots - 1) if self.clue_gap is None or slot >= 2 * self.keys or slot % 2
        ]
        if self.lock_gap is None:
            gaps[2 * self.keys] = 1  # at least one plain room between the last key room and the first lock
            remaining = self._plain - 1
        else:  # last key -> first lock fixed; the saved rooms go before the exit
            gaps[2 * self.keys] = self.lock_gap
            fixed_slots = {2 * self.keys - 1, 2 * self.keys}
            free = [slot for slot in free if slot not in fixed_slots] + [3 * self.keys]
            remaining = self._plain - self.lock_gap
        if self.clue_gap is not None:
            for i in range(self.keys):
                gaps[2 * i] = self.clue_gap
            remaining -= self.clue_gap * self.keys
        for _ in range(remaining):
            gaps[rng.choice(free)] += 1
        rooms: list[Room] = []
        for i in range(self.keys):
            rooms.append(Room("clue", i, signs[i]))
            rooms.extend(Room("plain") for _ in range(gaps[2 * i]))
            offered = palette[:]
            rng.shuffle(offered)
            rooms.append(Room("key", i, needed[i], tuple(offered)))
            rooms.extend(Room("plain") for _ in range(gaps[2 * i + 1]))
        for i in range(self.keys):
            rooms.extend(Room("plain") for _ in range(gaps[2 * self.keys + i]))
            rooms.append(Room("lock", i, needed[i]))
        rooms.extend(Room("plain") for _ in range(gaps[3 * self.keys]))
        rooms.append(Room("exit"))
        return tuple(rooms)

    # ------------------------------------------------------------------ text
    def _describe(self, index: int) -> str:
        room = self._rooms[index]
        if room.kind == "clue":
            return f"A sign shows a {room.colour} key."
        if room.kind == "key":
            if self._taken[index]:
                return "An empty key rack."
            shown = self._rooms[self._index("clue", room.lock)].colour
            sign = f"A sign shows a {shown} key. " if self.clue_at_key else ""
            return f"{sign}Keys here: {', '.join(room.offered)}."
        if room.kind == "lock":
            return "An open door." if self._opened[index] else "A locked door."
        if room.kind == "exit":
            return "The exit is ahead."
        return "An empty room."

    def _admissible(self) -> tuple[str, ...]:
        if self._done:
            return ()
        index = self._room
        room = self._rooms[index]
        actions: list[str] = []
        if room.kind == "key" and not self._taken[index]:
            actions += [f"take {colour}" for colour in room.offered]
        if room.kind == "lock" and not self._opened[index]:
            actions.append("open door")
        else:
            actions.append("go on")
        if index > 0:
            actions.append("go back")
        return tuple(actions)

    def _where(self) -> str:
        carried = ", ".join(f"{c} key" for c in self._carried) if self._carried else "nothing"
        return (
            f"Room {self._room + 1} of {len(self._rooms)}. {self._describe(self._room)} You carry {carried}."
        )

    def _note(self) -> str:
        return self.lock_note()

    # ------------------------------------------------------------------ env protocol
    def _start(self, seed: int | None) -> None:
        self._rooms = self._generate(seed)
        self._room = 0
        self._carried = []
        self._taken = [False] * len(self._rooms)
        self._opened = [False] * len(self._rooms)

    def _apply(self, action: str) -> tuple[str, bool]:
        index = self._room
        room = self._rooms[index]
        if action == "go on":
            if room.kind == "lock" and not self._opened[index]:
                return "The door is locked.", False
            if room.kind == "exit":
                return "You leave through the exit. You win.", True
            self._room += 1
            return "You go on.", False
        if action == "go back" and index > 0:
            self._room -= 1
            return "You go back.", False
        if action == "open door" and room.kind == "lock" and not self._opened[index]:
            if room.colour in self._carried:
                self._carried.remove(room.colour)
                self._opened[index] = True
                return f"The {room.colour} key opens the door.", False
            return "The door stays locked.", False
        verb, _, colour = action.partition(" ")
        if verb == "take" and room.kind == "key" and not self._taken[index] and colour in room.offered:
            self._taken[index] = True
            self._carried.append(colour)
            return f"You take the {colour} key. The other keys vanish.", False
        return "Nothing happens.", False

    # ------------------------------------------------------------------ privileged / replay support
    def layout(self) -> tuple[Room, ...]:
        """The corridor of the current episode (privileged)."""
        return self._rooms

    def solvable(self) -> bool:
        """True while the exit is still reachable within the step limit by the expert from here."""
        if self._done:
            return self._won
        plan = self._expert_plan()
        return plan is not None and self._steps + len(plan) <= self.horizon

    def _expert_plan(self) -> list[str] | None:
        """The shortest action list from the current state to the exit, or None when the exit is
        unreachable."""
        room = self._room
        plan: list[str] = []
        # which unopened locks are not covered by the carried keys (as a multiset); their key rooms must be
        # untaken
        spare = list(self._carried)
        needed_keys: list[int] = []
        for i in range(self.keys):
            lock_index = self._index("lock", i)
            if self._opened[lock_index]:
                continue
            colour = self._rooms[lock_index].colour
            if colour in spare:
                spare.remove(colour)
                continue
            key_index = self._index("key", i)
            if self._taken[key_index]:
                return None
            needed_keys.append(key_index)
        needed_keys.sort()
        carried = list(self._carried)
        if needed_keys and needed_keys[0] < room:
            plan += ["go back"] * (room - needed_keys[0])
            room = needed_keys[0]
        taken = list(self._taken)
        opened = list(self._opened)
        while True:
            r = self._rooms[room]
            if r.kind == "key" and not taken[room] and room in needed_keys:
                plan.append(f"take {r.colour}")
                taken[room] = True
                carried.append(r.colour)
            if r.kind == "lock" and not opened[room]:
                if r.colour not in carried:
                    return None
                plan.append("open door")
                carried.remove(r.colour)
                opened[room] = True
            plan.append("go on")
            if r.kind == "exit":
                return plan
            room += 1

    def shortest_exit_steps(self) -> int | None:
        """The fewest steps from the current state to leaving through the exit (None when it is unreachable).

        Exact, by counting: let ``U`` be the unopened locks (all ahead of the agent: a locked door blocks the
        corridor) and ``d`` the number of them whose colour the carried keys do not cover (as multisets). An
        untaken key room offers every colour, so ``d`` more keys are needed from ``d`` distinct untaken key
        rooms; none exists -> None. The cheapest choice takes the untaken key rooms at or ahead of the agent
        first, then those behind it, nearest first; with ``q`` the leftmost room chosen and ``p`` the agent's
        room, ``E`` the exit room::

            steps = max(0, p - q) + (E - min(p, q)) + 1 + d + |U|

        (go back to ``q``, go on to the exit and through it, one ``take`` per key, one ``open door`` per lock).
        This can be shorter than :meth:`expert_action`'s plan, which insists on each lock's own key room (a
        wrong key taken early can still open a later lock of that colour).
        """
        return None if self._done else self._exit_steps(*self._key_deficit())

    def _exit_steps(self, closed: int, deficit: int, untaken: list[int]) -> int | None:
        """:meth:`shortest_exit_steps` of a running episode from its :meth:`_key_deficit`."""
        if deficit > len(untaken):
            return None
        p = self._room
        ahead = [j for j in untaken if j >= p]
        behind = sorted((j for j in untaken if j < p), reverse=True)
        chosen = (ahead + behind)[:deficit]  # ahead first (free), then behind, nearest first
        q = min(chosen, default=p)
        exit_room = len(self._rooms) - 1
        return max(0, p - q) + (exit_room - min(p, q)) + 1 + deficit + closed

    def _key_deficit(self) -> tuple[int, int, list[int]]:
        """``(|U|, d, untaken)``: the number of unopened locks ``U``, how many of them the carried keys do not
        cover (as multisets of colours) and the untaken key rooms (each offers every colour), in order."""
        unopened = [j for j, r in enumerate(self._rooms) if r.kind == "lock" and not self._opened[j]]
        spare = list(self._carried)
        deficit = 0
        for j in unopened:
            colour = self._rooms[j].colour
            if colour in spare:
                spare.remove(colour)
            else:
                deficit += 1
        untaken = [j for j, r in enumerate(self._rooms) if r.kind == "key" and not self._taken[j]]
        return len(unopened), deficit, untaken

    def lock_note(self) -> str:
        """What the hidden lock colours and the step limit make of the state now (privileged: a lock never names
        its colour), with ``d`` the closed locks the carried keys do not cover, ``u`` the untaken key rooms and
        ``spare = (horizon - steps) - shortest_exit_steps`` the steps the agent can still waste
        (:meth:`shortest_exit_steps`):

        * the exit cannot be reached in the steps left (``d > u``: no key choice left can open every lock, or
          ``spare < 0``): ``"The exit is unreachable."``;
        * else one of ``"Every lock is open."`` (no closed lock), ``"The carried keys fit every lock."``
          (``d = 0``) or ``"The right keys are still to take."`` (``0 < d <= u``), then ``"Spare steps: <spare>."``

        Short (at most 27 tokens of the benchmark's tokenizer), so that it fits the critic's prompt budget beside
        the layout. Whether the agent will take the right keys, and waste no more than its spare steps, it does
        not say: that is the value the critic estimates."""
        closed, d, untaken = self._key_deficit()
        need = None if self._done else self._exit_steps(closed, d, untaken)
        spare = None if need is None else self.horizon - self._steps - need
        if spare is None or spare < 0:
            return "The exit is unreachable."
        if not closed:
            keys = "Every lock is open."
        elif d == 0:
            keys = "The carried keys fit every lock."
        else:
            keys = "The right keys are still to take."
        return f"{keys} Spare steps: {spare}."

    def oracle_value(self, steps_left: int) -> float | None:
        """``V* = 1`` when the exit can be reached within ``min(steps_left, horizon - steps)`` more steps, else
        0 (reward 1 only at the exit; see :meth:`shortest_exit_steps`). 0 once the episode is over."""
        check_steps_left(steps_left)
        need = self.shortest_exit_steps()
        budget = min(steps_left, self.horizon - self._steps)
        return 1.0 if need is not None and need <= budget else 0.0

    def _index(self, kind: str, lock: int) -> int:
        return next(j for j, r in enumerate(self._rooms) if r.kind == kind and r.lock == lock)

    def expert_action(self) -> str | None:
        """The expert's next action from the current state (for noisy demonstrations), or None when the
        episode is over or the exit can no longer be reached (then any action is as good as another)."""
        if self._done:
            return None
        plan = self._expert_plan()
        return plan[0] if plan else None

    def walkthrough(self) -> tuple[str, ...] | None:
        rooms = self._rooms
        plan: list[str] = []
        for r in rooms:
            if r.kind == "key":
                plan.append(f"take {r.colour}")
            if r.kind == "lock":
                plan.append("open door")
            plan.append("go on")
        return tuple(plan)

    def privileged_info(self) -> str | None:
        lines = []
        for number, r in enumerate(self._rooms, start=1):
            if r.kind == "clue":
                lines.append(f"room {number}: sign for lock {r.lock + 1} shows {r.colour}")
            elif r.kind == "key":
                lines.append(f"room {number}: key choice for lock {r.lock + 1}, the right key is {r.colour}")
            elif r.kind == "lock":
                lines.append(f"room {number}: lock {r.lock + 1} needs the {r.colour} key")
            elif r.kind == "exit":
                lines.append(f"room {number}: exit")
        return (
            "Hidden layout (rooms not listed are empty): "
            + "; ".join(lines)
            + ". A wrong key choice cannot be undone and makes the exit unreachable. "
            + "Expert walkthrough: "
            + ", ".join(self.walkthrough() or ())
            + "."
        )

    def fork(self) -> KeyDoorEnv:
        copy = KeyDoorEnv.__new__(KeyDoorEnv)
        copy.__dict__.update(self.__dict__)
        copy._carried = list(self._carried)
        copy._taken = list(self._taken)
        copy._opened = list(self._opened)
        return copy

    def state_fingerprint(self) -> str | None:
        header = (
            f"{self._seed}|{self._room}|{','.join(self._carried)}|{self._steps}|{self._done}|{self._won}|"
        )
        payload = header.encode() + bytes(self._taken) + b"|" + bytes(self._opened)
        return hashlib.sha256(payload).hexdigest()[:16]
