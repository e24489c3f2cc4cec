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

    #: callers that know the goal object (``training.vln.data.teacher_actions``) pass its centre as ``aim`` to
    #: followers that set this
    object_aim = False

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

    @classmethod
    def for_camera(cls, grid: OccupancyGrid, spec: MotionSpec | None = None, hfov_deg: float = 79.0,
                   aim: tuple[float, float] | None = None) -> "ShortestPathFollower":
        """A follower for a camera of ``hfov_deg`` aiming at ``aim``; this one ignores both."""
        return cls(grid, spec)

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


class SightlineFollower(ShortestPathFollower):
    """A teacher that steers by what the camera sees.

    While the goal point is in straight line of sight (the segment to it is navigable) and farther than
    ``near_radius``, and the point it aims at (``aim``: the goal object's centre, say; default the goal point) is
    in the camera's horizontal field of view (``hfov_deg``), it turns toward the aim whenever it is outside the
    frame's middle third and moves forward otherwise. Out of view, occluded, blocked, or near the goal it is the
    shortest-path follower. Meant to make the action a function of where the goal is in the frame (the geodesic
    follower turns only once the heading is some 28 degrees off); measured on short episodes, the frame predicts it
    only slightly better than the follower's (``docs/alldaywalker.md``, "A sixth look").
    """

    def __init__(self, grid: OccupancyGrid, spec: MotionSpec | None = None, stop_radius: float = 0.2,
                 keep_heading_tol: float = 0.03, hfov_deg: float = 79.0, near_radius: float = 0.5,
                 aim: tuple[float, float] | None = None) -> None:
        super().__init__(grid, spec, stop_radius, keep_heading_tol)
        if not 1.0 <= hfov_deg <= 179.0:
            raise ValueError(f"hfov_deg must be in [1, 179], got {hfov_deg}")
        if near_radius < stop_radius:
            raise ValueError(f"near_radius ({near_radius}) must be >= stop_radius ({stop_radius})")
        self.half_fov = math.radians(hfov_deg) / 2
        #: bearing of the frame's third boundaries (pinhole camera)
        self.third = math.atan(math.tan(self.half_fov) / 3)
        self.near_radius = float(near_radius)
        self.aim = aim

    @classmethod
    def for_camera(cls, grid: OccupancyGrid, spec: MotionSpec | None = None, hfov_deg: float = 79.0,
                   aim: tuple[float, float] | None = None) -> "SightlineFollower":
        return cls(grid, spec, hfov_deg=hfov_deg, aim=aim)

    def next_action(self, x: float, y: float, phi: float, gx: float, gy: float) -> NavAction:
        if math.hypot(gx - x, gy - y) > self.near_radius and self.grid.segment_free(x, y, gx, gy):
            bearing = self._bearing(x, y, phi, *(self.aim if self.aim is not None else (gx, gy)))
            if abs(bearing) < self.half_fov:
                action = self._steer(x, y, phi, bearing)
                if action is not None:
                    return action
        return super().next_action(x, y, phi, gx, gy)

    @staticmethod
    def _bearing(x: float, y: float, phi: float, ax: float, ay: float) -> float:
        """Angle from the heading ``phi`` to the point (ax, ay), radians in (-pi, pi], CCW positive (to the left)."""
        d = math.atan2(ay - y, ax - x) - phi
        return math.atan2(math.sin(d), math.cos(d))

    def _steer(self, x: float, y: float, phi: float, bearing: float) -> NavAction | None:
        """By the frame's thirds, for a target in view: turn toward it outside the middle third, else forward; None
        when forward is blocked."""
        if bearing > self.third:
            return NavAction.TURN_LEFT
        if bearing < -self.third:
            return NavAction.TURN_RIGHT
        step = self.spec.forward_step
        if self.grid.segment_free(x, y, x + step * math.cos(phi), y + step * math.sin(phi)):
            return NavAction.MOVE_FORWARD
        return None


