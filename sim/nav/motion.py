"""Discrete VLN-CE motion on the occupancy grid: forward moves are blocked by dilated obstacles."""

from __future__ import annotations

import math
from dataclasses import dataclass

from agents.core.types import NavAction
from sim.core.frames import wrap_angle
from sim.nav.occupancy import OccupancyGrid


@dataclass(frozen=True)
class MotionSpec:
    forward_step: float = 0.25
    turn_angle_deg: float = 15.0

    def __post_init__(self) -> None:
        if not (0 < self.forward_step <= 2.0):
            raise ValueError(f"forward_step must be in (0, 2] m, got {self.forward_step}")
        if not (0 < self.turn_angle_deg <= 180):
            raise ValueError(f"turn_angle_deg must be in (0, 180], got {self.turn_angle_deg}")


def apply_action(grid: OccupancyGrid, x: float, y: float, phi: float, action: NavAction,
                 spec: MotionSpec) -> tuple[float, float, float, bool]:
    """New (x, y, phi) after ``action`` (MuJoCo frame) and whether a forward move collided."""
    if action == NavAction.MOVE_FORWARD:
        nx = x + spec.forward_step * math.cos(phi)
        ny = y + spec.forward_step * math.sin(phi)
        if grid.segment_free(x, y, nx, ny):
            return nx, ny, phi, False
        return x, y, phi, True
    if action == NavAction.TURN_LEFT:
        return x, y, wrap_angle(phi + math.radians(spec.turn_angle_deg)), False
    if action == NavAction.TURN_RIGHT:
        return x, y, wrap_angle(phi - math.radians(spec.turn_angle_deg)), False
    return x, y, phi, False
