"""Habitat-Sim backend: VLN-CE scenes (e.g. MP3D ``.glb`` + ``.navmesh``) behind the shared env protocol.

``habitat_sim`` is imported lazily (it is not on PyPI; see ``docs/habitat.md``), so this module imports
without it and ``ENV_BACKENDS``/tests can reference :class:`HabitatNavEnv` anywhere.

Frames: :class:`~sim.core.env.BaseNavEnv` keeps poses in the Habitat world frame ([x, y up, z],
heading = yaw about +y, 0 facing -z), which is habitat_sim's own frame, so positions go to and from
the agent state unchanged and the rotation is the quaternion about +y of :func:`~sim.core.frames.yaw_to_quat`.
After every action the pose is read back from the simulator (navmesh snapping, sliding, float32).

Differences from the MuJoCo backend:

* no physical lighting: a condition is realised only by the camera post-process of the base class
  (``Condition.apply``), whatever ``NavEnvConfig.physical_conditions`` says;
* motion is habitat_sim's navmesh-constrained ``move_forward``/``turn_left``/``turn_right`` (sliding along
  walls by default, as in VLN-CE); collisions come from ``Agent.act`` (the flag habitat-lab exposes as
  ``previous_step_collided``) or a forward move that did not change the position;
* geodesics and navigability come from the scene's navmesh (``ShortestPath`` + ``PathFinder.find_path``),
  so the agent radius is the navmesh's, not ``NavEnvConfig.agent_radius``.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.core.types import NavAction
from sim.core.env import BaseNavEnv, NavEnvConfig
from sim.core.episodes import Episode, GroundTruth
from sim.core.frames import quat_to_yaw, yaw_to_quat

log = logging.getLogger(__name__)

HABITAT_INSTALL_HINT = ("habitat-sim is not on PyPI; install it with conda "
                        "(conda install habitat-sim -c conda-forge -c aihabitat), see docs/habitat.md")
SCENES_ENV_VAR = "ALLDAY_HABITAT_SCENES"
DEFAULT_SCENES_DIR = "data/scene_datasets"

#: habitat_sim action-space keys of the motion actions (STOP never reaches the simulator)
_ACTION_KEYS = {NavAction.MOVE_FORWARD: "move_forward", NavAction.TURN_LEFT: "turn_left",
                NavAction.TURN_RIGHT: "turn_right"}
_RGB_UUID, _DEPTH_UUID = "rgb", "depth"
_POSE_ATOL = 1e-6


def habitat_available() -> bool:
    """Whether ``habitat_sim`` can be found (without importing it)."""
    return importlib.util.find_spec("habitat_sim") is not None


def require_habitat() -> Any:
    """Import and return ``habitat_sim``; ``ImportError`` with install instructions when it is missing."""
    try:
        import habitat_sim
    except ImportError as exc:
        raise ImportError(f"the habitat env backend needs habitat_sim: {HABITAT_INSTALL_HINT} ({exc})") from exc
    return habitat_sim


class HabitatNavEnv(BaseNavEnv):
    """VLN-CE navigation in Habitat-Sim scenes; episodes' ``scene_id`` is relative to ``scenes_dir``.

    ``scenes_dir`` defaults to ``$ALLDAY_HABITAT_SCENES`` or ``data/scene_datasets``. ``navmesh_agent_radius``
    and ``navmesh_agent_height`` must match the settings the scene's ``.navmesh`` was built with (habitat_sim
    recomputes the navmesh otherwise); the defaults are habitat's (0.1 m, 1.5 m), which VLN-CE uses for MP3D.
    ``allow_sliding`` (default True, as VLN-CE) lets forward moves slide along walls.
    """

    def __init__(self, config: NavEnvConfig | None = None, episodes: Sequence[Episode] | None = None,
                 ground_truth: dict[str, GroundTruth] | None = None, *,
                 scenes_dir: str | os.PathLike[str] | None = None, scene_dataset_config: str | None = None,
                 gpu_device_id: int = 0, allow_sliding: bool = True, navmesh_agent_radius: float = 0.1,
                 navmesh_agent_height: float = 1.5, oracle_goal_radius: float | None = None) -> None:
        self._hs = require_habitat()
        from habitat_sim.errors import GreedyFollowerError
        from habitat_sim.utils.common import quat_from_coeffs, quat_to_coeffs

        self._quat_from_coeffs, self._quat_to_coeffs = quat_from_coeffs, quat_to_coeffs
        self._follower_error = GreedyFollowerError
        super().__init__(config or NavEnvConfig(), episodes, ground_truth)
        self.scenes_dir = Path(scenes_dir if scenes_dir is not None
                               else os.environ.get(SCENES_ENV_VAR) or DEFAULT_SCENES_DIR)
        self.scene_dataset_config = scene_dataset_config
        self.gpu_device_id = int(gpu_device_id)
        self.allow_sliding = bool(allow_sliding)
        self.navmesh_agent_radius = float(navmesh_agent_radius)
        self.navmesh_agent_height = float(navmesh_agent_height)
        self.oracle_goal_radius = oracle_goal_radius
        self._sim: Any = None
        self._scene_path: str | None = None
        self._goal = np.zeros(3, dtype=np.float32)
        self._agent_pose: tuple[np.ndarray, float] | None = None  # last pose written to / read from the agent
        self._follower: Any = None
        self._noted_conditions: set[str] = set()
        if not math.isclose(self.config.agent_radius, self.navmesh_agent_radius):
            log.info("habitat backend: collisions use the navmesh agent radius %.2f m, not NavEnvConfig.agent_radius "
                     "%.2f m", self.navmesh_agent_radius, self.config.agent_radius)

    # ---- simulator -----------------------------------------------------------------------------
    @property
    def sim(self) -> Any:
        """The ``habitat_sim.Simulator`` (after the first reset)."""
        if self._sim is None:
            raise RuntimeError("no scene loaded; call reset() first")
        return self._sim

    def resolve_scene(self, scene_id: str) -> Path:
        """Absolute path of an episode's scene file (``scene_id`` absolute, or relative to ``scenes_dir``)."""
        p = Path(scene_id)
        path = p if p.is_absolute() else self.scenes_dir / p
        if not path.is_file():
            raise FileNotFoundError(f"scene {scene_id!r} not found at {path} (scenes dir {self.scenes_dir}; set "
                                    f"${SCENES_ENV_VAR} or pass scenes_dir=, see docs/habitat.md)")
        return path.resolve()

    def _camera_spec(self, uuid: str, sensor_type: Any) -> Any:
        hs, cfg = self._hs, self.config
        spec = hs.CameraSensorSpec()
        spec.uuid = uuid
        spec.sensor_type = sensor_type
        spec.sensor_subtype = hs.SensorSubType.PINHOLE
        spec.resolution = [cfg.height, cfg.width]
        spec.position = [0.0, cfg.camera_height, 0.0]
        spec.orientation = [0.0, 0.0, 0.0]
        if sensor_type == hs.SensorType.DEPTH:
            spec.channels = 1
        try:
            import magnum as mn

            spec.hfov = mn.Deg(float(cfg.hfov_deg))
        except ImportError:  # pragma: no cover - magnum ships with habitat_sim
            spec.hfov = float(cfg.hfov_deg)
        return spec

    def _sim_config(self, scene_path: str) -> Any:
        hs, cfg = self._hs, self.config
        sim_cfg = hs.SimulatorConfiguration()
        sim_cfg.scene_id = scene_path
        if self.scene_dataset_config:
            sim_cfg.scene_dataset_config_file = self.scene_dataset_config
        sim_cfg.gpu_device_id = self.gpu_device_id
        sim_cfg.enable_physics = False
        sim_cfg.allow_sliding = self.allow_sliding
        sim_cfg.random_seed = int(cfg.seed)
        agent_cfg = hs.agent.AgentConfiguration()
        agent_cfg.height = self.navmesh_agent_height
        agent_cfg.radius = self.navmesh_agent_radius
        # depth is always rendered: conditions such as scattering need it even when config.depth is False
        agent_cfg.sensor_specifications = [self._camera_spec(_RGB_UUID, hs.SensorType.COLOR),
                                           self._camera_spec(_DEPTH_UUID, hs.SensorType.DEPTH)]
        agent_cfg.action_space = {
            "move_forward": hs.agent.ActionSpec("move_forward", hs.agent.ActuationSpec(amount=cfg.forward_step)),
            "turn_left": hs.agent.ActionSpec("turn_left", hs.agent.ActuationSpec(amount=cfg.turn_angle_deg)),
            "turn_right": hs.agent.ActionSpec("turn_right", hs.agent.ActuationSpec(amount=cfg.turn_angle_deg)),
        }
        return hs.Configuration(sim_cfg, [agent_cfg])

    def _agent(self) -> Any:
        return self.sim.get_agent(0)

    # ---- hooks ---------------------------------------------------------------------------------
    def _load(self, episode: Episode, condition_name: str) -> None:
        scene_path = str(self.resolve_scene(episode.scene_id))
        if self._sim is None:
            log.info("habitat: loading %s", scene_path)
            self._sim = self._hs.Simulator(self._sim_config(scene_path))
        elif scene_path != self._scene_path:
            log.info("habitat: switching scene to %s", scene_path)
            self._sim.reconfigure(self._sim_config(scene_path))
        self._scene_path = scene_path
        if not self._sim.pathfinder.is_loaded:
            raise RuntimeError(f"scene {episode.scene_id}: no navmesh loaded or computable (expected "
                               f"{Path(scene_path).with_suffix('.navmesh')})")
        self._goal = np.asarray(episode.goals[0].position, dtype=np.float32)
        self._follower = None  # agents are recreated on reconfigure and the follower caches its goal
        self._agent_pose = None
        if condition_name != "normal" and condition_name not in self._noted_conditions:
            self._noted_conditions.add(condition_name)
            log.info("habitat: condition %r is a camera post-process only (no physical lighting in habitat)",
                     condition_name)

    def _sync_agent(self) -> None:
        """Write ``self._position``/``self._theta`` to the habitat agent if they differ from its last pose."""
        if self._agent_pose is not None:
            pos, theta = self._agent_pose
            if np.allclose(pos, self._position, rtol=0.0, atol=_POSE_ATOL) and abs(theta - self._theta) <= _POSE_ATOL:
                return
        state = self._hs.AgentState(
            position=np.asarray(self._position, dtype=np.float32),
            rotation=self._quat_from_coeffs(np.asarray(yaw_to_quat(self._theta), dtype=np.float64)))
        self._agent().set_state(state, reset_sensors=True)
        self._agent_pose = (np.array(self._position, dtype=np.float64), float(self._theta))

    def _read_agent_pose(self) -> None:
        state = self._agent().get_state()
        coeffs = self._quat_to_coeffs(state.rotation)  # [x, y, z, w]
        self._position = np.asarray(state.position, dtype=np.float64).reshape(3).copy()
        self._theta = quat_to_yaw([float(c) for c in coeffs])
        self._agent_pose = (self._position.copy(), self._theta)

    def _move(self, action: NavAction) -> bool:
        key = _ACTION_KEYS.get(action)
        if key is None:
            raise ValueError(f"{action!r} is not a motion action")
        self._sync_agent()
        before = self._position.copy()
        collided = bool(self._agent().act(key))
        self._read_agent_pose()
        if action == NavAction.MOVE_FORWARD and np.allclose(self._position, before, rtol=0.0, atol=1e-4):
            collided = True
        return collided

    def _render_frame(self) -> tuple[np.ndarray, np.ndarray | None]:
        self._sync_agent()
        obs = self.sim.get_sensor_observations()
        # habitat reuses its observation buffers between calls: copy
        rgb = np.array(np.asarray(obs[_RGB_UUID])[..., :3], dtype=np.uint8, copy=True)
        depth = np.asarray(obs[_DEPTH_UUID], dtype=np.float32)
        if depth.ndim == 3:
            depth = depth[..., 0]
        depth = np.clip(np.nan_to_num(depth, nan=0.0, posinf=self.config.max_depth, neginf=0.0),
                        0.0, self.config.max_depth).astype(np.float32, copy=True)
        return rgb, depth

    def geodesic_to_goal(self, position: np.ndarray) -> float:
        path = self._hs.ShortestPath()
        path.requested_start = np.asarray(position, dtype=np.float32)
        path.requested_end = self._goal
        if not self.sim.pathfinder.find_path(path):
            return math.inf
        d = float(path.geodesic_distance)
        return d if math.isfinite(d) else math.inf

    def is_navigable(self, position: np.ndarray) -> bool:
        return bool(self.sim.pathfinder.is_navigable(np.asarray(position, dtype=np.float32)))

    # ---- privileged ----------------------------------------------------------------------------
    def oracle_action(self) -> NavAction:
        """habitat_sim's greedy geodesic follower's next action toward the goal (privileged teacher)."""
        self._sync_agent()
        if self._follower is None:
            self._follower = self.sim.make_greedy_follower(
                0, self.oracle_goal_radius, stop_key=NavAction.STOP, forward_key=NavAction.MOVE_FORWARD,
                left_key=NavAction.TURN_LEFT, right_key=NavAction.TURN_RIGHT)
        try:
            action = self._follower.next_action_along(self._goal)
        except self._follower_error:
            log.warning("habitat: greedy follower found no action toward the goal; stopping")
            return NavAction.STOP
        return NavAction.STOP if action is None else NavAction(action)

    def close(self) -> None:
        if self._sim is not None:
            self._sim.close()
            self._sim = None
            self._scene_path = None
            self._follower = None
            self._agent_pose = None
