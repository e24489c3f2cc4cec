"""manip_sim_node's command inputs over ROS 2: ``/arm_cmd`` (delta + gripper in one ArmCommand, the default) and
the standard ``twist_pair`` (``/ee_delta_cmd`` + latched ``/gripper_cmd``); bad values and a bad choice."""

from __future__ import annotations

import json
import math

import pytest

from tests.ros.conftest import Warnings, spin_until

pytestmark = pytest.mark.ros

pytest.importorskip("robosuite", reason="manip_sim_node needs robosuite (the manip extra: pip install -e '.[manip]')")
from tests.ros.test_vla_node import ArmCommand, node_env  # noqa: E402

MAX_DELTA = 0.02


def _sim(start_node, ros_node, *params: str):
    """Start a Lift manip_sim_node with ``params``; returns (process, status list, ee position by stamp)."""
    from geometry_msgs.msg import PoseStamped
    from std_msgs.msg import String

    sim = start_node("manip_sim_node", "-p", "task:=lift", "-p", "image_size:=32", "-p", "seed:=3",
                     "-p", f"max_delta:={MAX_DELTA}", "-p", "publish_rate:=2.0", *params, env=node_env())
    status: list[dict] = []
    ee: dict[int, tuple[float, float, float]] = {}
    ros_node.create_subscription(String, "/manip/status", lambda m: status.append(json.loads(m.data)), 50)
    def on_ee(m: PoseStamped) -> None:
        p = m.pose.position
        ee[m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec] = (p.x, p.y, p.z)

    ros_node.create_subscription(PoseStamped, "/ee_pose", on_ee, 50)
    return sim, status, ee


def _wait_ready(ros_node, sim, status, publisher) -> None:
    """The sim subscribed to ``publisher``'s topic and its state (re-published at 2 Hz) reaches us."""
    assert spin_until(ros_node, lambda: (publisher.get_subscription_count() > 0 and bool(status))
                      or sim.proc.poll() is not None, timeout=60), "manip_sim_node never came up"
    assert sim.proc.poll() is None, "manip_sim_node exited at start-up"
    assert status[-1]["step"] == 0


def _subscribers(ros_node, topic: str) -> list[str]:
    return [i.node_name for i in ros_node.get_subscriptions_info_by_topic(topic)]


def _step_done(ros_node, status, n: int, ee: dict | None = None) -> dict:
    """The status of step ``n`` (and, with ``ee``, once the end-effector pose of the same state has arrived)."""
    assert spin_until(ros_node, lambda: any(s["step"] >= n for s in status), timeout=20), f"no step {n}"
    st = next(s for s in status if s["step"] >= n)
    if ee is not None:
        assert spin_until(ros_node, lambda: st["stamp_ns"] in ee, timeout=5), f"no /ee_pose for step {n}"
    return st


def test_arm_cmd_applies_each_message_gripper_and_sanitizes(start_node, ros_node):
    sim, status, ee = _sim(start_node, ros_node)
    pub = ros_node.create_publisher(ArmCommand, "/arm_cmd", 10)
    _wait_ready(ros_node, sim, status, pub)

    def send(delta, gripper: float) -> None:
        cmd = ArmCommand()
        cmd.header.frame_id = "world"
        cmd.delta.x, cmd.delta.y, cmd.delta.z = delta
        cmd.gripper = gripper
        pub.publish(cmd)

    send((0.0, 0.0, 0.0), -1.0)  # open
    opened = _step_done(ros_node, status, 1, ee)
    send((0.0, 0.0, 0.0), 1.0)  # close: this very step closes the fingers (no separate gripper topic to race)
    closing = _step_done(ros_node, status, 2, ee)
    assert closing["gripper"] < opened["gripper"] - 1e-4, (opened["gripper"], closing["gripper"])
    # a non-finite delta holds the arm (all axes zeroed); the gripper of this message (open) still applies
    send((math.nan, 0.0, 0.01), -1.0)
    reopened = _step_done(ros_node, status, 3, ee)
    assert reopened["gripper"] > closing["gripper"] + 1e-4, (closing["gripper"], reopened["gripper"])
    held = ee[reopened["stamp_ns"]]
    assert max(abs(a - b) for a, b in zip(held, ee[closing["stamp_ns"]])) < 1e-3
    # an oversized delta is clamped to max_delta
    send((0.0, 0.0, 0.5), -1.0)
    up = ee[_step_done(ros_node, status, 4, ee)["stamp_ns"]]
    assert 0.002 < up[2] - held[2] <= MAX_DELTA + 2e-3, (held, up)
    assert abs(up[0] - held[0]) < 5e-3 and abs(up[1] - held[1]) < 5e-3, (held, up)
    # the other interface's topics are not this sim's commands
    assert "manip_sim_node" in _subscribers(ros_node, "/arm_cmd")
    assert "manip_sim_node" not in _subscribers(ros_node, "/ee_delta_cmd") + _subscribers(ros_node, "/gripper_cmd")
    assert sim.proc.poll() is None


