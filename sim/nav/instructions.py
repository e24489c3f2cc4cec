"""English route instructions from a path through a house: rooms, turns, landmarks and a stop condition.

Templated but varied (several phrasings per part, seeded), so the language is not one fixed string.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sim.nav.furniture import FurnitureItem
from sim.nav.house import House

LEFT = ("turn left", "go left", "take a left", "bear left")
RIGHT = ("turn right", "go right", "take a right", "bear right")
STRAIGHT = ("go straight", "continue straight", "walk straight ahead", "keep going")
EXIT = ("Walk out of the {r}", "Exit the {r}", "Leave the {r}", "Head out of the {r}")
WITHIN = ("Walk across the {r}", "Move through the {r}", "Go forward in the {r}")
ENTER = ("into the {r}", "and enter the {r}", "to get into the {r}")
PASS = ("passing the {l}", "walking past the {l}", "going by the {l}")
STOP = ("stop {p} the {l}", "wait {p} the {l}", "come to a halt {p} the {l}", "stop when you reach the {l}")
PREP = ("next to", "in front of", "beside", "near", "by")
JOIN = (", then ", ". Then ", " and ", ". ")


def _heading(a: Sequence[float], b: Sequence[float]) -> float:
    return math.atan2(b[1] - a[1], b[0] - a[0])


def _turn_word(delta: float) -> str:
    """'left'/'right'/'straight'/'around' for a heading change (rad, CCW positive = left)."""
    d = math.degrees(math.atan2(math.sin(delta), math.cos(delta)))
    if abs(d) > 135:
        return "around"
    if d > 35:
        return "left"
    if d < -35:
        return "right"
    return "straight"


def _point_at_distance(path: np.ndarray, i: int, dist: float, direction: int) -> np.ndarray:
    """The path point ``dist`` metres before (direction=-1) or after (+1) index ``i``."""
    acc, j = 0.0, i
    while 0 <= j + direction < len(path) and acc < dist:
        acc += float(np.linalg.norm(path[j + direction] - path[j]))
        j += direction
    return path[j]


def describe_item(house: House, item: FurnitureItem) -> str:
    """'red sofa', or 'red sofa in the kitchen' when the colour+name is not unique in the house."""
    same = [f for f in house.furniture if f.label == item.label]
    if len(same) > 1:
        return f"{item.label} in the {house.rooms[item.room].name}"
    return item.label


def generate_instruction(house: House, path_xy: Sequence[Sequence[float]], start_phi: float,
                         goal_item: FurnitureItem, rng: np.random.Generator) -> str:
    """Describe the route ``path_xy`` (MuJoCo floor coordinates) that ends at ``goal_item``."""
    path = np.asarray(path_xy, dtype=float)
    if len(path) < 2:
        raise ValueError("a path needs at least two points to be described")
    rooms = [house.room_at(x, y) for x, y in path]
    seq: list[tuple[int, int]] = []  # (room index, first path index)
    for i, r in enumerate(rooms):
        if r is not None and (not seq or seq[-1][0] != r.index):
            seq.append((r.index, i))
    pick = lambda opts: opts[int(rng.integers(0, len(opts)))]  # noqa: E731
    parts: list[str] = []
    first_dir = _heading(path[0], _point_at_distance(path, 0, 1.0, +1))
    turn0 = _turn_word(first_dir - start_phi)
    if turn0 == "around":
        parts.append("Turn around")
    elif turn0 in ("left", "right") and rng.random() < 0.8:
        parts.append(pick(LEFT if turn0 == "left" else RIGHT).capitalize())
    start_room = house.rooms[seq[0][0]].name
    used: set[int] = {id(goal_item)}
    first = pick(EXIT if len(seq) > 1 else WITHIN).format(r=start_room)
    lm = _landmark(house, path, rooms, seq[0][0], used, rng)
    parts.append(f"{first} {pick(PASS).format(l=lm)}" if lm else first)
    for k in range(1, len(seq)):
        room_idx, i = seq[k]
        before = _point_at_distance(path, i, 1.0, -1)
        after = _point_at_distance(path, i, 1.0, +1)
        prev = _point_at_distance(path, i, 2.0, -1)
        delta = _heading(before, after) - _heading(prev, before) if not np.allclose(prev, before) else 0.0
        word = _turn_word(delta)
        turn = pick({"left": LEFT, "right": RIGHT}.get(word, STRAIGHT))
        text = f"{turn} {pick(ENTER).format(r=house.rooms[room_idx].name)}"
        if k < len(seq) - 1:
            lm = _landmark(house, path, rooms, room_idx, used, rng)
            if lm:
                text += f", {pick(PASS).format(l=lm)}"
        parts.append(text)
    parts.append(pick(STOP).format(p=pick(PREP), l=describe_item(house, goal_item)))
    text = parts[0]
    for p in parts[1:]:
        j = pick(JOIN)
        text += j + (p[0].upper() + p[1:] if j.endswith(". ") else p[0].lower() + p[1:])
    return text.rstrip(".") + "."


def _landmark(house: House, path: np.ndarray, rooms: list, room_idx: int, used: set[int],
              rng: np.random.Generator) -> str | None:
    """A furniture item of ``room_idx`` the path passes within 1.2 m of, not mentioned yet."""
    pts = path[[i for i, r in enumerate(rooms) if r is not None and r.index == room_idx]]
    if len(pts) == 0 or rng.random() < 0.25:
        return None
    near = [f for f in house.furniture if f.room == room_idx and id(f) not in used
            and min(f.distance_to(x, y) for x, y in pts) < 1.2]
    if not near:
        return None
    item = near[int(rng.integers(0, len(near)))]
    used.add(id(item))
    return describe_item(house, item)
