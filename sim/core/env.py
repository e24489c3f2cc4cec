"""The navigation env protocol (gymnasium.Env) shared by every backend, its config and the backend registry.

A backend implements four hooks (load a scene, move, render, geodesic); episode bookkeeping,
conditions, observations and the VLN-CE metrics live here once.
"""

from __future__ import annotations

import importlib
import logging
import math
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agents.core.config import check_ranges, config_from_dict
from agents.core.registry import Registry
from agents.core.types import MAX_EPISODE_STEPS, NavAction, Observation, Pose
from sim import metrics
from sim.core.episodes import Episode, GroundTruth
from sim.core.frames import quat_to_yaw, wrap_angle

log = logging.getLogger(__name__)


@dataclass
class NavEnvConfig:
    """Sensor, motion and episode settings. ``condition=None`` uses each episode's own (or ``normal``)."""

    width: int = 224
    height: int = 224
    hfov_deg: float = 79.0
    camera_height: float = 1.25
    forward_step: float = 0.25
    turn_angle_deg: float = 15.0
    agent_radius: float = 0.18
    max_steps: int = MAX_EPISODE_STEPS
    success_distance: float = 3.0
    condition: str | None = None
    condition_params: dict[str, Any] = field(default_factory=dict)
    quality: str = "default"
    depth: bool = True
    max_depth: float = 10.0
    physical_conditions: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("width", "height"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 16 <= v <= 4096:
                raise ValueError(f"{name} must be an int in 16..4096, got {v!r}")
        checks = {"hfov_deg": (1.0, 179.0), "camera_height": (0.05, 3.0), "forward_step": (0.01, 2.0),
                  "turn_angle_deg": (0.1, 180.0), "agent_radius": (0.0, 1.0), "success_distance": (0.01, 100.0),
                  "max_depth": (0.1, 1000.0)}
        check_ranges(self, checks)
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"max_steps must be a positive int, got {self.max_steps!r}")
        if self.condition is not None:
            from sim.nav.conditions import available_conditions

            if self.condition not in available_conditions():
                raise ValueError(f"unknown condition {self.condition!r}; known: {available_conditions()}")
        from sim.nav.mjcf import get_quality

        get_quality(self.quality)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "NavEnvConfig":
        return config_from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


ENV_BACKENDS: Registry[str] = Registry("env backend")
ENV_BACKENDS.register("mujoco")("sim.nav.env:MujocoNavEnv")
ENV_BACKENDS.register("habitat")("sim.habitat.env:HabitatNavEnv")


def make_env(config: NavEnvConfig | None = None, episodes: Sequence[Episode] | None = None,
             ground_truth: dict[str, GroundTruth] | None = None, backend: str = "mujoco") -> "BaseNavEnv":
    """Build a navigation env by backend name (imported lazily: habitat_sim is optional)."""
    module, _, cls = ENV_BACKENDS.get(backend).partition(":")
    env_cls = getattr(importlib.import_module(module), cls)
    return env_cls(config or NavEnvConfig(), episodes=episodes, ground_truth=ground_truth)