def test_twist_pair_latches_the_gripper_for_the_next_delta(start_node, ros_node):
    from geometry_msgs.msg import TwistStamped
    from std_msgs.msg import Float32

    sim, status, _ = _sim(start_node, ros_node, "-p", "command_input:=twist_pair")
    delta = ros_node.create_publisher(TwistStamped, "/ee_delta_cmd", 10)
    gripper = ros_node.create_publisher(Float32, "/gripper_cmd", 10)
    _wait_ready(ros_node, sim, status, delta)
    assert spin_until(ros_node, lambda: gripper.get_subscription_count() > 0, timeout=10)
    delta.publish(TwistStamped())  # a step with the gripper the sim starts with (open)
    opened = _step_done(ros_node, status, 1)
    gripper.publish(Float32(data=1.0))
    spin_until(ros_node, lambda: False, timeout=0.5)  # the latch, then the step (two topics: give it time)
    assert max(s["step"] for s in status) == 1, "a gripper command alone stepped the sim"
    delta.publish(TwistStamped())
    closing = _step_done(ros_node, status, 2)
    assert closing["gripper"] < opened["gripper"] - 1e-4
    assert "manip_sim_node" not in _subscribers(ros_node, "/arm_cmd")  # /arm_cmd is not this sim's command here


def test_unknown_command_input_exits_with_the_choices(start_node):
    sim = start_node("manip_sim_node", "-p", "task:=lift", "-p", "image_size:=32", "-p", "command_input:=joy",
                     env=node_env())
    rc = sim.proc.wait(timeout=60)
    out = sim.stop()
    assert rc != 0
    assert "command_input 'joy'" in out and "arm_cmd" in out and "twist_pair" in out, out[-2000:]
    assert "robosuite" not in out  # refused before the simulator build


def test_each_kind_of_bad_command_is_logged_once_per_source(ros_node):
    """Faults are keyed by the kinds sim.manip.action.sanitize reports: a repeat is not logged again, a new kind or
    a new source is; and the sanitized command (not the bad one) is what the arm executes."""
    from rclpy.parameter import Parameter
    from std_msgs.msg import Float32

    from allday_ros.manip_sim_node import ManipSimNode

    node = ManipSimNode(context=ros_node.context, parameter_overrides=[
        Parameter("image_size", value=32), Parameter("max_delta", value=MAX_DELTA), Parameter("seed", value=3)])
    warn = Warnings()
    node.get_logger = lambda: warn
    try:
        p0 = node.task.ee_pos().copy()
        node._step((math.nan, 0.0, 0.0), -1.0, "arm_cmd")
        node._step((0.0, math.inf, 0.0), -1.0, "arm_cmd")  # same kind, same source: not logged again
        assert len(warn.lines) == 1 and warn.lines[0].startswith("arm_cmd: non-finite delta"), warn.lines
        assert node.task.last_faults == ()  # repaired by the node before the task saw it
        assert abs(node.task.ee_pos() - p0).max() < 3e-3  # held, not sent to infinity
        node._step((0.0, 0.0, 0.5), 1.0, "arm_cmd")  # a new kind
        node._step((0.0, 0.0, 0.5), 1.0, "ee_delta_cmd")  # the same kind from another source
        assert [w.split(":")[0] for w in warn.lines] == ["arm_cmd", "arm_cmd", "ee_delta_cmd"], warn.lines
        assert "clamped to +-0.02 m" in warn.lines[1] and node._gripper == 1.0
        node._step((0.0, 0.0, 0.5), 7.0, "arm_cmd")  # two kinds together: one line naming both
        assert "delta" in warn.lines[3] and "gripper 7 clamped" in warn.lines[3], warn.lines
        assert node._gripper == 1.0 and len(warn.lines) == 4
        node._on_gripper(Float32(data=math.nan))
        node._on_gripper(Float32(data=math.nan))
        assert node._gripper == 0.0 and len(warn.lines) == 5 and warn.lines[4].startswith("gripper_cmd: non-finite")
        node._on_gripper(Float32(data=-3.0))
        assert node._gripper == -1.0 and len(warn.lines) == 6
    finally:
        node.destroy_node()
