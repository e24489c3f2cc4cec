"""Run the stack over ROS 2 from the training side: the environment for node processes, a bringup of
sim_node + vln_node, and a client that rebuilds episodes and VLN-CE metrics from what crossed the wire."""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[1]
WS = ROOT / "ros2_ws"


def ensure_allday_ros() -> None:
    """Make the ``allday_ros`` package importable from this checkout (when not colcon-installed)."""
    src = str(WS / "src" / "allday_ros")
    if src not in sys.path:
        sys.path.insert(0, src)


def ros_env(domain_id: int | None = None, **extra: str) -> dict[str, str]:
    """Environment for ROS node processes: localhost discovery, a domain id, the workspace on the paths."""
    env = dict(os.environ)
    if domain_id is not None:
        env["ROS_DOMAIN_ID"] = str(domain_id)
    env.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("ROS_LOCALHOST_ONLY", "1")
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(WS / "src" / "allday_ros" / "config" / "fastdds_shm.xml"))
    env.setdefault("MUJOCO_GL", "egl")
    install = WS / "install"
    py = [str(WS / "src" / "allday_ros")] + [str(p) for p in install.glob("*/lib/python3*/site-packages")]
    py += [str(p) for p in install.glob("*/local/lib/python3*/dist-packages")]
    env["PYTHONPATH"] = os.pathsep.join(py + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    prefixes = [str(p) for p in sorted(install.glob("*")) if p.is_dir()] + [sys.prefix]
    env["AMENT_PREFIX_PATH"] = os.pathsep.join(dict.fromkeys(prefixes + env.get("AMENT_PREFIX_PATH", "").split(
        os.pathsep)).keys()).rstrip(os.pathsep)
    libs = [str(p) for p in install.glob("*/lib") if p.is_dir()]
    if libs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def write_bringup(out: Path, params: dict[str, dict[str, Any]], nodes: list[dict[str, Any]]) -> Path:
    """Write ``params.yaml`` (per-node ros__parameters) and ``bringup.yaml``; returns the bringup path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "params.yaml").write_text(yaml.safe_dump({n: {"ros__parameters": p} for n, p in params.items()}))
    path = out / "bringup.yaml"
    path.write_text(yaml.safe_dump({"params_file": "params.yaml", "nodes": nodes}))
    return path


@dataclass
class WireEpisode:
    episode_id: Any
    scene_id: str
    goal: list[float]
    positions: list[list[float]] = field(default_factory=list)
    stamps: list[int] = field(default_factory=list)
    last_action: int | None = None
    steps: int = 0
    done: bool = False
    sim_metrics: dict[str, float] | None = None


class WireClient:
    """Subscribes to /episode/status, /odom and the camera; keeps per-episode trajectories and frames."""

    def __init__(self, node: Any, keep_frames_of: int = 1) -> None:
        from nav_msgs.msg import Odometry
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from std_msgs.msg import String

        qos = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        self.node = node
        self.episodes: list[WireEpisode] = []
        self.frames: list[np.ndarray] = []
        self.finished = False
        self.keep_frames_of = keep_frames_of
        self._frame_stamps: set[int] = set()
        self._odom: dict[int, list[float]] = {}
        node.create_subscription(String, "/episode/status", self._on_status, qos)
        node.create_subscription(Odometry, "/odom", self._on_odom, qos)
        node.create_subscription(Image, "/camera/color/image_raw", self._on_image, QoSProfile(
            depth=20, reliability=ReliabilityPolicy.RELIABLE))

    def _on_odom(self, msg: Any) -> None:
        from allday_ros.conversions import odometry_to_pose, stamp_to_ns

        stamp = stamp_to_ns(msg.header.stamp)
        self._odom[stamp] = list(odometry_to_pose(msg).position)

    def _on_image(self, msg: Any) -> None:
        if len(self.episodes) > self.keep_frames_of or not self.episodes or self.episodes[-1].done:
            return
        from allday_ros.conversions import msg_to_image, stamp_to_ns

        stamp = stamp_to_ns(msg.header.stamp)
        if stamp in self._frame_stamps:
            return

        self._frame_stamps.add(stamp)
        self.frames.append(msg_to_image(msg, expected_encoding="rgb8").copy())

    def _on_status(self, msg: Any) -> None:
        try:
            self._status(json.loads(msg.data))
        except (json.JSONDecodeError, TypeError, KeyError, ValueError, AttributeError) as exc:
            log.warning("ignored a malformed /episode/status message (%s: %s)", type(exc).__name__, exc)

    def _status(self, st: dict[str, Any]) -> None:
        """Apply one status message; every field is read before anything is changed, so a malformed message
        (missing or mistyped field) raises and leaves the episodes as they were."""
        event = st["event"]
        if event == "finished":
            self.finished = True
            return
        if event != "reset" and (not self.episodes or self.episodes[-1].episode_id != st.get("episode_id")):
            return
        position, stamp, step = list(st["position"]), int(st["stamp_ns"]), int(st["step"])
        action = None if st.get("action") is None else int(st["action"])
        if event == "reset":
            self.episodes.append(WireEpisode(st["episode_id"], st["scene_id"], st["goal"]))
        ep = self.episodes[-1]
        ep.positions.append(position)
        ep.stamps.append(stamp)
        ep.steps = step
        if action is not None:
            ep.last_action = action
        if event == "done":
            ep.done = True
            ep.sim_metrics = st.get("metrics")

    def metrics(self, episodes: dict[str, Any], ground_truth: dict[str, Any],
                success_distance: float = 3.0) -> list[dict[str, float]]:
        """VLN-CE metrics per finished episode from the odometry that crossed the wire."""
        from sim import metrics as M
        from sim.core.frames import habitat_to_mj
        from sim.nav.occupancy import grid_for_scene

        rows = []
        for ep in self.episodes:
            if not ep.done:
                continue
            # positions from /odom for the stamps the status announced (status carries them too as a check)
            pos = [self._odom.get(s, p) for s, p in zip(ep.stamps, ep.positions)]
            if ep.last_action == 0:
                pos = pos[:-1]  # STOP re-announces the final pose; the trajectory has it once
            grid = grid_for_scene(ep.scene_id)
            gx, gy, _ = habitat_to_mj(ep.goal)
            dists = [grid.geodesic(*habitat_to_mj(p)[:2], gx, gy) for p in pos]
            gt = ground_truth.get(str(ep.episode_id))
            ref = gt.locations if gt is not None else pos
            shortest = episodes[str(ep.episode_id)].geodesic_distance
            rows.append({"episode_id": ep.episode_id, **M.episode_metrics(
                np.asarray(pos), np.asarray(dists), ep.last_action == 0, shortest, ref, ep.steps,
                success_distance)})
        return rows


def spin_until(node: Any, predicate: Any, timeout: float) -> bool:
    from rclpy.executors import SingleThreadedExecutor

    ex = SingleThreadedExecutor(context=node.context)
    ex.add_node(node)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not predicate():
            ex.spin_once(timeout_sec=0.05)
        return bool(predicate())
    finally:
        ex.remove_node(node)
