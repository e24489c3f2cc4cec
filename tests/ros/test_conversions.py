"""allday <-> ROS message conversions: images, odometry frames, actions and cmd_vel integration."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("sensor_msgs.msg", reason="needs the ROS message packages (the ros extra)")

from geometry_msgs.msg import Twist  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from agents.core.types import NavAction, Pose  # noqa: E402
from allday_ros.conversions import (  # noqa: E402
    CmdVelIntegrator,
    ImageFormatError,
    action_to_twist,
    image_to_msg,
    instruction_problem,
    msg_to_image,
    odometry_to_pose,
    pose_to_odometry,
)

pytestmark = pytest.mark.ros
RNG = np.random.default_rng(0)


def _rgb(h=6, w=5):
    return RNG.integers(0, 256, size=(h, w, 3), dtype=np.uint8)


def _depth(h=6, w=5):
    return RNG.uniform(0.1, 9.0, size=(h, w)).astype(np.float32)


# ------------------------------------------------------------------------------------------------------- images


def test_rgb8_round_trip_is_exact_and_copy_free():
    img = _rgb()
    msg = image_to_msg(img, "rgb8", frame_id="cam")
    assert (msg.encoding, msg.height, msg.width, msg.step, msg.is_bigendian) == ("rgb8", 6, 5, 15, 0)
    assert msg.header.frame_id == "cam" and len(msg.data) == 6 * 15
    out = msg_to_image(msg, expected_encoding="rgb8", expected_shape=(6, 5, 3))
    np.testing.assert_array_equal(out, img)
    assert np.shares_memory(out, np.frombuffer(msg.data, np.uint8))  # view of the message buffer


def test_32fc1_and_mono8_round_trip():
    d = _depth()
    msg = image_to_msg(d, "32FC1")
    assert msg.step == 5 * 4 and len(msg.data) == 6 * 20
    out = msg_to_image(msg, expected_encoding="32FC1")
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, d)
    m = RNG.integers(0, 256, size=(3, 4), dtype=np.uint8)
    np.testing.assert_array_equal(msg_to_image(image_to_msg(m, "mono8")), m)


def test_non_contiguous_input_is_packed_correctly():
    img = _rgb(8, 10)[::2, ::2]  # a strided view
    np.testing.assert_array_equal(msg_to_image(image_to_msg(img, "rgb8")), img)


def test_bgr8_is_swapped_on_the_wire_and_back():
    img = _rgb()
    msg = image_to_msg(img, "bgr8")
    wire = np.frombuffer(msg.data, np.uint8).reshape(6, 5, 3)
    np.testing.assert_array_equal(wire, img[..., ::-1])
    np.testing.assert_array_equal(msg_to_image(msg, expected_encoding="rgb8"), img)


def test_16uc1_millimetres_convert_to_metres():
    d = np.array([[0.0, 1.2344], [np.nan, 70.0]], dtype=np.float32)  # rounds to 1234 mm
    msg = image_to_msg(d, "16UC1")
    np.testing.assert_array_equal(np.frombuffer(msg.data, np.uint16).reshape(2, 2), [[0, 1234], [0, 65535]])
    out = msg_to_image(msg, expected_encoding="32FC1")
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.0, 1.234], [0.0, 65.535]], atol=1e-6)
    mm = np.array([[1000, 2500]], dtype=np.uint16)  # raw millimetres pass through
    np.testing.assert_allclose(msg_to_image(image_to_msg(mm, "16UC1")), [[1.0, 2.5]])


def test_padded_step_is_honoured_without_copy():
    img = _rgb(4, 3)
    msg = Image(height=4, width=3, encoding="rgb8", step=16)  # 9 bytes of pixels + 7 padding per row
    rows = np.zeros((4, 16), np.uint8)
    rows[:, 9:] = 0xEE
    rows[:, :9] = img.reshape(4, 9)
    msg.data = rows.tobytes()
    out = msg_to_image(msg)
    np.testing.assert_array_equal(out, img)
    assert np.shares_memory(out, np.frombuffer(msg.data, np.uint8))
    d = _depth(2, 3)
    dm = Image(height=2, width=3, encoding="32FC1", step=14)  # unaligned float rows
    raw = np.zeros((2, 14), np.uint8)
    raw[:, :12] = d.view(np.uint8).reshape(2, 12)
    dm.data = raw.tobytes()
    np.testing.assert_array_equal(msg_to_image(dm), d)


def test_bigendian_depth_is_decoded():
    d = _depth(2, 2)
    msg = Image(height=2, width=2, encoding="32FC1", step=8, is_bigendian=1)
    msg.data = d.astype(">f4").tobytes()
    np.testing.assert_array_equal(msg_to_image(msg), d)


def _good():
    return image_to_msg(_rgb(4, 3), "rgb8")


def _with(**kw):
    m = _good()
    for k, v in kw.items():
        setattr(m, k, v)
    return m


@pytest.mark.parametrize(
    "msg, kwargs, match",
    [
        (_with(encoding="yuv422"), {}, "unsupported image encoding 'yuv422'"),
        (_good(), {"expected_encoding": "32FC1"}, "encoding mismatch"),
        (_with(step=8), {}, "step 8 too small"),
        (_with(step=10), {}, r"data length 36 != step\*height"),
        (_with(height=5), {}, r"data length 36 != step\*height"),
        (_with(data=b"\x00" * 35), {}, "data length 35"),
        (_good(), {"expected_shape": (3, 4, 3)}, "size mismatch"),
        (_with(width=0, height=0, step=0, data=b""), {}, "empty image"),
    ],
    ids=["unknown-encoding", "encoding-mismatch", "step-too-small", "step-vs-data", "height-vs-data",
         "short-data", "expected-shape", "empty"],
)
def test_malformed_messages_raise_clear_errors(msg, kwargs, match):
    with pytest.raises(ImageFormatError, match=match):
        msg_to_image(msg, **kwargs)


@pytest.mark.parametrize(
    "arr, enc, match",
    [
        (np.zeros((4, 3, 3), np.float32), "rgb8", "HxWx3 uint8"),
        (np.zeros((4, 3), np.uint8), "rgb8", "HxWx3 uint8"),
        (np.zeros((4, 3, 4), np.uint8), "rgb8", "HxWx3 uint8"),
        (np.zeros((4, 3), np.float64), "32FC1", "float32"),
        (np.zeros((4, 3, 1), np.float32), "32FC1", "HxW float32"),
        (np.zeros((4, 3), np.int32), "16UC1", "16UC1"),
        (np.zeros((4, 3, 3), np.uint8), "mono8", "HxW uint8"),
        (np.zeros((0, 3, 3), np.uint8), "rgb8", "empty image"),
        (np.zeros((4, 3, 3), np.uint8), "rgba8", "unsupported encoding"),
        ([[1, 2]], "mono8", "numpy array"),
    ],
)
def test_image_to_msg_rejects_wrong_dtype_or_shape(arr, enc, match):
    with pytest.raises(ImageFormatError, match=match):
        image_to_msg(arr, enc)


def test_image_format_error_is_a_value_error():
    assert issubclass(ImageFormatError, ValueError)


# ------------------------------------------------------------------------------------------------ odometry


def test_frame_mapping_hand_case():
    # Habitat: x=1 (right), y=0.5 (up), z=-2 (2 m ahead of the origin facing -z); heading +90 deg (turned left)
    odom = pose_to_odometry(Pose((1.0, 0.5, -2.0), math.pi / 2), None, "odom", "base_link")
    p, q = odom.pose.pose.position, odom.pose.pose.orientation
    assert (p.x, p.y, p.z) == (2.0, -1.0, 0.5)  # forward 2, right 1 (= -1 left), up 0.5
    assert (q.x, q.y) == (0.0, 0.0)
    assert q.z == pytest.approx(math.sin(math.pi / 4)) and q.w == pytest.approx(math.cos(math.pi / 4))
    assert odom.header.frame_id == "odom" and odom.child_frame_id == "base_link"


def test_heading_zero_faces_ros_plus_x_and_left_turn_increases_yaw():
    forward = Pose((0.0, 0.0, -1.0), 0.0)  # one metre along Habitat -z
    assert odometry_to_pose(pose_to_odometry(forward, None)).position == (0.0, 0.0, -1.0)
    assert pose_to_odometry(forward, None).pose.pose.position.x == 1.0
    q = pose_to_odometry(Pose((0, 0, 0), 0.3), None).pose.pose.orientation
    assert math.atan2(2 * q.w * q.z, 1 - 2 * q.z * q.z) == pytest.approx(0.3)


@pytest.mark.parametrize("heading", [0.0, 0.1, -0.7, math.pi / 2, -math.pi / 2, 3.0, -3.1, math.pi])
def test_odometry_round_trip_exact(heading):
    pose = Pose((1.25, -0.5, 3.75), heading)
    back = odometry_to_pose(pose_to_odometry(pose, None))
    assert back.position == pytest.approx(pose.position, abs=1e-9)
    assert back.heading == pytest.approx(heading, abs=1e-9)


def test_odometry_round_trip_wraps_heading():
    back = odometry_to_pose(pose_to_odometry(Pose((0, 0, 0), 2 * math.pi + 0.25), None))
    assert back.heading == pytest.approx(0.25, abs=1e-9)


def test_odometry_stamp_and_bad_input():
    from builtin_interfaces.msg import Time

    assert pose_to_odometry(Pose((0, 0, 0), 0), Time(sec=3, nanosec=4)).header.stamp == Time(sec=3, nanosec=4)
    with pytest.raises(ValueError, match="finite"):
        pose_to_odometry(Pose((0, float("nan"), 0), 0), None)
    bad = Odometry()
    bad.pose.pose.orientation.w = float("inf")
    with pytest.raises(ValueError, match="finite"):
        odometry_to_pose(bad)


# ---------------------------------------------------------------------------------------------- actions


def test_action_to_twist():
    fwd = action_to_twist(NavAction.MOVE_FORWARD, 0.25, 15.0, 0.5)
    assert (fwd.linear.x, fwd.angular.z) == (0.5, 0.0)
    left = action_to_twist("TURN_LEFT", 0.25, 15.0, 1.0)
    assert left.angular.z == pytest.approx(math.radians(15)) and left.linear.x == 0.0
    right = action_to_twist(3, 0.25, 30.0, 2.0)
    assert right.angular.z == pytest.approx(-math.radians(15))
    stop = action_to_twist(NavAction.STOP)
    assert [stop.linear.x, stop.linear.y, stop.angular.z] == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        action_to_twist(7)
    with pytest.raises(ValueError, match="period_s"):
        action_to_twist(NavAction.MOVE_FORWARD, period_s=0.0)


def _tw(vx=0.0, wz=0.0, vy=0.0):
    t = Twist()
    t.linear.x, t.linear.y, t.angular.z = vx, vy, wz
    return t


@pytest.mark.parametrize("n", [1, 4, 9])
def test_integrator_emits_exactly_n_forward_actions(n):
    integ = CmdVelIntegrator(0.25, 15.0)
    actions = []
    dt = 1 / 30
    v = n * 0.25 / (30 * dt * 3)  # n steps over 3 s of 30 Hz commands, in float chunks
    for _ in range(90):
        actions += integ.add(_tw(vx=v), dt)
    assert actions == [NavAction.MOVE_FORWARD] * n
    assert integ.add(_tw(vx=v), 0.0) == []


def test_integrator_turns_both_ways_and_carries_remainders():
    integ = CmdVelIntegrator(0.25, 15.0)
    wz = math.radians(15) / 0.5
    assert integ.add(_tw(wz=wz), 0.25) == []  # half a turn
    assert integ.add(_tw(wz=wz), 0.25) == [NavAction.TURN_LEFT]
    assert integ.add(_tw(wz=-wz), 1.0) == [NavAction.TURN_RIGHT, NavAction.TURN_RIGHT]
    assert integ.add(_tw(wz=math.radians(45)), 1.0) == [NavAction.TURN_LEFT] * 3
    assert integ.pending[1] == pytest.approx(0.0, abs=1e-12)


def test_integrator_ignores_backward_and_lateral_with_a_note():
    integ = CmdVelIntegrator(0.25, 15.0)
    assert integ.add(_tw(vx=-1.0, vy=0.3), 1.0) == []
    assert any("backward" in n for n in integ.notes) and any("linear.y" in n for n in integ.notes)
    assert integ.pending == (0.0, 0.0)
    assert integ.add(_tw(vx=0.25), 1.0) == [NavAction.MOVE_FORWARD] and integ.notes == []


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_integrator_rejects_non_finite(bad):
    integ = CmdVelIntegrator()
    with pytest.raises(ValueError, match="non-finite"):
        integ.add(_tw(vx=bad), 0.1)
    with pytest.raises(ValueError, match="non-finite"):
        integ.add(_tw(wz=0.1), bad)
    with pytest.raises(ValueError, match="dt"):
        integ.add(_tw(), -0.1)
    with pytest.raises(ValueError, match="forward_step"):
        CmdVelIntegrator(forward_step=bad)


def test_instruction_problem_names_empty_and_over_long_and_counts_after_stripping():
    assert instruction_problem("go to the kitchen") is None
    for empty in ("", "   ", "\n\t"):
        assert instruction_problem(empty) == "empty instruction"
    assert instruction_problem("x" * 2001) == "instruction has 2001 characters (limit 2000)"
    assert instruction_problem("x" * 2000) is None
    assert instruction_problem("  " + "x" * 2000 + "  ") is None   # padding does not count against the limit
    assert instruction_problem("go", limit=1) == "instruction has 2 characters (limit 1)"
