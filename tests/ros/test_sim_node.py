"""sim_node as a robot: velocity commands, bad commands, reset and condition services (real process)."""

from __future__ import annotations

import json
import math

import pytest
from geometry_msgs.msg import Twist
from std_msgs.msg import Int8, String
from std_srvs.srv import Trigger

from tests.ros.conftest import spin_until

pytestmark = pytest.mark.ros


@pytest.fixture
def sim(start_node, ros_node):
    start_node("sim_node", "-p", "width:=32", "-p", "height:=32", "-p", "quality:=fast", "-p", "scenes:=1",
               "-p", "per_scene:=2", "-p", "command_source:=cmd_vel", "-p", "wait_for_subscribers:=1")
    statuses: list[dict] = []
    sub = ros_node.create_subscription(String, "/episode/status", lambda m: statuses.append(json.loads(m.data)), 100)
    pub = ros_node.create_publisher(Twist, "/cmd_vel", 10)
    assert spin_until(ros_node, lambda: sub.get_publisher_count() > 0 and pub.get_subscription_count() > 0
                      and any(s["event"] == "reset" for s in statuses), timeout=60)
    return ros_node, pub, statuses


def _twist(vx: float = 0.0, wz: float = 0.0) -> Twist:
    t = Twist()
    t.linear.x, t.angular.z = vx, wz
    return t


def test_cmd_vel_is_integrated_into_discrete_steps(sim):
    node, pub, statuses = sim
    h0 = statuses[-1]["heading"]
    # what vln_node sends for TURN_LEFT: 15 deg over its 0.5 s control period, held 0.5 s by the sim
    pub.publish(_twist(wz=math.radians(15) / 0.5))
    assert spin_until(node, lambda: any(s.get("action") == 2 for s in statuses), timeout=5)
    spin_until(node, lambda: False, timeout=0.3)
    turned = [s for s in statuses if s.get("action") == 2]
    assert len(turned) == 1
    assert math.isclose(abs(turned[0]["heading"] - h0) % (2 * math.pi), math.radians(15), abs_tol=1e-6)


def test_nan_and_inf_velocities_are_rejected(sim):
    node, pub, statuses = sim
    n = len([s for s in statuses if s["event"] == "step"])
    for bad in (_twist(vx=float("nan")), _twist(wz=float("inf"))):
        pub.publish(bad)
    spin_until(node, lambda: False, timeout=0.5)
    assert len([s for s in statuses if s["event"] == "step"]) == n, "a non-finite command moved the robot"
    # and half a forward step per message accumulates: two messages of 0.25 m/s held 0.5 s make one step
    pub.publish(_twist(vx=0.25))
    spin_until(node, lambda: False, timeout=0.3)
    assert not any(s.get("action") == 1 for s in statuses)
    pub.publish(_twist(vx=0.25))
    assert spin_until(node, lambda: any(s.get("action") == 1 for s in statuses), timeout=5)
    pub.publish(_twist(wz=1.0))   # still alive: a good command after the bad ones is applied
    assert spin_until(node, lambda: len([s for s in statuses if s["event"] == "step"]) > n, timeout=5)


def test_reset_service_starts_the_next_episode(sim):
    node, _, statuses = sim
    cli = node.create_client(Trigger, "/sim/reset")
    assert cli.wait_for_service(timeout_sec=20)
    first = statuses[-1]["episode_id"]
    fut = cli.call_async(Trigger.Request())
    assert spin_until(node, fut.done, timeout=20) and fut.result().success
    assert spin_until(node, lambda: statuses[-1]["event"] == "reset" and statuses[-1]["episode_id"] != first, 10)


def test_set_condition_service(sim):
    node, _, statuses = sim
    try:
        from allday_interfaces.srv import SetCondition
    except ImportError:
        pytest.skip("allday_interfaces is not built (scripts/build_ros.sh)")
    cli = node.create_client(SetCondition, "/sim/set_condition")
    assert cli.wait_for_service(timeout_sec=20)

    def call(name: str):
        fut = cli.call_async(SetCondition.Request(condition=name))
        assert spin_until(node, fut.done, timeout=20)
        return fut.result()

    bad = call("foggy")
    assert not bad.success and "unknown condition" in bad.message
    ok = call("overexposure")
    assert ok.success
    assert spin_until(node, lambda: statuses[-1].get("condition") == "overexposure", timeout=10)


def test_discrete_actions_out_of_range_are_ignored(start_node, ros_node):
    start_node("sim_node", "-p", "width:=32", "-p", "height:=32", "-p", "quality:=fast", "-p", "scenes:=1",
               "-p", "per_scene:=1", "-p", "wait_for_subscribers:=1")
    statuses: list[dict] = []
    sub = ros_node.create_subscription(String, "/episode/status", lambda m: statuses.append(json.loads(m.data)), 100)
    pub = ros_node.create_publisher(Int8, "/nav/action", 50)
    assert spin_until(ros_node, lambda: sub.get_publisher_count() > 0 and pub.get_subscription_count() > 0
                      and bool(statuses), timeout=60)
    for bad in (7, -1, 4):
        pub.publish(Int8(data=bad))
    pub.publish(Int8(data=2))
    assert spin_until(ros_node, lambda: any(s["event"] == "step" for s in statuses), timeout=10)
    steps = [s for s in statuses if s["event"] == "step"]
    assert len(steps) == 1 and steps[0]["action"] == 2 and steps[0]["step"] == 1
