"""Offline generator of ALFWorld-format games (no download needed).

A generated game is a ``game.tw-pddl`` in the official format -- JSON with ``pddl_domain`` and ``grammar``
(the
ones shipped in the alfworld wheel: ``alfworld.info.ALFRED_PDDL_PATH`` / ``ALFRED_TWL2_PATH``), a
``pddl_problem``, ``solvable`` and ``walkthrough`` -- plus a ``traj_data.json`` with ``task_type`` and
``pddl_params``, laid out as ``<out>/json_2.1.1/<split>/<task-dir>/<trial-dir>/`` so that
:func:`~tempo_rl.envs.alfworld.data.discover_games` finds it like real data.

Generation, for a task type and a seed (same inputs -> byte-identical files):

1. a room archetype that supports the task (kitchen for heat/cool, kitchen or bathroom for clean, ...);
2. a seeded layout: the room's receptacles (some duplicated: ``cabinet 1``, ``cabinet 2``...), each at its
   own location, and objects placed in receptacles that can contain them, with ALFRED-style mangled ids
   (``Mug_bar__plus_01_dot_20_bar_...``) so ``AlfredDemangler`` renders ``mug 1``; openable receptacles start
   closed; the agent starts at a location of its own;
3. the goal in PDDL (the six ALFWorld goal shapes) and the task sentence in ALFWorld's wording, written into
   the
   grammar in place of the shipped placeholder ``"Your task is to: UNKNOWN GOAL."``;
4. a walkthrough computed **once**, here, by Fast Downward through TextWorld, then replayed: ``solvable`` is
   true only if replaying it wins (else the walkthrough is stored empty and ``solvable`` false).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tempo_rl._optional import require
from tempo_rl.envs.alfworld.data import GAME_FILE, JSON_DIR, SPLITS, TASK_TYPES, TRAJ_FILE, AlfworldDataError

__all__ = ["GeneratedGame", "generate_game", "generate_games", "task_sentence"]

_UNKNOWN_GOAL = "Your task is to: UNKNOWN GOAL."

# -- catalogue -----------------------------------------------------------------------------------------------
_OPENABLE = frozenset({"Cabinet", "Drawer", "Fridge", "Microwave", "Safe"})
_SMALL = ("AlarmClock", "Book", "CD", "CellPhone", "CreditCard", "KeyChain", "Pen", "Pencil", "Watch")
_FOOD = ("Apple", "Bread", "Egg", "Lettuce", "Potato", "Tomato")
_DISHES = ("Bowl", "Cup", "Mug", "Plate", "Pan", "Pot")
_UTENSILS = ("ButterKnife", "Fork", "Knife", "Ladle", "Spatula", "Spoon")
_KITCHEN_MISC = ("DishSponge", "PepperShaker", "SaltShaker", "SoapBottle")
_BATH = ("Candle", "Cloth", "SoapBar", "SoapBottle", "SprayBottle", "ToiletPaper", "Towel")
_LIVING = ("Box", "Laptop", "Pillow", "RemoteControl", "Statue", "Vase")

#: which object types each receptacle type can contain (a subset of ALFRED's canContain relation)
_CAN_CONTAIN: dict[str, frozenset[str]] = {
    "CounterTop": frozenset(
        _FOOD + _DISHES + _UTENSILS + _KITCHEN_MISC + _BATH + ("CellPhone", "CreditCard", "KeyChain")
    ),
    "DiningTable": frozenset(
        _FOOD + _DISHES + _UTENSILS + _KITCHEN_MISC + _SMALL + ("Laptop", "Vase", "Statue")
    ),
    "Cabinet": frozenset(_DISHES + _KITCHEN_MISC + _BATH + ("Book", "CD", "Box", "Vase", "Statue")),
    "Drawer": frozenset(_UTENSILS + _SMALL + ("Cloth", "SoapBar", "DishSponge", "Candle", "ToiletPaper")),
    "Fridge": frozenset(_FOOD + _DISHES),
    "Microwave": frozenset((*_FOOD, "Bowl", "Cup", "Mug", "Plate")),
    "SinkBasin": frozenset(_FOOD + _DISHES + _UTENSILS + ("Cloth", "DishSponge", "SoapBar")),
    "StoveBurner": frozenset(("Pan", "Pot", "Kettle")),
    "GarbageCan": frozenset(
        _FOOD + _SMALL + ("Cloth", "SoapBar", "SoapBottle", "SprayBottle", "ToiletPaper", "Candle")
    ),
    "CoffeeMachine": frozenset(("Mug", "Cup")),
    "Desk": frozenset((*_SMALL, "Bowl", "Mug", "Laptop", "Box", "Vase", "Statue", "Pillow")),
    "SideTable": frozenset((*_SMALL, "Bowl", "Mug", "Laptop", "Box", "Vase", "Statue", "Candle")),
    "Shelf": frozenset(
        (
            *_SMALL,
            "Bowl",
            "Mug",
            "Cup",
            "Plate",
            "Vase",
            "Statue",
            "Box",
            "Candle",
            "SoapBar",
            "SoapBottle",
            "SprayBottle",
            "ToiletPaper",
            "Cloth",
        )
    ),
    "Dresser": frozenset((*_SMALL, "Box", "Laptop", "Vase", "Statue", "Candle", "Bowl", "Mug")),
    "Bed": frozenset(("Book", "CellPhone", "Laptop", "Pillow", "CreditCard", "KeyChain")),
    "Sofa": frozenset(
        ("Book", "CellPhone", "Laptop", "Pillow", "CreditCard", "KeyChain", "RemoteControl", "Box")
    ),
    "CoffeeTable": frozenset(_SMALL + _LIVING),
    "Safe": frozenset(("CD", "CellPhone", "CreditCard", "KeyChain", "Watch", "Vase", "Statue")),
    "Toilet": frozenset(("Candle", "Cloth", "SoapBar", "SoapBottle", "SprayBottle", "ToiletPaper")),
    "TowelHolder": frozenset(("Towel",)),
}

_CLEANABLE = frozenset(_FOOD + _DISHES + _UTENSILS + ("Cloth", "SoapBar", "DishSponge"))
_HEATABLE = frozenset(("Apple", "Bread", "Cup", "Egg", "Mug", "Plate", "Potato", "Tomato"))
_COOLABLE = frozenset(
    ("Apple", "Bread", "Bowl", "Cup", "Egg", "Lettuce", "Mug", "Pan", "Plate", "Pot", "Potato", "Tomato")
)


@dataclass(frozen=True)
class _Room:
    name: str
    # receptacle type -> (min count, max count)
    receptacles: dict[str, tuple[int, int]]
    objects: tuple[str, ...]


_ROOMS: dict[str, _Room] = {
    "kitchen": _Room(
        "kitchen",
        {
            "CounterTop": (1, 2),
            "Cabinet": (2, 4),
            "Drawer": (1, 3),
            "Fridge": (1, 1),
            "Microwave": (1, 1),
            "SinkBasin": (1, 1),
            "StoveBurner": (1, 2),
            "DiningTable": (1, 1),
            "GarbageCan": (1, 1),
            "CoffeeMachine": (1, 1),
            "Shelf": (0, 2),
        },
        _FOOD + _DISHES + _UTENSILS + _KITCHEN_MISC,
    ),
    "bathroom": _Room(
        "bathroom",
        {
            "CounterTop": (1, 1),
            "Cabinet": (2, 4),
            "Drawer": (0, 2),
            "SinkBasin": (1, 2),
            "Toilet": (1, 1),
            "GarbageCan": (1, 1),
            "Shelf": (0, 2),
            "TowelHolder": (1, 1),
        },
        _BATH,
    ),
    "bedroom": _Room(
        "bedroom",
        {
            "Desk": (1, 1),
            "SideTable": (1, 2),
            "Drawer": (2, 4),
            "Shelf": (1, 3),
            "Dresser": (0, 1),
            "Bed": (1, 1),
            "Safe": (0, 1),
            "GarbageCan": (1, 1),
        },
        (*_SMALL, "Bowl", "Mug", "Laptop", "Pillow", "Box", "Vase", "Statue"),
    ),
    "livingroom": _Room(
        "livingroom",
        {
            "CoffeeTable": (1, 1),
            "SideTable": (1, 2),
            "Sofa": (1, 1),
            "Drawer": (1, 3),
            "Shelf": (1, 3),
            "Dresser": (0, 1),
            "Safe": (0, 1),
            "GarbageCan": (1, 1),
            "Cabinet": (0, 2),
        },
        _SMALL + _LIVING,
    ),
}

_TASK_ROOMS: dict[str, tuple[str, ...]] = {
    "pick_and_place_simple": ("kitchen", "bathroom", "bedroom", "livingroom"),
    "look_at_obj_in_light": ("bedroom", "livingroom"),
    "pick_clean_then_place_in_recep": ("kitchen", "bathroom"),
    "pick_heat_then_place_in_recep": ("kitchen",),
    "pick_cool_then_place_in_recep": ("kitchen",),
    "pick_two_obj_and_place": ("kitchen", "bathroom", "bedroom", "livingroom"),
}

#: ALFWorld's two task-sentence templates per task type (the wording of the real games)
_TEMPLATES: dict[str, tuple[str, str]] = {
    "pick_and_place_simple": ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    "look_at_obj_in_light": ("look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"),
    "pick_clean_then_place_in_recep": (
        "put a clean {obj} in {recep}",
        "clean some {obj} and put it in {recep}",
    ),
    "pick_heat_then_place_in_recep": ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    "pick_cool_then_place_in_recep": ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    "pick_two_obj_and_place": ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
}

_STATE_PREDICATE = {
    "pick_clean_then_place_in_recep": ("cleanable", "isClean"),
    "pick_heat_then_place_in_recep": ("heatable", "isHot"),
    "pick_cool_then_place_in_recep": ("coolable", "isCool"),
}


def task_sentence(
    task_type: str, obj: str, recep: str = "", toggle: str = "DeskLamp", variant: int = 0
) -> str:
    """ALFWorld's task sentence, e.g. ``task_sentence("pick_two_obj_and_place", "Pen", "Desk")`` ->
    ``"put two pen in desk."`` (names lower-cased, as in the real games)."""
    if task_type not in _TEMPLATES:
        raise ValueError(f"unknown task type {task_type!r}; expected one of {list(TASK_TYPES)}")
    template = _TEMPLATES[task_type][variant % 2]
    return template.format(obj=obj.lower(), recep=recep.lower(), toggle=toggle.lower()) + "."


def _goal(task_type: str, obj: str, recep: str) -> str:
    if task_type == "look_at_obj_in_light":
        return (
            "(:goal (and\n"
            "  (exists (?ot - object ?r - receptacle ?a - agent ?l - location)\n"
            "    (and (objectType ?ot DeskLampType) (toggleable ?ot) (isToggled ?ot)\n"
            "         (receptacleAtLocation ?r ?l) (atLocation ?a ?l) (inReceptacle ?ot ?r)))\n"
            f"  (exists (?o - object ?a - agent) (and (objectType ?o {obj}Type) (holds ?a ?o)))))\n"
        )
    if task_type == "pick_two_obj_and_place":
        return (
            "(:goal (and\n"
            "  (exists (?r - receptacle) (exists (?o1 - object)\n"
            f"    (and (objectType ?o1 {obj}Type) (receptacleType ?r {recep}Type) (inReceptacle ?o1 ?r)\n"
            "         (exists (?o2 - object)\n"
            f"           (and (not (= ?o1 ?o2)) (objectType ?o2 {obj}Type) (inReceptacle ?o2 ?r))))))))\n"
        )
    extra = ""
    if task_type in _STATE_PREDICATE:
        able, state = _STATE_PREDICATE[task_type]
        extra = f" ({able} ?o) ({state} ?o)"
    return (
        "(:goal (and\n"
        "  (exists (?r - receptacle) (exists (?o - object)\n"
        f"    (and (objectType ?o {obj}Type) (receptacleType ?r {recep}Type){extra}"
        " (inReceptacle ?o ?r))))))\n"
    )


def _coord(rng: random.Random) -> str:
    value = rng.uniform(-4.0, 4.0)
    sign = "plus" if value >= 0 else "minus"
    whole, frac = divmod(round(abs(value) * 100), 100)
    return f"_{sign}_{whole:02d}_dot_{frac:02d}"


class _Ids:
    """Unique ALFRED-style mangled ids and location names."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def entity(self, type_name: str) -> str:
        while True:
            base = f"{type_name}_bar_" + "_bar_".join(_coord(self.rng) for _ in range(3))
            ident = (
                base.replace("SinkBasin_bar_", "Sink_bar_", 1) + "_bar_SinkBasin"
                if type_name == "SinkBasin"
                else base
            )
            if ident not in self.used:
                self.used.add(ident)
                return ident

    def location(self) -> str:
        while True:
            x, y = self.rng.randint(-12, 12), self.rng.randint(-12, 12)
            sx = f"_minus_{-x}" if x < 0 else str(x)
            sy = f"_minus_{-y}" if y < 0 else str(y)
            rot, hor = self.rng.randint(0, 3), self.rng.choice((0, 15, 30, 45, 60))
            ident = f"loc_bar_{sx}_bar_{sy}_bar_{rot}_bar_{hor}"
            if ident not in self.used:
                self.used.add(ident)
                return ident


