"""Conversions between allday types (numpy images, Pose, NavAction) and ROS 2 messages.

Images follow the allday convention on the Python side: colour is HxWx3 uint8 RGB, depth is HxW float32
metres. On the wire ``rgb8`` / ``32FC1`` are the native encodings; ``bgr8`` and ``16UC1`` (millimetres, 0 =
no reading, as in REP 118) are converted since real cameras publish them.

Frames: :class:`agents.core.types.Pose` is in the Habitat frame (x right, y up, z backwards; heading = yaw
about +y, 0 faces -z, positive turns left). ROS uses REP 103 (x forward, y left, z up). The one mapping used
everywhere in allday is::

    ros_x = -z_hab    ros_y = -x_hab    ros_z = y_hab    ros_yaw = heading

so a Habitat heading of 0 (facing -z) faces ROS +x, and a left (counter-clockwise) turn increases both yaws.
It is a proper rotation (determinant +1), so it maps right-handed frames to right-handed frames.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Image

from agents.core.types import FORWARD_STEP_M, TURN_ANGLE_DEG, NavAction, Pose

__all__ = [
    "ENCODINGS",
    "CmdVelIntegrator",
    "MAX_INSTRUCTION_CHARS",
    "ImageFormatError",
    "action_to_twist",
    "image_to_msg",
    "instruction_problem",
    "msg_to_image",
    "odometry_to_pose",
    "pose_to_odometry",
    "yaw_to_quaternion",
    "quaternion_to_yaw",
]


class ImageFormatError(ValueError):
    """An image array or ``sensor_msgs/Image`` does not match its declared encoding, shape or size."""


#: wire encoding -> (wire dtype, channels, encoding of the array msg_to_image returns)
ENCODINGS: dict[str, tuple[np.dtype, int, str]] = {
    "rgb8": (np.dtype(np.uint8), 3, "rgb8"),
    "bgr8": (np.dtype(np.uint8), 3, "rgb8"),
    "mono8": (np.dtype(np.uint8), 1, "mono8"),
    "32FC1": (np.dtype(np.float32), 1, "32FC1"),
    "16UC1": (np.dtype(np.uint16), 1, "32FC1"),
}
_MM_PER_M = 1000.0


MAX_INSTRUCTION_CHARS = 2000


def instruction_problem(text: str, limit: int = MAX_INSTRUCTION_CHARS) -> str | None:
    """Why an instruction from the wire is refused, or None: empty after stripping, or over ``limit`` characters
    (counted after stripping, so padding neither hides nor causes a refusal)."""
    stripped = text.strip()
    if not stripped:
        return "empty instruction"
    if len(stripped) > limit:
        return f"instruction has {len(stripped)} characters (limit {limit})"
    return None


def stamp_to_ns(stamp: Any) -> int:
    """Nanoseconds of a ``builtin_interfaces/Time`` (header stamps compare exactly this way)."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def _stamp_msg(stamp: Any) -> Time:
    """Accept None (zero), a ``builtin_interfaces/Time`` or anything with ``to_msg()`` (``rclpy.time.Time``)."""
    if stamp is None:
        return Time()
    if isinstance(stamp, Time):
        return stamp
    if hasattr(stamp, "to_msg"):
        return stamp.to_msg()
    raise TypeError(f"stamp must be None, builtin_interfaces.msg.Time or rclpy.time.Time, got {type(stamp).__name__}")


