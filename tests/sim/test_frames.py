"""MuJoCo <-> Habitat frame conventions: positions, yaw quaternions and heading conversions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.core.frames import (
    habitat_to_mj,
    mj_to_habitat,
    phi_to_theta,
    quat_to_yaw,
    theta_to_phi,
    wrap_angle,
    yaw_to_quat,
)

ANGLES = np.linspace(-3 * math.pi, 3 * math.pi, 97)


def _habitat_forward(theta: float) -> np.ndarray:
    """Rotate Habitat's forward axis (0, 0, -1) by the quaternion for ``theta``."""
    qx, qy, qz, qw = yaw_to_quat(theta)
    u, v = np.array([qx, qy, qz]), np.array([0.0, 0.0, -1.0])
    return v + 2 * qw * np.cross(u, v) + 2 * np.cross(u, np.cross(u, v))


def test_position_round_trip() -> None:
    rng = np.random.default_rng(0)
    for x, y, z in rng.uniform(-20, 20, size=(50, 3)):
        h = mj_to_habitat(x, y, z)
        assert h == pytest.approx([x, z, -y])
        assert habitat_to_mj(h) == pytest.approx((x, y, z))
        assert mj_to_habitat(*habitat_to_mj([x, y, z])) == pytest.approx([x, y, z])
    assert mj_to_habitat(1.0, 2.0) == [1.0, 0.0, -2.0]  # floor: habitat y (up) = 0
    assert all(isinstance(v, float) for v in mj_to_habitat(np.float32(1), np.int64(2)))


def test_habitat_to_mj_rejects_bad_vectors() -> None:
    with pytest.raises(ValueError, match="3-vector"):
        habitat_to_mj([1.0, 2.0])


def test_yaw_quaternion_round_trip() -> None:
    for theta in ANGLES:
        q = yaw_to_quat(theta)
        assert np.linalg.norm(q) == pytest.approx(1.0)
        assert q[0] == 0.0 and q[2] == 0.0
        assert wrap_angle(quat_to_yaw(q) - theta) == pytest.approx(0.0, abs=1e-9)
        assert wrap_angle(quat_to_yaw([-v for v in q]) - theta) == pytest.approx(0.0, abs=1e-9)  # q and -q
        assert wrap_angle(quat_to_yaw([3 * v for v in q]) - theta) == pytest.approx(0.0, abs=1e-9)  # unnormalised
    assert yaw_to_quat(0.0) == [0.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError):
        quat_to_yaw([0.0, 0.0, 0.0, 0.0])


def test_quat_to_yaw_uses_the_forward_axis() -> None:
    for theta in ANGLES[::4]:
        f = _habitat_forward(theta)
        assert f[1] == pytest.approx(0.0, abs=1e-12)
        assert f[0] == pytest.approx(-math.sin(theta)) and f[2] == pytest.approx(-math.cos(theta))
    s = math.sqrt(0.5)
    assert quat_to_yaw([0.0, s, 0.0, s]) == pytest.approx(math.pi / 2)  # facing -x (left of -z)


def test_facing_plus_y_mj_is_habitat_yaw_zero() -> None:
    assert phi_to_theta(math.pi / 2) == pytest.approx(0.0)
    assert theta_to_phi(0.0) == pytest.approx(math.pi / 2)
    np.testing.assert_allclose(_habitat_forward(phi_to_theta(math.pi / 2)), [0.0, 0.0, -1.0], atol=1e-12)
    assert phi_to_theta(0.0) == pytest.approx(-math.pi / 2)  # +x_mj: turned right of -z


def test_heading_conversion_matches_position_conversion() -> None:
    for phi in ANGLES:
        assert wrap_angle(theta_to_phi(phi_to_theta(phi)) - phi) == pytest.approx(0.0, abs=1e-9)
        f_hab = _habitat_forward(phi_to_theta(phi))
        fx, fy, fz = habitat_to_mj(f_hab)
        assert (fx, fy, fz) == pytest.approx((math.cos(phi), math.sin(phi), 0.0), abs=1e-9)


def test_wrap_angle_range() -> None:
    for a in np.linspace(-20, 20, 401):
        w = wrap_angle(a)
        assert -math.pi < w <= math.pi
        assert math.cos(w) == pytest.approx(math.cos(a)) and math.sin(w) == pytest.approx(math.sin(a), abs=1e-9)
    assert wrap_angle(math.pi) == pytest.approx(math.pi)
    assert wrap_angle(-math.pi) == pytest.approx(math.pi)
    assert wrap_angle(3 * math.pi) == pytest.approx(math.pi)
    assert wrap_angle(0.0) == 0.0
    assert wrap_angle(2 * math.pi + 0.1) == pytest.approx(0.1)
    assert wrap_angle(-0.1) == pytest.approx(-0.1)
