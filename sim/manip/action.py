"""The manipulation action: one end-effector displacement (metres) plus a gripper command, with a phase label."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: default largest displacement per control step, per axis (m); also the OSC_POSE controller's +-1 output scale
MAX_DELTA_M: float = 0.05
GRIPPER_OPEN: float = -1.0
GRIPPER_CLOSE: float = 1.0
#: the Panda gripper moves by sign(command) per step, so 0 keeps the current opening
GRIPPER_HOLD: float = 0.0


@dataclass(frozen=True)
class EEDeltaAction:
    """``delta``: [dx, dy, dz] in metres (robot base frame); ``gripper``: -1 open .. +1 close (0 holds); ``phase``."""

    delta: tuple[float, float, float]
    gripper: float
    phase: str = ""

    def __post_init__(self) -> None:
        d = tuple(float(v) for v in self.delta)
        if len(d) != 3:
            raise ValueError(f"delta must have 3 components [dx, dy, dz], got {self.delta!r}")
        object.__setattr__(self, "delta", d)
        object.__setattr__(self, "gripper", float(self.gripper))

    def as_array(self) -> np.ndarray:
        """``[dx, dy, dz, gripper]`` as float32 (the per-step action language of VLM2VLA-style policies)."""
        return np.asarray([*self.delta, self.gripper], dtype=np.float32)

    @classmethod
    def parse(cls, value: Any, phase: str = "") -> "EEDeltaAction":
        """From an EEDeltaAction, a mapping (``delta``/``gripper``/``phase``) or a sequence ``[dx, dy, dz, g]``."""
        if isinstance(value, EEDeltaAction):
            return value
        if isinstance(value, Mapping):
            try:
                return cls(tuple(value["delta"]), value["gripper"], str(value.get("phase", phase)))
            except KeyError as e:
                raise ValueError(f"action mapping needs 'delta' and 'gripper', got keys {sorted(value)}") from e
        if hasattr(value, "delta") and hasattr(value, "gripper"):
            return cls(tuple(value.delta), value.gripper, str(getattr(value, "phase", phase)))
        if isinstance(value, (Sequence, np.ndarray)):
            arr = np.asarray(value, dtype=np.float64).ravel()
            if arr.shape != (4,):
                raise ValueError(f"action must be [dx, dy, dz, gripper], got shape {arr.shape}")
            return cls(tuple(arr[:3]), arr[3], phase)
        raise ValueError(f"cannot read an end-effector action from {type(value).__name__}")


def sanitize(delta: Sequence[float], gripper: float, max_delta: float = MAX_DELTA_M) -> tuple[np.ndarray, float, str]:
    """Clamp a command to ``|d_i| <= max_delta`` and ``gripper`` to [-1, 1]; non-finite values become 0.

    Returns ``(delta, gripper, reason)`` where ``reason`` is "" when nothing was changed.
    """
    reasons = []
    d = np.asarray(delta, dtype=np.float64).ravel()
    if d.shape != (3,):
        raise ValueError(f"delta must have 3 components, got shape {d.shape}")
    if not np.isfinite(d).all():
        reasons.append("non-finite delta -> zero")
        d = np.zeros(3)
    if np.abs(d).max() > max_delta:
        reasons.append(f"delta {np.round(d, 4).tolist()} clamped to +-{max_delta} m")
        d = np.clip(d, -max_delta, max_delta)
    g = float(gripper)
    if not math.isfinite(g):
        reasons.append("non-finite gripper -> 0 (hold the current opening)")
        g = GRIPPER_HOLD
    elif abs(g) > 1.0:
        reasons.append(f"gripper {g:.3g} clamped to [-1, 1]")
        g = max(-1.0, min(1.0, g))
    return d, g, "; ".join(reasons)
