"""Occupancy grid of a house and fast-marching geodesic distance fields (scikit-fmm).

The grid has 5 cm cells over the house footprint. Walls and furniture (everything below 1.8 m) are
obstacles; outside the house is an obstacle; obstacles are dilated by the agent radius so the agent
is a point on the ``navigable`` mask. Geodesic fields are computed once per goal and cached.
"""

from __future__ import annotations

import logging
from functools import lru_cache

import numpy as np
from scipy import ndimage

from sim.nav.house import House

log = logging.getLogger(__name__)


class OccupancyGrid:
    """Navigable-space grid in the MuJoCo floor frame (x, y), row = y index, col = x index."""

    def __init__(self, house: House, resolution: float = 0.05, agent_radius: float = 0.18,
                 max_obstacle_height: float = 1.8) -> None:
        if resolution <= 0 or agent_radius < 0:
            raise ValueError("resolution must be > 0 and agent_radius >= 0")
        self.resolution = float(resolution)
        self.agent_radius = float(agent_radius)
        bx0, by0, bx1, by1 = house.bounds
        pad = 0.5
        self.origin = np.array([bx0 - pad, by0 - pad])
        w = int(np.ceil((bx1 - bx0 + 2 * pad) / resolution))
        h = int(np.ceil((by1 - by0 + 2 * pad) / resolution))
        inside = np.zeros((h, w), dtype=bool)
        for r in house.rooms:
            inside[self._box_slices(r.x0, r.y0, r.x1, r.y1)] = True
        obstacle = ~inside
        for wall in house.walls:
            t = wall.thickness / 2
            obstacle[self._box_slices(min(wall.x0, wall.x1) - t * (wall.x0 == wall.x1),
                                      min(wall.y0, wall.y1) - t * (wall.y0 == wall.y1),
                                      max(wall.x0, wall.x1) + t * (wall.x0 == wall.x1),
                                      max(wall.y0, wall.y1) + t * (wall.y0 == wall.y1))] = True
        for it in house.furniture:
            if it.height > 0 and min(it.height, max_obstacle_height) > 0:
                obstacle[self._box_slices(it.x - it.sx, it.y - it.sy, it.x + it.sx, it.y + it.sy)] = True
        self.obstacle = obstacle
        clearance = ndimage.distance_transform_edt(~obstacle) * resolution
        self.navigable = clearance > agent_radius
        # nearest navigable cell for every cell (snapping positions inside dilated obstacles)
        _, idx = ndimage.distance_transform_edt(~self.navigable, return_indices=True)
        self._snap_rows, self._snap_cols = idx[0], idx[1]
        self._fields: dict[tuple[int, int], np.ndarray] = {}

    # -- coordinates -------------------------------------------------------------------------------
    def _box_slices(self, x0: float, y0: float, x1: float, y1: float) -> tuple[slice, slice]:
        c0 = int(np.floor((x0 - self.origin[0]) / self.resolution))
        c1 = int(np.ceil((x1 - self.origin[0]) / self.resolution))
        r0 = int(np.floor((y0 - self.origin[1]) / self.resolution))
        r1 = int(np.ceil((y1 - self.origin[1]) / self.resolution))
        return slice(max(r0, 0), max(r1, 0)), slice(max(c0, 0), max(c1, 0))

    @property
    def shape(self) -> tuple[int, int]:
        return self.navigable.shape

    def to_cell(self, x: float, y: float) -> tuple[int, int]:
        """(row, col) of the cell containing (x, y), clipped to the grid."""
        c = int((x - self.origin[0]) / self.resolution)
        r = int((y - self.origin[1]) / self.resolution)
        h, w = self.navigable.shape
        return min(max(r, 0), h - 1), min(max(c, 0), w - 1)

    def to_world(self, row: int, col: int) -> tuple[float, float]:
        return (float(self.origin[0] + (col + 0.5) * self.resolution),
                float(self.origin[1] + (row + 0.5) * self.resolution))

    def is_navigable(self, x: float, y: float) -> bool:
        h, w = self.navigable.shape
        c = int(np.floor((x - self.origin[0]) / self.resolution))
        r = int(np.floor((y - self.origin[1]) / self.resolution))
        return 0 <= r < h and 0 <= c < w and bool(self.navigable[r, c])

    def segment_free(self, x0: float, y0: float, x1: float, y1: float) -> bool:
        """True when every point of the straight segment lies in navigable space (sampled at res/2)."""
        # the 1e-9 keeps the sample count from flipping with float noise in the length (0.25 m / 0.025 m is
        # exactly 10): the same step at headings a rounding error apart must be checked at the same points
        n = max(2, int(np.ceil(np.hypot(x1 - x0, y1 - y0) / (self.resolution / 2) - 1e-9)) + 1)
        xs = np.linspace(x0, x1, n)
        ys = np.linspace(y0, y1, n)
        cols = np.floor((xs - self.origin[0]) / self.resolution).astype(int)
        rows = np.floor((ys - self.origin[1]) / self.resolution).astype(int)
        h, w = self.navigable.shape
        if rows.min() < 0 or cols.min() < 0 or rows.max() >= h or cols.max() >= w:
            return False
        return bool(self.navigable[rows, cols].all())

    def snap(self, x: float, y: float) -> tuple[float, float]:
        """The nearest navigable point (the cell centre) to (x, y); (x, y) itself if navigable."""
        if self.is_navigable(x, y):
            return x, y
        r, c = self.to_cell(x, y)
        return self.to_world(int(self._snap_rows[r, c]), int(self._snap_cols[r, c]))

    # -- geodesics ---------------------------------------------------------------------------------
    def distance_field(self, gx: float, gy: float) -> np.ndarray:
        """Geodesic distance (m) from every cell to the goal; inf where unreachable. Cached per goal cell."""
        gx, gy = self.snap(gx, gy)
        key = self.to_cell(gx, gy)
        if key not in self._fields:
            self._fields[key] = _fmm_field(self.navigable, key, self.resolution)
        return self._fields[key]

    def geodesic(self, x: float, y: float, gx: float, gy: float) -> float:
        """Geodesic distance from (x, y) to (gx, gy); positions in obstacles snap to the nearest free cell."""
        field = self.distance_field(gx, gy)
        sx, sy = self.snap(x, y)
        r, c = self.to_cell(sx, sy)
        return float(field[r, c])

    def reachable_from(self, x: float, y: float) -> np.ndarray:
        """Boolean mask of navigable cells connected to (x, y)."""
        labels, _ = ndimage.label(self.navigable)
        r, c = self.to_cell(*self.snap(x, y))
        return labels == labels[r, c]