@dataclass(frozen=True)
class GeneratedGame:
    """A generated game on disk.

    Attributes:
        game_file: the ``game.tw-pddl`` written.
        task_type: one of the six ALFWorld task types.
        task: the task sentence (without ``"Your task is to: "``).
        walkthrough: the verified planner walkthrough in agent-visible names (empty when unsolvable).
        solvable: the walkthrough replays to a win.
        seed: the generation seed.
        room: the room archetype.
        pddl_params: goal parameters (also in ``traj_data.json``).
    """

    game_file: Path
    task_type: str
    task: str
    walkthrough: tuple[str, ...]
    solvable: bool
    seed: int
    room: str
    pddl_params: dict[str, Any] = field(default_factory=dict)


def _layout(task_type: str, rng: random.Random) -> tuple[str, dict[str, Any]] | None:
    """Pick the room, receptacles, objects and goal targets; None when this draw cannot host the task."""
    room = _ROOMS[rng.choice(_TASK_ROOMS[task_type])]
    recep_types: list[str] = []
    for rtype, (lo, hi) in sorted(room.receptacles.items()):
        recep_types += [rtype] * rng.randint(lo, hi)
    candidates = sorted(room.objects)
    if task_type in _STATE_PREDICATE:
        able = {
            "pick_clean_then_place_in_recep": _CLEANABLE,
            "pick_heat_then_place_in_recep": _HEATABLE,
            "pick_cool_then_place_in_recep": _COOLABLE,
        }[task_type]
        candidates = [o for o in candidates if o in able]
    candidates = [o for o in candidates if any(o in _CAN_CONTAIN[r] for r in recep_types)]
    if not candidates:
        return None
    target = rng.choice(candidates)
    special = {"SinkBasin", "Microwave", "Fridge", "StoveBurner", "CoffeeMachine"}
    dests = sorted({r for r in recep_types if target in _CAN_CONTAIN[r] and r not in special})
    if task_type == "look_at_obj_in_light":
        dests = []
    elif not dests:
        return None
    parent = rng.choice(dests) if dests else ""
    return room.name, {
        "recep_types": recep_types,
        "target": target,
        "parent": parent,
        "objects": room.objects,
    }


