"""Named, coloured furniture and landmarks, placed per room kind without blocking doors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sim.nav.house import House

#: colour name -> rgba
COLOURS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.78, 0.12, 0.12, 1.0), "green": (0.15, 0.6, 0.2, 1.0), "blue": (0.15, 0.3, 0.8, 1.0),
    "yellow": (0.92, 0.8, 0.15, 1.0), "white": (0.92, 0.92, 0.9, 1.0), "black": (0.08, 0.08, 0.08, 1.0),
    "brown": (0.45, 0.28, 0.12, 1.0), "orange": (0.95, 0.5, 0.1, 1.0), "purple": (0.5, 0.2, 0.6, 1.0),
    "grey": (0.5, 0.5, 0.52, 1.0),
}


@dataclass(frozen=True)
class FurnitureSpec:
    name: str
    hx: float  # half length along the wall (or radius for cylinders)
    hy: float  # half depth away from the wall
    height: float
    shape: str = "box"
    free_standing: bool = False


def _s(name: str, hx: float, hy: float, h: float, shape: str = "box", free: bool = False) -> FurnitureSpec:
    return FurnitureSpec(name, hx, hy, h, shape, free)


CATALOGUE: dict[str, list[FurnitureSpec]] = {
    "living room": [_s("sofa", 1.0, 0.45, 0.8), _s("armchair", 0.45, 0.45, 0.9), _s("tv stand", 0.8, 0.25, 1.0),
                    _s("plant", 0.25, 0.25, 1.2, "cylinder"), _s("coffee table", 0.5, 0.3, 0.45, free=True)],
    "kitchen": [_s("fridge", 0.4, 0.35, 1.8), _s("counter", 1.0, 0.3, 0.9), _s("stove", 0.35, 0.3, 0.9),
                _s("table", 0.6, 0.45, 0.75, free=True)],
    "bedroom": [_s("bed", 1.0, 0.8, 0.55), _s("wardrobe", 0.6, 0.3, 2.0), _s("nightstand", 0.25, 0.25, 0.55),
                _s("lamp", 0.2, 0.2, 1.5, "cylinder")],
    "bathroom": [_s("bathtub", 0.8, 0.38, 0.6), _s("sink", 0.3, 0.25, 0.9), _s("toilet", 0.22, 0.3, 0.75)],
    "office": [_s("desk", 0.7, 0.35, 0.75), _s("bookshelf", 0.5, 0.2, 1.9), _s("office chair", 0.3, 0.3, 1.0,
                                                                                 "cylinder")],
    "dining room": [_s("dining table", 0.9, 0.5, 0.75, free=True), _s("cabinet", 0.6, 0.25, 1.2),
                    _s("plant", 0.25, 0.25, 1.2, "cylinder")],
    "laundry room": [_s("washing machine", 0.3, 0.3, 0.9), _s("shelf", 0.5, 0.2, 1.6),
                     _s("basket", 0.25, 0.25, 0.5, "cylinder")],
    "hallway": [_s("plant", 0.25, 0.25, 1.2, "cylinder"), _s("bench", 0.6, 0.2, 0.45),
                _s("coat rack", 0.2, 0.2, 1.8, "cylinder")],
}


@dataclass(frozen=True)
class FurnitureItem:
    """A placed item: axis-aligned footprint centre (x, y), half extents (sx, sy), height (m)."""

    name: str
    colour: str
    x: float
    y: float
    sx: float
    sy: float
    height: float
    shape: str
    room: int

    @property
    def label(self) -> str:
        return f"{self.colour} {self.name}"

    @property
    def rgba(self) -> tuple[float, float, float, float]:
        return COLOURS[self.colour]

    def distance_to(self, x: float, y: float) -> float:
        """Distance from (x, y) to the footprint's boundary (0 inside)."""
        dx = max(abs(x - self.x) - self.sx, 0.0)
        dy = max(abs(y - self.y) - self.sy, 0.0)
        return float(np.hypot(dx, dy))


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float], gap: float) -> bool:
    return abs(a[0] - b[0]) < a[2] + b[2] + gap and abs(a[1] - b[1]) < a[3] + b[3] + gap


def place_furniture(rng: np.random.Generator, house: House, tries: int = 40) -> list[FurnitureItem]:
    """Place 2-4 items per room: most against a wall, tables free-standing; doors keep 1.1 m clear."""
    items: list[FurnitureItem] = []
    margin = 0.07  # half wall thickness + a little
    colour_names = list(COLOURS)
    for room in house.rooms:
        specs = CATALOGUE[room.name]
        count = int(rng.integers(2, min(4, len(specs)) + 1))
        chosen = [specs[i] for i in rng.permutation(len(specs))[:count]]
        door_pts = [(d.x, d.y) for d in house.doors if room.index in (d.a, d.b)]
        for spec in chosen:
            for _ in range(tries):
                if spec.free_standing:
                    sx, sy = (spec.hx, spec.hy) if rng.random() < 0.5 else (spec.hy, spec.hx)
                    if room.x1 - room.x0 < 2.2 + 2 * sx or room.y1 - room.y0 < 2.2 + 2 * sy:
                        continue
                    x = float(rng.uniform(room.x0 + 1.0 + sx, room.x1 - 1.0 - sx))
                    y = float(rng.uniform(room.y0 + 1.0 + sy, room.y1 - 1.0 - sy))
                else:
                    side = int(rng.integers(0, 4))
                    along_x = side in (0, 1)
                    sx, sy = (spec.hx, spec.hy) if along_x else (spec.hy, spec.hx)
                    lo_x, hi_x = room.x0 + margin + sx, room.x1 - margin - sx
                    lo_y, hi_y = room.y0 + margin + sy, room.y1 - margin - sy
                    if lo_x >= hi_x or lo_y >= hi_y:
                        continue
                    x = float(rng.uniform(lo_x, hi_x)) if along_x else (lo_x if side == 2 else hi_x)
                    y = float(rng.uniform(lo_y, hi_y)) if not along_x else (lo_y if side == 0 else hi_y)
                box = (x, y, sx, sy)
                if any(np.hypot(max(abs(px - x) - sx, 0), max(abs(py - y) - sy, 0)) < 1.1 for px, py in door_pts):
                    continue
                if any(_overlaps(box, (o.x, o.y, o.sx, o.sy), 0.75) for o in items if o.room == room.index):
                    continue
                colour = colour_names[int(rng.integers(0, len(colour_names)))]
                items.append(FurnitureItem(spec.name, colour, round(x, 3), round(y, 3), sx, sy, spec.height,
                                           spec.shape, room.index))
                break
    return items