def _fmm_field(navigable: np.ndarray, goal: tuple[int, int], res: float) -> np.ndarray:
    import skfmm

    h, w = navigable.shape
    rows, cols = np.mgrid[0:h, 0:w]
    euclid = np.hypot(rows - goal[0], cols - goal[1]) * res
    r0 = 1.5 * res
    phi = np.ma.MaskedArray(euclid - r0, mask=~navigable)
    dist = skfmm.distance(phi, dx=res)
    out = np.where(np.ma.getmaskarray(dist), np.inf, np.ma.getdata(dist) + r0)
    near = euclid <= r0
    out[near & navigable] = euclid[near & navigable]
    # cells the front never reached (disconnected components) come back unmasked but meaningless
    labels, _ = ndimage.label(navigable)
    out[labels != labels[goal]] = np.inf
    return out.astype(np.float64)


@lru_cache(maxsize=16)
def grid_for_scene(scene_id: str, resolution: float = 0.05, agent_radius: float = 0.18) -> OccupancyGrid:
    """Occupancy grid of a generated scene id, cached (houses are reproducible from their id)."""
    from sim.nav.house import generate_house, parse_scene_id

    style, seed = parse_scene_id(scene_id)
    return OccupancyGrid(generate_house(seed, style), resolution, agent_radius)
