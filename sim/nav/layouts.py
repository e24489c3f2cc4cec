"""House layout styles: each turns (rng, n_rooms) into axis-aligned room rectangles that tile a footprint.

Adding a style is one function plus one ``@LAYOUTS.register`` line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from agents.core.registry import Registry


@dataclass(frozen=True)
class RoomRect:
    x0: float
    y0: float
    x1: float
    y1: float
    is_hallway: bool = False


LayoutFn = Callable[[np.random.Generator, int], list[RoomRect]]
LAYOUTS: Registry[LayoutFn] = Registry("house style")


def _sizes(rng: np.random.Generator, k: int, lo: float, hi: float) -> list[float]:
    return [round(float(rng.uniform(lo, hi)), 2) for _ in range(k)]


def _cum(sizes: list[float]) -> list[float]:
    return [0.0] + list(np.round(np.cumsum(sizes), 3))


@LAYOUTS.register("grid")
def grid_layout(rng: np.random.Generator, n: int) -> list[RoomRect]:
    """Rooms on an irregular rows x cols grid; wide rooms merge neighbouring cells when n is odd."""
    cols = 2 if n <= 4 else 3
    rows = int(np.ceil(n / cols))
    xs = _cum(_sizes(rng, cols, 3.2, 5.0))
    ys = _cum(_sizes(rng, rows, 3.2, 4.6))
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    spare = rows * cols - n  # merge this many cells of the last row into their left neighbour
    rects = []
    for r, c in cells:
        if r == rows - 1 and spare > 0 and c >= cols - spare:
            continue
        x1 = xs[c + 1] if not (r == rows - 1 and spare > 0 and c == cols - spare - 1) else xs[cols]
        rects.append(RoomRect(xs[c], ys[r], x1, ys[r + 1]))
    return rects


@LAYOUTS.register("corridor")
def corridor_layout(rng: np.random.Generator, n: int) -> list[RoomRect]:
    """A central hallway along x with rooms on both sides (n includes the hallway)."""
    k = n - 1
    top, bottom = (k + 1) // 2, k // 2
    hall_w = round(float(rng.uniform(1.5, 2.0)), 2)
    depth_b = round(float(rng.uniform(3.2, 4.5)), 2)
    depth_t = round(float(rng.uniform(3.2, 4.5)), 2)
    wt = _sizes(rng, top, 3.0, 4.8)
    length = float(np.sum(wt))
    rects = []
    if bottom:
        wb = np.asarray(_sizes(rng, bottom, 3.0, 4.8))
        wb = list(np.round(wb * length / wb.sum(), 3))
        for a, b in zip(_cum(wb)[:-1], _cum(wb)[1:]):
            rects.append(RoomRect(a, 0.0, b, depth_b))
    y0 = depth_b if bottom else 0.0
    rects.append(RoomRect(0.0, y0, round(length, 3), y0 + hall_w, is_hallway=True))
    for a, b in zip(_cum(wt)[:-1], _cum(wt)[1:]):
        rects.append(RoomRect(a, y0 + hall_w, b, y0 + hall_w + depth_t))
    return rects


@LAYOUTS.register("lshape")
def lshape_layout(rng: np.random.Generator, n: int) -> list[RoomRect]:
    """Rooms along an L: a row along x, then a column along y from its last room (railroad plan)."""
    row = max(2, (n + 1) // 2)
    col = n - row
    depth = round(float(rng.uniform(3.4, 4.6)), 2)
    xs = _cum(_sizes(rng, row, 3.0, 4.6))
    rects = [RoomRect(a, 0.0, b, depth) for a, b in zip(xs[:-1], xs[1:])]
    if col:
        ys = [depth + y for y in _cum(_sizes(rng, col, 3.0, 4.4))]
        x0 = xs[-2]
        for a, b in zip(ys[:-1], ys[1:]):
            rects.append(RoomRect(x0, round(a, 3), xs[-1], round(b, 3)))
    return rects