class InstructionText(spaces.Text):
    """Any str up to ``max_length`` characters (instructions have spaces, punctuation and non-Latin scripts)."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class BaseNavEnv(gym.Env):
    """VLN-CE style env: Discrete(4) actions, RGB-D + GPS/compass + instruction observations."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, config: NavEnvConfig, episodes: Sequence[Episode] | None = None,
                 ground_truth: dict[str, GroundTruth] | None = None) -> None:
        super().__init__()
        self.config = config
        self.episodes: list[Episode] = list(episodes or [])
        self.ground_truth = dict(ground_truth or {})
        h, w = config.height, config.width
        self.action_space = spaces.Discrete(4)
        obs_spaces = {
            "rgb": spaces.Box(0, 255, (h, w, 3), np.uint8),
            "gps": spaces.Box(-np.inf, np.inf, (2,), np.float32),
            "compass": spaces.Box(-np.pi, np.pi, (1,), np.float32),
            "instruction": InstructionText(max_length=1 << 16, min_length=1),
        }
        if config.depth:
            obs_spaces["depth"] = spaces.Box(0.0, config.max_depth, (h, w), np.float32)
        self.observation_space = spaces.Dict(obs_spaces)
        self._next_index = 0
        self._episode: Episode | None = None
        self._condition = None
        self._position = np.zeros(3)
        self._theta = 0.0
        self._trajectory: list[np.ndarray] = []
        self._distances: list[float] = []
        self._steps = 0
        self._done = True
        self._stopped = False
        self._seed = config.seed
        self.render_mode = "rgb_array"
        self._last_rgb: np.ndarray | None = None

    # ---- backend hooks -------------------------------------------------------------------------
    @abstractmethod
    def _load(self, episode: Episode, condition_name: str) -> None:
        """Load the episode's scene with the condition's physical lighting."""

    @abstractmethod
    def _move(self, action: NavAction) -> bool:
        """Apply a motion action to ``self._position``/``self._theta``; True if a collision blocked it."""

    @abstractmethod
    def _render_frame(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Raw RGB (uint8) and metric depth (float32) at the current pose."""

    @abstractmethod
    def geodesic_to_goal(self, position: np.ndarray) -> float:
        """Geodesic distance (m) from a Habitat-frame position to the current episode's goal."""

    @abstractmethod
    def is_navigable(self, position: np.ndarray) -> bool:
        """Whether a Habitat-frame position is free space for the agent."""

    # ---- public API ----------------------------------------------------------------------------
    @property
    def episode(self) -> Episode:
        if self._episode is None:
            raise RuntimeError("no episode loaded; call reset() first")
        return self._episode

    @property
    def pose(self) -> Pose:
        return Pose(tuple(float(v) for v in self._position), float(self._theta))

    @property
    def condition_name(self) -> str:
        return self._condition.name if self._condition is not None else "normal"

    @property
    def trajectory(self) -> list[np.ndarray]:
        return list(self._trajectory)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._done = True  # a failed reset leaves no episode running
        if seed is not None:
            self._seed = int(seed)
        options = dict(options or {})
        episode = options.pop("episode", None)
        if episode is None:
            if not self.episodes:
                raise ValueError("reset() needs options={'episode': Episode} or episodes given to the env")
            idx = options.pop("episode_index", self._next_index)
            if not isinstance(idx, int) or not 0 <= idx < len(self.episodes):
                raise ValueError(f"episode_index {idx!r} out of range 0..{len(self.episodes) - 1}")
            episode = self.episodes[idx]
            self._next_index = (idx + 1) % len(self.episodes)
        if not isinstance(episode, Episode):
            raise TypeError(f"options['episode'] must be an Episode, got {type(episode).__name__}")
        cond = options.pop("condition", None) or self.config.condition or episode.info.get("condition", "normal")
        if options:
            raise ValueError(f"unknown reset options {sorted(options)}")
        from sim.nav.conditions import make_condition

        params = self.config.condition_params if cond == self.config.condition else {}
        self._condition = make_condition(cond, **params)
        self._episode = episode
        self._load(episode, cond)
        start = np.asarray(episode.start_position, dtype=np.float64)
        if not self.is_navigable(start):
            raise ValueError(f"episode {episode.episode_id}: start position {episode.start_position} is inside an "
                             f"obstacle or outside the navigable space of {episode.scene_id}")
        self._position = start
        self._theta = quat_to_yaw(episode.start_rotation)
        self._start_position, self._start_theta = start.copy(), self._theta
        self._trajectory = [start.copy()]
        self._distances = [self.geodesic_to_goal(start)]
        if not math.isfinite(self._distances[0]):
            raise ValueError(f"episode {episode.episode_id}: the goal is unreachable from the start")
        self._steps, self._done, self._stopped = 0, False, False
        obs = self._observe()
        return obs, self._info(collided=False)

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        a = NavAction.parse(action)
        if self._done:
            raise RuntimeError("the episode is over; call reset() before step()")
        self._steps += 1
        prev = self._distances[-1]
        collided = False
        if a == NavAction.STOP:
            self._stopped = True
        else:
            collided = self._move(a)
            self._trajectory.append(self._position.copy())
            self._distances.append(self.geodesic_to_goal(self._position))
        terminated = self._stopped
        truncated = not terminated and self._steps >= self.config.max_steps
        self._done = terminated or truncated
        d = self._distances[-1]
        reward = float(prev - d) - 0.01
        if terminated and d < self.config.success_distance:
            reward += 2.5
        obs = self._observe()
        info = self._info(collided)
        if self._done:
            info["metrics"] = self.episode_metrics()
        return obs, reward, terminated, truncated, info

    def episode_metrics(self) -> dict[str, float]:
        """VLN-CE metrics of the trajectory so far (final once the episode is done)."""
        ep = self.episode
        gt = self.ground_truth.get(str(ep.episode_id))
        ref = gt.locations if gt is not None else ep.reference_path
        return metrics.episode_metrics(np.asarray(self._trajectory), np.asarray(self._distances), self._stopped,
                                       ep.geodesic_distance, ref, self._steps, self.config.success_distance)

    def render(self) -> np.ndarray | None:
        return self._last_rgb

    def to_observation(self, obs: dict[str, Any]) -> Observation:
        """The shared ``agents.core`` Observation for an obs dict of this env."""
        return Observation(rgb=obs["rgb"], depth=obs.get("depth"), pose=self.pose, instruction=obs["instruction"],
                           gps=obs["gps"], compass=float(obs["compass"][0]), step=self._steps)

    # ---- internals -----------------------------------------------------------------------------
    def _observe(self) -> dict[str, Any]:
        from sim.nav.conditions import condition_rng

        rgb, depth = self._render_frame()
        rng = condition_rng(self._seed, str(self.episode.episode_id), self._steps)
        rgb = self._condition.apply(rgb, depth, rng) if self._condition is not None else rgb
        self._last_rgb = rgb
        # Habitat's EpisodicGPSSensor: displacement in the start frame as [-z, x] (forward, right)
        rel = self._position - self._start_position
        c, s = math.cos(-self._start_theta), math.sin(-self._start_theta)
        x, z = c * rel[0] + s * rel[2], -s * rel[0] + c * rel[2]
        gps = np.array([-z, x], dtype=np.float32)
        obs = {"rgb": rgb, "gps": gps, "compass": np.array([wrap_angle(self._theta - self._start_theta)], np.float32),
               "instruction": self.episode.instruction_text}
        if self.config.depth and depth is not None:
            obs["depth"] = depth
        return obs

    def _info(self, collided: bool) -> dict[str, Any]:
        return {"episode_id": self.episode.episode_id, "scene_id": self.episode.scene_id,
                "condition": self.condition_name, "distance_to_goal": self._distances[-1],
                "position": self._position.tolist(), "heading": self._theta, "collided": collided,
                "steps": self._steps}
