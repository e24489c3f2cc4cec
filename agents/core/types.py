"""Observation and action types shared by sim, agents and the ROS conversions.

Units are SI (metres, radians, seconds). Positions are in the Habitat/VLN-CE world frame
(x right, y up, z backwards), so episode files, metrics and agents agree on one convention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

#: VLN-CE R2R action set and step sizes.
FORWARD_STEP_M: float = 0.25
TURN_ANGLE_DEG: float = 15.0
SUCCESS_DISTANCE_M: float = 3.0
MAX_EPISODE_STEPS: int = 500


class NavAction(IntEnum):
    """Discrete VLN-CE actions (R2R ids)."""

    STOP = 0
    MOVE_FORWARD = 1
    TURN_LEFT = 2
    TURN_RIGHT = 3

    @classmethod
    def parse(cls, value: Any) -> "NavAction":
        """Turn an int/str/NavAction into a NavAction, with a clear error for anything else."""
        if isinstance(value, NavAction):
            return value
        if isinstance(value, str):
            key = value.strip().upper()
            if key in cls.__members__:
                return cls[key]
            raise ValueError(f"unknown action name {value!r}; expected one of {list(cls.__members__)}")
        if isinstance(value, (bool, np.bool_)):
            raise ValueError(f"action must be an int in 0..3, got bool {value!r}")
        if isinstance(value, (int, np.integer)):
            iv = int(value)
            if 0 <= iv <= 3:
                return cls(iv)
        raise ValueError(f"action out of range: {value!r}; expected 0..3 (STOP, MOVE_FORWARD, TURN_LEFT, TURN_RIGHT)")


@dataclass(frozen=True)
class Pose:
    """Agent pose in the Habitat world frame: position [x, y, z] (y up) and heading (yaw, rad).

    ``heading`` is the Habitat yaw about +y: 0 faces -z, positive turns left (counter-clockwise
    seen from above).
    """

    position: tuple[float, float, float]
    heading: float

    def as_array(self) -> np.ndarray:
        return np.asarray(self.position, dtype=np.float64)


@dataclass
class Observation:
    """One egocentric observation.

    rgb: HxWx3 uint8; depth: HxW float32 metres (or None); pose: world pose;
    gps: displacement from the episode start in the start frame as Habitat's [-z, x] (forward, right; m);
    compass: yaw relative to the start heading (rad); instruction: the episode's English instruction.
    """

    rgb: np.ndarray
    depth: np.ndarray | None
    pose: Pose
    instruction: str = ""
    gps: np.ndarray = field(default_factory=lambda: np.zeros(2, dtype=np.float32))
    compass: float = 0.0
    step: int = 0
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.rgb, np.ndarray) or self.rgb.ndim != 3 or self.rgb.shape[2] != 3:
            raise ValueError(f"rgb must be an HxWx3 array, got {getattr(self.rgb, 'shape', type(self.rgb))}")
        if self.rgb.dtype != np.uint8:
            raise ValueError(f"rgb must be uint8, got {self.rgb.dtype}")
        if self.depth is not None:
            if self.depth.shape != self.rgb.shape[:2]:
                raise ValueError(f"depth shape {self.depth.shape} does not match rgb {self.rgb.shape[:2]}")
            if self.depth.dtype != np.float32:
                raise ValueError(f"depth must be float32 metres, got {self.depth.dtype}")
