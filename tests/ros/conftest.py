"""ROS 2 test setup: isolated discovery (localhost, random domain), the workspace on the path, node processes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WS_SRC = ROOT / "ros2_ws" / "src"
WS_INSTALL = ROOT / "ros2_ws" / "install"

# discovery isolation must be in the environment before rclpy initialises
os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(1, 101)))
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(WS_SRC / "allday_ros" / "config" / "fastdds_shm.xml"))
sys.path.insert(0, str(WS_SRC / "allday_ros"))

rclpy = pytest.importorskip("rclpy", reason="ROS 2 tests need rclpy (the ros extra: pip install -e '.[ros]')")


def ros_env(**extra: str) -> dict[str, str]:
    """Environment for node subprocesses: same domain/isolation, workspace on the paths (training.rosrun)."""
    from training.rosrun import ros_env as _ros_env

    return _ros_env(**extra)


class NodeProcess:
    """A node started as its own process: ``python -m allday_ros.<module> --ros-args ...``."""

    def __init__(self, module: str, *ros_args: str, env: dict[str, str] | None = None) -> None:
        cmd = [sys.executable, "-m", f"allday_ros.{module}", "--ros-args", *ros_args]
        self.proc = subprocess.Popen(cmd, env=env or ros_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)

    def stop(self, timeout: float = 10.0) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.stdout.read() if self.proc.stdout else ""


@pytest.fixture
def start_node():
    """Factory fixture: ``start_node("sim_node", "-p", "x:=1")``; every node is stopped at teardown."""
    procs: list[NodeProcess] = []

    def _start(module: str, *ros_args: str, env: dict[str, str] | None = None) -> NodeProcess:
        p = NodeProcess(module, *ros_args, env=env)
        procs.append(p)
        return p

    yield _start
    for p in procs:
        out = p.stop()
        print(f"--- {p.proc.args[2]} output (rc {p.proc.returncode}) ---\n{out[-4000:]}")


@pytest.fixture
def ros_node():
    """An rclpy context + node for the test process itself."""
    ctx = rclpy.context.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node(f"test_{os.getpid()}_{int(time.monotonic() * 1000) % 100000}", context=ctx)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def spin_until(node, predicate, timeout: float = 20.0) -> bool:
    """Spin ``node`` until ``predicate()`` is true or ``timeout`` passes (never a fixed sleep)."""
    from rclpy.executors import SingleThreadedExecutor

    ex = SingleThreadedExecutor(context=node.context)
    ex.add_node(node)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if predicate():
                return True
            ex.spin_once(timeout_sec=0.05)
        return bool(predicate())
    finally:
        ex.remove_node(node)


class Warnings:
    """Collects what a node warns (stands in for its rclpy logger, whose output goes to the console)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, msg: str) -> None:
        self.lines.append(msg)

    def __getattr__(self, name: str):  # info/debug/error are not what this test counts
        return lambda *a, **k: None
