"""The embedded default backend: MuJoCo-rendered procedural houses with occupancy-grid motion."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from agents.core.types import NavAction
from sim.core.env import BaseNavEnv, NavEnvConfig
from sim.core.episodes import Episode, GroundTruth
from sim.core.frames import habitat_to_mj, phi_to_theta, theta_to_phi
from sim.nav.follower import ShortestPathFollower
from sim.nav.house import House, generate_house, parse_scene_id
from sim.nav.mjcf import build_mjcf, get_quality, item_geom_name
from sim.nav.motion import MotionSpec, apply_action
from sim.nav.occupancy import OccupancyGrid

log = logging.getLogger(__name__)


class MujocoNavEnv(BaseNavEnv):
    """Generated houses (scene ids ``allday/<style>/<seed>``) rendered headless with MuJoCo."""

    def __init__(self, config: NavEnvConfig | None = None, episodes: Sequence[Episode] | None = None,
                 ground_truth: dict[str, GroundTruth] | None = None) -> None:
        super().__init__(config or NavEnvConfig(), episodes, ground_truth)
        self.motion = MotionSpec(self.config.forward_step, self.config.turn_angle_deg)
        self._houses: dict[str, tuple[House, OccupancyGrid]] = {}
        self._renderer = None
        self._renderer_key: tuple | None = None
        self.house: House | None = None
        self.grid: OccupancyGrid | None = None
        self._goal_mj = (0.0, 0.0)
        self._follower: ShortestPathFollower | None = None

    # ---- scene ---------------------------------------------------------------------------------
    def scene(self, scene_id: str) -> tuple[House, OccupancyGrid]:
        """House and occupancy grid of a generated scene id (cached)."""
        if scene_id not in self._houses:
            style, seed = parse_scene_id(scene_id)
            house = generate_house(seed, style)
            self._houses[scene_id] = (house, OccupancyGrid(house, agent_radius=self.config.agent_radius))
        return self._houses[scene_id]

    def _load(self, episode: Episode, condition_name: str) -> None:
        self.house, self.grid = self.scene(episode.scene_id)
        gx, gy, _ = habitat_to_mj(episode.goals[0].position)
        self._goal_mj = (gx, gy)
        self._follower = ShortestPathFollower(self.grid, self.motion)
        key = (episode.scene_id, condition_name, repr(self._condition.params), self.config.quality)
        if key != self._renderer_key:
            self._make_renderer(key, condition_name)

    def _make_renderer(self, key: tuple, condition_name: str) -> None:
        from sim.nav.conditions import LightingSpec
        from sim.nav.renderer import NavRenderer

        if self._renderer is not None:
            self._renderer.close()
        cfg = self.config
        lighting = self._condition.lighting() if cfg.physical_conditions else LightingSpec()
        xml = build_mjcf(self.house, lighting, get_quality(cfg.quality), cfg.width, cfg.height,
                         self._vfov_deg())
        self._renderer = NavRenderer(xml, cfg.width, cfg.height, get_quality(cfg.quality),
                                     fog=lighting.fog is not None, camera_height=cfg.camera_height,
                                     max_depth=cfg.max_depth)
        self._renderer_key = key

    def _vfov_deg(self) -> float:
        """MuJoCo's fovy is vertical: derive it from the configured horizontal FOV and aspect."""
        cfg = self.config
        return float(np.degrees(2 * np.arctan(np.tan(np.radians(cfg.hfov_deg) / 2) * cfg.height / cfg.width)))

    # ---- hooks ---------------------------------------------------------------------------------
    def _mj_pose(self) -> tuple[float, float, float]:
        x, y, _ = habitat_to_mj(self._position)
        return x, y, theta_to_phi(self._theta)

    def _move(self, action: NavAction) -> bool:
        x, y, phi = self._mj_pose()
        nx, ny, nphi, collided = apply_action(self.grid, x, y, phi, action, self.motion)
        self._position = np.array([nx, self._position[1], -ny])
        self._theta = phi_to_theta(nphi)
        return collided

    def _render_frame(self) -> tuple[np.ndarray, np.ndarray | None]:
        x, y, phi = self._mj_pose()
        needs_depth = self._condition is not None and self._condition.needs_depth
        return self._renderer.render(x, y, phi, depth=self.config.depth or needs_depth)

    def geodesic_to_goal(self, position: np.ndarray) -> float:
        x, y, _ = habitat_to_mj(position)
        return self.grid.geodesic(x, y, *self._goal_mj)

    def is_navigable(self, position: np.ndarray) -> bool:
        x, y, _ = habitat_to_mj(position)
        return self.grid.is_navigable(x, y)

    # ---- privileged ----------------------------------------------------------------------------
    def oracle_action(self) -> NavAction:
        """The shortest-path follower's next action from the current pose (privileged teacher)."""
        x, y, phi = self._mj_pose()
        return self._follower.next_action(x, y, phi, *self._goal_mj)

    def item_masks(self) -> dict[int, np.ndarray]:
        """Pixel masks (HxW bool, the RGB frame's size) of the furniture items visible from the current pose, keyed
        by index in ``house.furniture``; items fully hidden or out of view are absent."""
        if self._renderer is None or self.house is None:
            raise RuntimeError("no episode loaded; call reset() first")
        ids = self._renderer.segment(*self._mj_pose())
        out: dict[int, np.ndarray] = {}
        for i, item in enumerate(self.house.furniture):
            mask = ids == self._renderer.geom_id(item_geom_name(i, item))
            if mask.any():
                out[i] = mask
        return out

    def goal_item(self) -> int | None:
        """Index in ``house.furniture`` of the episode's goal object (``info['goal_object']`` in ``info['goal_room']``,
        the one nearest the goal point if several match); None if the episode names no object."""
        info = self.episode.info
        label, room = info.get("goal_object"), info.get("goal_room")
        if label is None or self.house is None:
            return None
        match = [i for i, it in enumerate(self.house.furniture)
                 if it.label == label and (room is None or self.house.rooms[it.room].name == room)]
        if not match:
            return None
        gx, gy = self._goal_mj
        return min(match, key=lambda i: self.house.furniture[i].distance_to(gx, gy))

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
            self._renderer_key = None
