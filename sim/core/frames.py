"""Frame conventions: MuJoCo (x, y floor, z up) <-> Habitat/VLN-CE world (x, y up, z = -y_mj).

Headings: ``phi`` is the MuJoCo yaw (0 faces +x, CCW positive); ``theta`` is the Habitat yaw about +y
(0 faces -z). Facing +y_mj is facing -z_hab, so theta = phi - pi/2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mj_to_habitat(x: float, y: float, z: float = 0.0) -> list[float]:
    return [float(x), float(z), float(-y)]


def habitat_to_mj(p: Sequence[float]) -> tuple[float, float, float]:
    if len(p) != 3:
        raise ValueError(f"expected a 3-vector [x, y, z], got {list(p)!r}")
    return float(p[0]), float(-p[2]), float(p[1])


def wrap_angle(a: float) -> float:
    """Wrap to (-pi, pi]."""
    a = math.fmod(a + math.pi, 2 * math.pi)
    if a <= 0:
        a += 2 * math.pi
    return a - math.pi


def phi_to_theta(phi: float) -> float:
    return wrap_angle(phi - math.pi / 2)


def theta_to_phi(theta: float) -> float:
    return wrap_angle(theta + math.pi / 2)


def yaw_to_quat(theta: float) -> list[float]:
    """Habitat yaw -> unit quaternion [qx, qy, qz, qw] (scalar last) about +y."""
    return [0.0, math.sin(theta / 2), 0.0, math.cos(theta / 2)]


def quat_to_yaw(q: Sequence[float]) -> float:
    """Habitat yaw of a quaternion [qx, qy, qz, qw]: the heading of its rotated forward (-z) axis."""
    qx, qy, qz, qw = (float(v) for v in q)
    n = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    if not np.isfinite(n) or n < 1e-9:
        raise ValueError(f"invalid rotation quaternion {list(q)!r}")
    qx, qy, qz, qw = qx / n, qy / n, qz / n, qw / n
    # third column of the rotation matrix, negated = rotated (0, 0, -1)
    fx = -(2 * (qx * qz + qw * qy))
    fz = -(1 - 2 * (qx * qx + qy * qy))
    return math.atan2(-fx, -fz)