def _problem(task_type: str, seed: int) -> tuple[str, str, dict[str, Any], str]:
    """(problem text, task sentence, pddl_params, room) for a seed; deterministic."""
    rng = random.Random(f"tempo-rl-alfworld-gen:{task_type}:{seed}")
    for _ in range(100):
        drawn = _layout(task_type, rng)
        if drawn is not None:
            break
    else:  # pragma: no cover - every task type has a room that hosts it
        raise RuntimeError(f"could not lay out a {task_type} game")
    room, lay = drawn
    target, parent = lay["target"], lay["parent"]
    ids = _Ids(rng)
    receptacles: list[tuple[str, str, str]] = []  # (id, type, location)
    for rtype in lay["recep_types"]:
        receptacles.append((ids.entity(rtype), rtype, ids.location()))
    if task_type == "look_at_obj_in_light":
        hosts = [r for r in receptacles if r[1] in ("Desk", "SideTable", "Dresser", "CoffeeTable", "Shelf")]
        lamp_host = rng.choice(hosts)
    else:
        lamp_host = None
    # objects: the target (2-3 copies for pick_two, else 1-2) + 4-9 distractors, each in a receptacle that
    # can hold it
    counts = {target: rng.randint(2, 3) if task_type == "pick_two_obj_and_place" else rng.randint(1, 2)}
    pool = [o for o in sorted(lay["objects"]) if o != target]
    for o in rng.sample(pool, min(len(pool), rng.randint(4, 9))):
        counts[o] = counts.get(o, 0) + rng.randint(1, 2)
    objects: list[tuple[str, str, str]] = []  # (id, type, receptacle id)
    for otype, n in counts.items():
        hosts = [r for r in receptacles if otype in _CAN_CONTAIN[r[1]]]
        if not hosts:
            continue
        for _ in range(n):
            host = rng.choice(hosts)
            if otype == target and task_type != "look_at_obj_in_light" and host[1] == parent:
                others = [r for r in hosts if r[1] != parent]
                host = rng.choice(others) if others else host
            objects.append((ids.entity(otype), otype, host[0]))
    if lamp_host is not None:
        objects.append((ids.entity("DeskLamp"), "DeskLamp", lamp_host[0]))
    agent_loc = ids.location()
    loc_of = {r[0]: r[2] for r in receptacles}
    otypes = sorted({o[1] for o in objects} | {"Knife", "ButterKnife", "DeskLamp", target})
    rtypes = sorted(
        {r[1] for r in receptacles} | {"SinkBasin", "Microwave", "Fridge"} | ({parent} if parent else set())
    )

    lines = [f"(define (problem gen_{task_type}_{seed})", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines += [f"        {t}Type - otype" for t in otypes]
    lines += [f"        {t}Type - rtype" for t in rtypes]
    lines += [f"        {o[0]} - object" for o in objects]
    lines += [f"        {r[0]} - receptacle" for r in receptacles]
    lines += [f"        {loc} - location" for loc in sorted({r[2] for r in receptacles} | {agent_loc})]
    lines += ["        )", "", "(:init", ""]
    facts: list[str] = []
    facts += [f"(receptacleType {r[0]} {r[1]}Type)" for r in receptacles]
    facts += [f"(objectType {o[0]} {o[1]}Type)" for o in objects]
    facts += [
        f"(canContain {rt}Type {ot}Type)"
        for rt in sorted({r[1] for r in receptacles})
        for ot in otypes
        if ot in _CAN_CONTAIN[rt]
    ]
    facts += [f"(receptacleAtLocation {r[0]} {r[2]})" for r in receptacles]
    facts += [f"(openable {r[0]})" for r in receptacles if r[1] in _OPENABLE]
    for oid, otype, host_id in objects:
        if otype == "DeskLamp":
            facts.append(f"(toggleable {oid})")
        else:
            facts.append(f"(pickupable {oid})")
        for able, allowed in (("cleanable", _CLEANABLE), ("heatable", _HEATABLE), ("coolable", _COOLABLE)):
            if otype in allowed:
                facts.append(f"({able} {oid})")
        facts.append(f"(inReceptacle {oid} {host_id})")
        facts.append(f"(objectAtLocation {oid} {loc_of[host_id]})")
    facts.append(f"(atLocation agent1 {agent_loc})")
    lines += [f"        {f}" for f in facts]
    lines += ["        )", ""]
    problem = "\n".join(lines) + "\n" + _goal(task_type, target, parent) + ")\n"
    sentence = task_sentence(task_type, target, parent, variant=rng.randint(0, 1))
    params = {
        "object_target": target,
        "parent_target": parent,
        "toggle_target": "DeskLamp" if task_type == "look_at_obj_in_light" else "",
        "mrecep_target": "",
        "object_sliced": False,
    }
    return problem, sentence, params, room


def _wheel_files() -> tuple[str, str]:
    info = require("alfworld.info", "alfworld", package="alfworld")
    domain = Path(info.ALFRED_PDDL_PATH).read_text(encoding="utf-8")
    grammar = Path(info.ALFRED_TWL2_PATH).read_text(encoding="utf-8")
    if _UNKNOWN_GOAL not in grammar:
        raise RuntimeError(
            f"the alfworld grammar at {info.ALFRED_TWL2_PATH} has no {_UNKNOWN_GOAL!r} placeholder"
        )
    return domain, grammar


def _plan_and_verify(game_file: Path) -> tuple[tuple[str, ...], bool]:
    """Fast Downward plan from reset, replayed: (walkthrough, won); ``((), False)`` if unsolvable."""
    from tempo_rl.envs.alfworld.fast import Engine
    from tempo_rl.envs.alfworld.text import canonicalize_action

    try:
        engine = Engine(game_file)
    except AlfworldDataError:
        return (), False  # Fast Downward proved the goal statically unreachable (TextWorld cannot load it)
    try:
        first = engine.reset()
        if first.won:
            return (), False
        plan = tuple(canonicalize_action(c) for c in engine.plan())
        engine.reset()
        won = False
        for command in plan:
            won = engine.step(command).won
        return (plan, won) if plan and won else ((), False)
    finally:
        engine.close()


def generate_game(
    task_type: str,
    seed: int,
    out_dir: str | Path,
    *,
    split: str = "train",
) -> GeneratedGame:
    """Generate one game of ``task_type`` with ``seed`` under ``out_dir/json_2.1.1/<split>/``.

    The same ``(task_type, seed)`` always gives the same files. Costs about a second (the PDDL translation and
    one planner call, at generation time only).

    Raises:
        ValueError: unknown task type or split.
        MissingDependencyError: the ``alfworld`` extra is not installed.
    """
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; expected one of {list(TASK_TYPES)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    problem, sentence, params, room = _problem(task_type, seed)
    domain, grammar = _wheel_files()
    grammar = grammar.replace(_UNKNOWN_GOAL, "Your task is to: " + sentence)
    task_dir = f"{task_type}-{params['object_target']}-None-{params['parent_target'] or 'DeskLamp'}-gen{seed}"
    trial = Path(out_dir) / JSON_DIR / split / task_dir / f"trial_gen_{seed:06d}"
    trial.mkdir(parents=True, exist_ok=True)
    game_file = trial / GAME_FILE
    data: dict[str, Any] = {
        "pddl_domain": domain,
        "grammar": grammar,
        "pddl_problem": problem,
        "solvable": False,
        "walkthrough": [],
    }
    game_file.write_text(json.dumps(data), encoding="utf-8")
    walkthrough, won = _plan_and_verify(game_file)
    data["solvable"] = won
    data["walkthrough"] = list(walkthrough)
    game_file.write_text(json.dumps(data), encoding="utf-8")
    traj = {
        "task_type": task_type,
        "pddl_params": params,
        "task_id": f"gen_{task_type}_{seed}",
        "generator": {"name": "tempo-rl", "seed": seed, "room": room},
    }
    (trial / TRAJ_FILE).write_text(json.dumps(traj, indent=1), encoding="utf-8")
    return GeneratedGame(
        game_file=game_file,
        task_type=task_type,
        task=sentence,
        walkthrough=walkthrough,
        solvable=won,
        seed=seed,
        room=room,
        pddl_params=params,
    )


def generate_games(
    out_dir: str | Path,
    per_type: int = 1,
    seed: int = 0,
    task_types: Iterable[str] | None = None,
    *,
    split: str = "train",
) -> list[GeneratedGame]:
    """``per_type`` games of each task type (all six by default), seeds ``seed, seed + 1, ...`` per type."""
    if per_type < 1:
        raise ValueError(f"per_type must be >= 1, got {per_type}")
    types: Sequence[str] = tuple(task_types) if task_types is not None else TASK_TYPES
    return [generate_game(t, seed + i, out_dir, split=split) for t in types for i in range(per_type)]