class SearchFollower(SightlineFollower):
    """A teacher whose every action follows from the current frame: search, approach, stop.

    With the goal point in straight line of sight it acts on the bearing of its target: outside the camera's
    horizontal field of view it turns left (a fixed search direction: the frame cannot tell which side a hidden goal
    is on), in a side third of the frame it turns toward it, in the middle third it moves forward. It stops within
    ``stop_radius`` of the goal point, or when forward is blocked within ``reach`` of it (at the object). With the
    line of sight blocked, or forward blocked farther out, it is the shortest-path follower, which turns toward a
    goal it cannot see by the map: no navigator that sees one frame can imitate that (``docs/alldaywalker.md``,
    "A fifteenth look").

    The target is ``aim`` (the goal object's centre, which the goal word of a ``goal_prefix`` answer describes)
    while the goal point is farther than ``handover`` and the first ``handover`` m toward the centre are free; the
    goal point otherwise (near the object the centre and the point in front of its near face part). Both choices
    depend on the position only, so turning in place never flips them.
    """

    object_aim = True

    def __init__(self, grid: OccupancyGrid, spec: MotionSpec | None = None, stop_radius: float = 0.5,
                 keep_heading_tol: float = 0.03, hfov_deg: float = 79.0, aim: tuple[float, float] | None = None,
                 reach: float = 0.9, handover: float = 1.5) -> None:
        super().__init__(grid, spec, stop_radius, keep_heading_tol, hfov_deg, near_radius=stop_radius, aim=aim)
        if reach < stop_radius:
            raise ValueError(f"reach ({reach}) must be >= stop_radius ({stop_radius})")
        if handover < reach:
            raise ValueError(f"handover ({handover}) must be >= reach ({reach})")
        self.reach, self.handover = float(reach), float(handover)

    @classmethod
    def for_camera(cls, grid: OccupancyGrid, spec: MotionSpec | None = None, hfov_deg: float = 79.0,
                   aim: tuple[float, float] | None = None) -> "SearchFollower":
        return cls(grid, spec, hfov_deg=hfov_deg, aim=aim)

    def next_action(self, x: float, y: float, phi: float, gx: float, gy: float) -> NavAction:
        dist = math.hypot(gx - x, gy - y)
        if dist <= self.stop_radius:
            return NavAction.STOP
        if not self.grid.segment_free(x, y, gx, gy):
            return ShortestPathFollower.next_action(self, x, y, phi, gx, gy)
        ax, ay = gx, gy
        if self.aim is not None and dist > self.handover:
            c = math.atan2(self.aim[1] - y, self.aim[0] - x)
            if self.grid.segment_free(x, y, x + self.handover * math.cos(c), y + self.handover * math.sin(c)):
                ax, ay = self.aim
        bearing = self._bearing(x, y, phi, ax, ay)
        if abs(bearing) >= self.half_fov:
            return NavAction.TURN_LEFT
        action = self._steer(x, y, phi, bearing)
        if action is not None:
            return action
        if dist <= self.reach:
            return NavAction.STOP
        return ShortestPathFollower.next_action(self, x, y, phi, gx, gy)


#: teachers for imitation by name (``VLNTrainConfig.teacher``)
FOLLOWERS: dict[str, type[ShortestPathFollower]] = {"geodesic": ShortestPathFollower, "sightline": SightlineFollower,
                                                     "search": SearchFollower}


def make_follower(name: str, grid: OccupancyGrid, spec: MotionSpec | None = None, hfov_deg: float = 79.0,
                  aim: tuple[float, float] | None = None) -> ShortestPathFollower:
    """The teacher ``name`` (a key of ``FOLLOWERS``) on ``grid``; ``hfov_deg`` is the camera's horizontal FOV and
    ``aim`` the point the ``sightline`` teacher steers at (the goal object's centre; None: the goal point)."""
    if name not in FOLLOWERS:
        raise ValueError(f"unknown teacher {name!r}; known: {sorted(FOLLOWERS)}")
    return FOLLOWERS[name].for_camera(grid, spec, hfov_deg, aim)


class OraclePolicy(Policy):
    """The follower as a Policy: privileged access to the environment's pose and goal."""

    name = "oracle"

    def __init__(self, env: "MujocoNavEnv") -> None:
        self.env = env

    def act(self, observation: Observation) -> NavAction:
        return self.env.oracle_action()




__all__ = ["FOLLOWERS", "OraclePolicy", "SearchFollower", "ShortestPathFollower", "SightlineFollower", "make_follower"]
