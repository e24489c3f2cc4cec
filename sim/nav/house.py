"""Seeded procedural multi-room houses (pure geometry, MuJoCo frame: x, y on the floor, z up).

A house is a set of axis-aligned rooms tiling a footprint, doors between adjacent rooms, walls
derived from the room edges minus door gaps, and named, coloured furniture. The same
``(seed, style)`` always gives the same house.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from agents.core.registry import Registry
from sim.nav.furniture import FurnitureItem, place_furniture
from sim.nav.layouts import LAYOUTS, RoomRect

log = logging.getLogger(__name__)

WALL_THICKNESS = 0.1
WALL_HEIGHT = 2.5
MIN_ROOMS, MAX_ROOMS = 3, 8

#: Room kinds in the order they are handed out (all distinct within a house).
ROOM_KINDS = ("living room", "kitchen", "bedroom", "bathroom", "office", "dining room", "laundry room", "hallway")

STYLES: Registry[Callable[[np.random.Generator, int], list[RoomRect]]] = LAYOUTS


@dataclass(frozen=True)
class Room:
    """A named rectangular room: [x0, x1] x [y0, y1] in metres."""

    index: int
    name: str
    x0: float
    y0: float
    x1: float
    y1: float
    floor_style: int = 0
    wall_style: int = 0

    @property
    def center(self) -> tuple[float, float]:
        return (0.5 * (self.x0 + self.x1), 0.5 * (self.y0 + self.y1))

    @property
    def area(self) -> float:
        return (self.x1 - self.x0) * (self.y1 - self.y0)

    def contains(self, x: float, y: float, margin: float = 0.0) -> bool:
        return self.x0 - margin <= x <= self.x1 + margin and self.y0 - margin <= y <= self.y1 + margin


@dataclass(frozen=True)
class Door:
    """A gap in the wall between rooms ``a`` and ``b``; ``axis`` is the wall direction ('x' or 'y')."""

    x: float
    y: float
    axis: str
    width: float
    a: int
    b: int


@dataclass(frozen=True)
class Wall:
    """A wall box from (x0, y0) to (x1, y1) along one axis, ``thickness`` across it."""

    x0: float
    y0: float
    x1: float
    y1: float
    thickness: float = WALL_THICKNESS
    height: float = WALL_HEIGHT


@dataclass
class House:
    seed: int
    style: str
    rooms: list[Room]
    doors: list[Door]
    walls: list[Wall]
    furniture: list[FurnitureItem] = field(default_factory=list)

    @property
    def scene_id(self) -> str:
        return scene_id_for(self.style, self.seed)

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return (min(r.x0 for r in self.rooms), min(r.y0 for r in self.rooms),
                max(r.x1 for r in self.rooms), max(r.y1 for r in self.rooms))

    def room_at(self, x: float, y: float) -> Room | None:
        """The room containing (x, y), or the nearest one within 0.3 m (door gaps, wall lines)."""
        for r in self.rooms:
            if r.contains(x, y):
                return r
        best, best_d = None, 0.3
        for r in self.rooms:
            dx = max(r.x0 - x, 0.0, x - r.x1)
            dy = max(r.y0 - y, 0.0, y - r.y1)
            d = float(np.hypot(dx, dy))
            if d <= best_d:
                best, best_d = r, d
        return best


SCENE_PREFIX = "allday"


def scene_id_for(style: str, seed: int) -> str:
    """Scene ids of generated houses look like ``allday/grid/00042``."""
    return f"{SCENE_PREFIX}/{style}/{int(seed):05d}"


def parse_scene_id(scene_id: str) -> tuple[str, int]:
    """Inverse of :func:`scene_id_for`, with a clear error for foreign (e.g. MP3D) scenes."""
    parts = scene_id.strip().split("/")
    if len(parts) != 3 or parts[0] != SCENE_PREFIX or not parts[2].isdigit():
        raise ValueError(
            f"scene {scene_id!r} is not a generated allday house (expected 'allday/<style>/<seed>'); "
            "Habitat/MP3D scenes need the habitat backend (sim.habitat)")
    if parts[1] not in STYLES:
        raise ValueError(f"scene {scene_id!r}: unknown house style {parts[1]!r}; known: {STYLES.names()}")
    return parts[1], int(parts[2])


def _shared_edge(a: RoomRect, b: RoomRect, tol: float = 1e-6) -> tuple[str, float, float, float] | None:
    """The wall segment two rooms share: (axis, fixed coordinate, lo, hi), or None."""
    if abs(a.x1 - b.x0) < tol or abs(b.x1 - a.x0) < tol:
        x = a.x1 if abs(a.x1 - b.x0) < tol else a.x0
        lo, hi = max(a.y0, b.y0), min(a.y1, b.y1)
        if hi - lo > tol:
            return ("y", x, lo, hi)
    if abs(a.y1 - b.y0) < tol or abs(b.y1 - a.y0) < tol:
        y = a.y1 if abs(a.y1 - b.y0) < tol else a.y0
        lo, hi = max(a.x0, b.x0), min(a.x1, b.x1)
        if hi - lo > tol:
            return ("x", y, lo, hi)
    return None


def _choose_doors(rng: np.random.Generator, rects: list[RoomRect], hub: int | None) -> list[Door]:
    """A random spanning tree over room adjacency (hub-first when there is a hallway) plus an extra loop."""
    n = len(rects)
    edges = []
    for i in range(n):
        for j in range(i + 1, n):
            e = _shared_edge(rects[i], rects[j])
            if e is not None and e[3] - e[2] >= 1.7:  # room for a 1.1 m door plus 0.25 m each side
                edges.append((i, j, e))
    if hub is not None:  # corridor style: every room opens onto the hallway
        tree = [e for e in edges if hub in e[:2]]
    else:
        order = rng.permutation(len(edges))
        parent = list(range(n))

        def find(k: int) -> int:
            while parent[k] != k:
                parent[k] = parent[parent[k]]
                k = parent[k]
            return k

        tree, rest = [], []
        for k in order:
            i, j, e = edges[k]
            if find(i) != find(j):
                parent[find(i)] = find(j)
                tree.append(edges[k])
            else:
                rest.append(edges[k])
        if rest and rng.random() < 0.5:
            tree.append(rest[0])
    doors = []
    for i, j, (axis, c, lo, hi) in tree:
        width = float(rng.uniform(0.9, 1.1))
        pos = float(rng.uniform(lo + 0.25 + width / 2, hi - 0.25 - width / 2))
        x, y = (pos, c) if axis == "x" else (c, pos)
        doors.append(Door(round(x, 3), round(y, 3), axis, round(width, 3), i, j))
    return doors


def _subtract(lo: float, hi: float, cuts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    segs = [(lo, hi)]
    for c0, c1 in cuts:
        nxt = []
        for s0, s1 in segs:
            if c1 <= s0 or c0 >= s1:
                nxt.append((s0, s1))
                continue
            if c0 > s0:
                nxt.append((s0, c0))
            if c1 < s1:
                nxt.append((c1, s1))
        segs = nxt
    return [s for s in segs if s[1] - s[0] > 1e-3]


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1e-6:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _build_walls(rects: list[RoomRect], doors: list[Door]) -> list[Wall]:
    """Every room edge becomes wall, shared edges once, minus the door gaps."""
    lines: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for r in rects:
        for axis, c, lo, hi in (("x", r.y0, r.x0, r.x1), ("x", r.y1, r.x0, r.x1),
                                ("y", r.x0, r.y0, r.y1), ("y", r.x1, r.y0, r.y1)):
            lines.setdefault((axis, round(c, 4)), []).append((lo, hi))
    walls = []
    half = WALL_THICKNESS / 2
    for (axis, c), ivs in sorted(lines.items()):
        cuts = [((d.x if axis == "x" else d.y) - d.width / 2, (d.x if axis == "x" else d.y) + d.width / 2)
                for d in doors if d.axis == axis and abs((d.y if axis == "x" else d.x) - c) < 1e-3]
        for lo, hi in _merge(ivs):
            for s0, s1 in _subtract(lo - half, hi + half, cuts):
                walls.append(Wall(s0, c, s1, c) if axis == "x" else Wall(c, s0, c, s1))
    return walls


def generate_house(seed: int, style: str = "grid", n_rooms: int | None = None) -> House:
    """Generate the house for ``(seed, style)``; ``n_rooms`` (3-8) defaults to a seeded draw."""
    if style not in STYLES:
        raise ValueError(f"unknown house style {style!r}; known: {STYLES.names()}")
    if n_rooms is not None and not MIN_ROOMS <= n_rooms <= MAX_ROOMS:
        raise ValueError(f"n_rooms must be in {MIN_ROOMS}..{MAX_ROOMS}, got {n_rooms}")
    rng = np.random.default_rng([int(seed), sum(map(ord, style))])
    n = int(n_rooms if n_rooms is not None else rng.integers(MIN_ROOMS, MAX_ROOMS + 1))
    rects = STYLES.get(style)(rng, n)
    hub = next((i for i, r in enumerate(rects) if r.is_hallway), None)
    if hub is None and len(rects) >= len(ROOM_KINDS):  # 8 plain rooms: the smallest becomes the hallway
        small = min(range(len(rects)), key=lambda i: (rects[i].x1 - rects[i].x0) * (rects[i].y1 - rects[i].y0))
        rects[small] = RoomRect(rects[small].x0, rects[small].y0, rects[small].x1, rects[small].y1, True)
    kinds = [k for k in ROOM_KINDS if k != "hallway"]
    order = list(rng.permutation(len(kinds)))
    rooms: list[Room] = []
    for i, r in enumerate(rects):
        name = "hallway" if r.is_hallway else kinds[order.pop(0)]
        rooms.append(Room(i, name, r.x0, r.y0, r.x1, r.y1,
                          floor_style=int(rng.integers(0, 6)), wall_style=int(rng.integers(0, 6))))
    doors = _choose_doors(rng, rects, hub if style == "corridor" else None)
    walls = _build_walls(rects, doors)
    house = House(int(seed), style, rooms, doors, walls)
    house.furniture = place_furniture(rng, house)
    log.debug("house %s: %d rooms, %d doors, %d items", house.scene_id, len(rooms), len(doors), len(house.furniture))
    return house
