"""Shortest-path follower on the geodesic field: the oracle/teacher for imitation learning and DAgger."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from agents.core.policy import Policy
from agents.core.types import NavAction, Observation
from sim.nav.motion import MotionSpec, apply_action
from sim.nav.occupancy import OccupancyGrid

if TYPE_CHECKING:
    from sim.nav.env import MujocoNavEnv


class ShortestPathFollower:
    """Greedy descent of the FMM distance field over the headings reachable by whole turns.

    At each step it scores a forward move along every heading ``phi + k * turn`` and picks the one
    that lowers the geodesic most (ties keep the current heading); it turns toward that heading by
    the shorter side, moves when aligned, and stops within ``stop_radius`` of the goal or when no move
    gets closer.
    """

    def __init__(self, grid: OccupancyGrid, spec: MotionSpec | None = None, stop_radius: float = 0.2,
                 keep_heading_tol: float = 0.03) -> None:
        self.grid = grid
        self.spec = spec or MotionSpec()
        self.stop_radius = float(stop_radius)
        self.keep_heading_tol = float(keep_heading_tol)
        self._n_headings = max(1, int(round(360.0 / self.spec.turn_angle_deg)))

    def next_action(self, x: float, y: float, phi: float, gx: float, gy: float) -> NavAction:
        field = self.grid.distance_field(gx, gy)
        d0 = self._lookup(field, x, y)
        if d0 <= self.stop_radius:
            return NavAction.STOP
        step, turn = self.spec.forward_step, math.radians(self.spec.turn_angle_deg)
        best_k, best_d, cur_d = None, d0, math.inf
        for k in range(self._n_headings):
            h = phi + k * turn
            nx, ny = x + step * math.cos(h), y + step * math.sin(h)
            if not self.grid.segment_free(x, y, nx, ny):
                continue
            d = self._lookup(field, nx, ny)
            if k == 0:
                cur_d = d
            if d < best_d - 1e-9:
                best_k, best_d = k, d
        if best_k is None:
            return NavAction.STOP
        if best_k == 0 or cur_d <= best_d + self.keep_heading_tol:
            return NavAction.MOVE_FORWARD
        return NavAction.TURN_LEFT if best_k <= self._n_headings // 2 else NavAction.TURN_RIGHT

    def _lookup(self, field: np.ndarray, x: float, y: float) -> float:
        r, c = self.grid.to_cell(x, y)
        return float(field[r, c])

    def rollout(self, x: float, y: float, phi: float, gx: float, gy: float,
                max_steps: int = 500) -> tuple[list[tuple[float, float]], list[int], float]:
        """Follow to the goal without rendering: (visited positions incl. start, actions, final phi)."""
        positions, actions = [(x, y)], []
        for _ in range(max_steps):
            a = self.next_action(x, y, phi, gx, gy)
            actions.append(int(a))
            if a == NavAction.STOP:
                break
            x, y, phi, _ = apply_action(self.grid, x, y, phi, a, self.spec)
            positions.append((x, y))
        return positions, actions, phi


class OraclePolicy(Policy):
    """The follower as a Policy: privileged access to the environment's pose and goal."""

    name = "oracle"

    def __init__(self, env: "MujocoNavEnv") -> None:
        self.env = env

    def act(self, observation: Observation) -> NavAction:
        return self.env.oracle_action()




__all__ = ["ShortestPathFollower", "OraclePolicy"]
