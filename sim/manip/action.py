"""The manipulation action: one end-effector displacement (metres) plus a gripper command, with a phase label."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

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


#: the kinds of fault :func:`sanitize` repairs; a consumer keys its log-once or counters on these, not on the text
FAULT_KINDS: tuple[str, ...] = ("delta-nan", "delta-clamp", "gripper-nan", "gripper-clamp")


class Fault(NamedTuple):
    """One repaired fault of a command: ``kind`` (one of :data:`FAULT_KINDS`) and a human-readable ``detail``."""

    kind: str
    detail: str


class Sanitized(NamedTuple):
    """A command made safe to execute, with the faults that were repaired (empty when it was fine as sent)."""

    delta: np.ndarray
    gripper: float
    faults: tuple[Fault, ...]

    @property
    def kinds(self) -> tuple[str, ...]:
        """The fault kinds, in the order they were found."""
        return tuple(f.kind for f in self.faults)

    @property
    def reason(self) -> str:
        """All details joined with "; " ("" when nothing was changed)."""
        return "; ".join(f.detail for f in self.faults)


def sanitize_gripper(gripper: float) -> tuple[float, Fault | None]:
    """``gripper`` clamped to [-1, 1]; non-finite becomes 0 (hold the current opening). The fault, or None."""
    g = float(gripper)
    if not math.isfinite(g):
        return GRIPPER_HOLD, Fault("gripper-nan", f"non-finite gripper {g} -> 0 (hold the current opening)")
    if abs(g) > 1.0:
        return max(-1.0, min(1.0, g)), Fault("gripper-clamp", f"gripper {g:.3g} clamped to [-1, 1]")
    return g, None


def sanitize(delta: Sequence[float], gripper: float, max_delta: float = MAX_DELTA_M) -> Sanitized:
    """Clamp a command to ``|d_i| <= max_delta`` and ``gripper`` to [-1, 1]; non-finite values become 0.

    Unpacks as ``delta, gripper, faults``; ``.reason`` joins the faults' details ("" when nothing changed).
    """
    faults = []
    d = np.asarray(delta, dtype=np.float64).ravel()
    if d.shape != (3,):
        raise ValueError(f"delta must have 3 components, got shape {d.shape}")
    if not np.isfinite(d).all():
        faults.append(Fault("delta-nan", f"non-finite delta {d.tolist()} -> zero"))
        d = np.zeros(3)
    if np.abs(d).max() > max_delta:
        faults.append(Fault("delta-clamp", f"delta {np.round(d, 4).tolist()} clamped to +-{max_delta} m"))
        d = np.clip(d, -max_delta, max_delta)
    g, fault = sanitize_gripper(gripper)
    if fault is not None:
        faults.append(fault)
    return Sanitized(d, g, tuple(faults))