def _check_array(arr: Any, encoding: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise ImageFormatError(f"{encoding}: expected a numpy array, got {type(arr).__name__}")
    if encoding in ("rgb8", "bgr8"):
        if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
            raise ImageFormatError(f"{encoding}: expected an HxWx3 uint8 RGB array, got shape {arr.shape} {arr.dtype}")
    elif encoding == "mono8":
        if arr.ndim != 2 or arr.dtype != np.uint8:
            raise ImageFormatError(f"mono8: expected an HxW uint8 array, got shape {arr.shape} {arr.dtype}")
    elif encoding == "32FC1":
        if arr.ndim != 2 or arr.dtype != np.float32:
            raise ImageFormatError(f"32FC1: expected an HxW float32 array (metres), got shape {arr.shape} {arr.dtype}")
    elif encoding == "16UC1":
        if arr.ndim != 2 or arr.dtype not in (np.float32, np.uint16):
            raise ImageFormatError(
                f"16UC1: expected an HxW float32 array (metres) or uint16 array (mm), got shape {arr.shape} {arr.dtype}"
            )
    else:
        raise ImageFormatError(f"unsupported encoding {encoding!r}; expected one of {sorted(ENCODINGS)}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ImageFormatError(f"{encoding}: empty image of shape {arr.shape}")
    return arr


def image_to_msg(
    array: np.ndarray, encoding: str, stamp: Any = None, frame_id: str = "camera_color_optical_frame"
) -> Image:
    """Pack an allday image array into a ``sensor_msgs/Image``.

    ``rgb8``: HxWx3 uint8; ``mono8``: HxW uint8; ``32FC1``: HxW float32 metres. ``bgr8`` takes an RGB array and
    swaps channels; ``16UC1`` takes float32 metres (rounded to mm; NaN, inf, <= 0 become 0 = no reading; clipped to
    65535 mm) or uint16 mm as-is. Raises :class:`ImageFormatError` on a dtype/shape that does not fit ``encoding``.
    """
    arr = _check_array(array, encoding)
    if encoding == "bgr8":
        arr = arr[..., ::-1]
    elif encoding == "16UC1" and arr.dtype == np.float32:
        mm = np.nan_to_num(arr.astype(np.float64) * _MM_PER_M, nan=0.0, posinf=0.0, neginf=0.0)
        arr = np.clip(np.rint(mm), 0, np.iinfo(np.uint16).max).astype(np.uint16)
    arr = np.ascontiguousarray(arr)
    msg = Image()
    msg.header.stamp = _stamp_msg(stamp)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(arr.shape[0]), int(arr.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = int(arr.strides[0])
    msg.data = arr.tobytes()  # fast path: bytes -> array('B') in C; arr.ravel() is ~1000x slower
    return msg


def msg_to_image(
    msg: Any, expected_encoding: str | None = None, expected_shape: Sequence[int] | None = None
) -> np.ndarray:
    """Unpack a ``sensor_msgs/Image`` (rclpy or rosbags message) into an allday array.

    ``rgb8``/``mono8``/``32FC1`` are copy-free views of ``msg.data`` (copy before keeping or editing them);
    ``bgr8`` is returned as RGB and ``16UC1`` as float32 metres (new arrays). Row padding (``step`` larger than
    ``width * channels * itemsize``) is allowed. ``expected_encoding`` is the encoding of the *returned* array
    (``"rgb8"`` accepts rgb8 and bgr8 messages, ``"32FC1"`` accepts 32FC1 and 16UC1); ``expected_shape`` is the
    returned array's shape. Every inconsistency raises :class:`ImageFormatError` naming the problem.
    """
    enc = str(msg.encoding)
    if enc not in ENCODINGS:
        raise ImageFormatError(f"unsupported image encoding {enc!r}; expected one of {sorted(ENCODINGS)}")
    wire_dtype, channels, out_encoding = ENCODINGS[enc]
    if expected_encoding is not None and out_encoding != expected_encoding:
        raise ImageFormatError(
            f"encoding mismatch: message has {enc!r} (decodes to {out_encoding!r}), expected {expected_encoding!r}"
        )
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise ImageFormatError(f"{enc}: empty image ({height}x{width})")
    row_bytes = width * channels * wire_dtype.itemsize
    if step < row_bytes:
        raise ImageFormatError(
            f"{enc}: step {step} too small for width {width} (needs >= {row_bytes} = {width}x{channels}x"
            f"{wire_dtype.itemsize} bytes)"
        )
    data = msg.data
    nbytes = len(data) * getattr(data, "itemsize", 1)
    if nbytes != step * height:
        raise ImageFormatError(f"{enc}: data length {nbytes} != step*height = {step}*{height} = {step * height}")
    out_shape = (height, width, channels) if channels > 1 else (height, width)
    if expected_shape is not None and tuple(expected_shape) != out_shape:
        raise ImageFormatError(f"{enc}: size mismatch, image is {out_shape}, expected {tuple(expected_shape)}")
    dtype = wire_dtype.newbyteorder(">") if msg.is_bigendian and wire_dtype.itemsize > 1 else wire_dtype
    buf = np.frombuffer(data, dtype=np.uint8)
    strides = (step, channels * dtype.itemsize, dtype.itemsize) if channels > 1 else (step, dtype.itemsize)
    arr = np.ndarray(out_shape, dtype=dtype, buffer=buf, strides=strides)  # copy-free, honours row padding
    if dtype.byteorder == ">":
        arr = arr.astype(wire_dtype)
    if enc == "bgr8":
        return np.ascontiguousarray(arr[..., ::-1])
    if enc == "16UC1":
        return (arr.astype(np.float32) / np.float32(_MM_PER_M)).astype(np.float32)
    return arr


# --------------------------------------------------------------------------------------------- poses / odometry


def yaw_to_quaternion(yaw: float) -> tuple[float, float, float, float]:
    """Quaternion (x, y, z, w) of a rotation by ``yaw`` about +z."""
    return 0.0, 0.0, math.sin(yaw / 2.0), math.cos(yaw / 2.0)


def quaternion_to_yaw(x: float, y: float, z: float, w: float) -> float:
    """Yaw about +z in (-pi, pi] (roll/pitch are dropped); scale-invariant, the all-zero quaternion gives 0."""
    return math.atan2(2.0 * (w * z + x * y), w * w + x * x - y * y - z * z)


def pose_to_odometry(
    pose: Pose, stamp: Any, frame_id: str = "odom", child_frame_id: str = "base_link"
) -> Odometry:
    """Habitat-frame :class:`Pose` -> ``nav_msgs/Odometry`` in REP 103 (see the module docstring for the mapping).

    Twist and covariances are left at zero.
    """
    x, y, z = (float(v) for v in pose.position)
    heading = float(pose.heading)
    if not all(math.isfinite(v) for v in (x, y, z, heading)):
        raise ValueError(f"pose must be finite, got position={pose.position} heading={pose.heading}")
    msg = Odometry()
    msg.header.stamp = _stamp_msg(stamp)
    msg.header.frame_id = frame_id
    msg.child_frame_id = child_frame_id
    p = msg.pose.pose.position
    p.x, p.y, p.z = -z, -x, y
    q = msg.pose.pose.orientation
    q.x, q.y, q.z, q.w = yaw_to_quaternion(heading)
    return msg


def odometry_to_pose(msg: Odometry) -> Pose:
    """``nav_msgs/Odometry`` (REP 103) -> Habitat-frame :class:`Pose`; heading is wrapped to (-pi, pi]."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    vals = (p.x, p.y, p.z, q.x, q.y, q.z, q.w)
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"odometry pose must be finite, got position=({p.x}, {p.y}, {p.z}) "
                         f"orientation=({q.x}, {q.y}, {q.z}, {q.w})")
    # inverse of (ros_x, ros_y, ros_z) = (-z_hab, -x_hab, y_hab); `0.0 - v` avoids returning -0.0
    return Pose(position=(0.0 - p.y, float(p.z), 0.0 - p.x), heading=quaternion_to_yaw(q.x, q.y, q.z, q.w))


# ----------------------------------------------------------------------------------------------- actions / twist


def _positive(name: str, value: float) -> float:
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def action_to_twist(
    action: NavAction | int | str,
    forward_step: float = FORWARD_STEP_M,
    turn_angle_deg: float = TURN_ANGLE_DEG,
    period_s: float = 1.0,
) -> Twist:
    """The constant velocity that performs one discrete action in ``period_s`` seconds.

    MOVE_FORWARD -> ``linear.x = forward_step / period_s``; TURN_LEFT -> ``angular.z = +radians(turn) / period_s``;
    TURN_RIGHT -> the negative; STOP -> zero.
    """
    act = NavAction.parse(action)
    step, turn, period = (_positive(n, v) for n, v in
                          (("forward_step", forward_step), ("turn_angle_deg", turn_angle_deg), ("period_s", period_s)))
    twist = Twist()
    if act == NavAction.MOVE_FORWARD:
        twist.linear.x = step / period
    elif act == NavAction.TURN_LEFT:
        twist.angular.z = math.radians(turn) / period
    elif act == NavAction.TURN_RIGHT:
        twist.angular.z = -math.radians(turn) / period
    return twist


class CmdVelIntegrator:
    """Integrates ``cmd_vel`` into discrete VLN-CE actions (for driving the simulator from a ROS teleop/planner).

    One MOVE_FORWARD per ``forward_step`` metres of forward travel, one TURN_LEFT / TURN_RIGHT per
    ``turn_angle_deg`` of yaw; remainders carry over between calls. The discrete action set cannot express
    backward (negative ``linear.x``), lateral (``linear.y``), vertical or roll/pitch motion: those components are
    ignored and named in :attr:`notes` (the notes of the latest :meth:`add`). Within one call forward actions come
    before turns.
    """

    _EPS = 1e-9  # relative slack so that N * step travelled in float chunks gives exactly N actions

    def __init__(self, forward_step: float = FORWARD_STEP_M, turn_angle_deg: float = TURN_ANGLE_DEG) -> None:
        self.forward_step = _positive("forward_step", forward_step)
        self.turn_angle = math.radians(_positive("turn_angle_deg", turn_angle_deg))
        self.notes: list[str] = []
        self.reset()

    def reset(self) -> None:
        """Forget the accumulated distance and angle."""
        self._distance = 0.0
        self._angle = 0.0

    @property
    def pending(self) -> tuple[float, float]:
        """(metres, radians) integrated but not yet emitted as actions."""
        return self._distance, self._angle

    def add(self, twist: Twist, dt: float) -> list[NavAction]:
        """Integrate ``twist`` held for ``dt`` seconds; returns the actions completed by it (maybe none)."""
        lin, ang = twist.linear, twist.angular
        comps = {"linear.x": lin.x, "linear.y": lin.y, "linear.z": lin.z,
                 "angular.x": ang.x, "angular.y": ang.y, "angular.z": ang.z, "dt": dt}
        bad = [f"{k}={v}" for k, v in comps.items() if not math.isfinite(float(v))]
        if bad:
            raise ValueError(f"non-finite cmd_vel: {', '.join(bad)}")
        if dt < 0:
            raise ValueError(f"dt must be >= 0, got {dt}")
        notes = []
        if lin.x < 0:
            notes.append(f"backward linear.x={lin.x} ignored (no backward action)")
        notes += [f"{k}={comps[k]} ignored (not expressible as a discrete action)"
                  for k in ("linear.y", "linear.z", "angular.x", "angular.y") if comps[k] != 0.0]
        self.notes = notes

        self._distance += max(float(lin.x), 0.0) * dt
        self._angle += float(ang.z) * dt
        actions: list[NavAction] = []
        step, turn = self.forward_step, self.turn_angle
        while self._distance >= step * (1 - self._EPS):
            actions.append(NavAction.MOVE_FORWARD)
            self._distance = max(self._distance - step, 0.0)
        while self._angle >= turn * (1 - self._EPS):
            actions.append(NavAction.TURN_LEFT)
            self._angle -= turn
        while self._angle <= -turn * (1 - self._EPS):
            actions.append(NavAction.TURN_RIGHT)
            self._angle += turn
        if abs(self._angle) < turn * self._EPS:
            self._angle = 0.0
        return actions
