#!/usr/bin/env python
"""ROS 2 transport costs of the closed loop (real node processes, localhost DDS):

1. image-to-action latency: a 224x224 rgb8 frame published -> vln_node acts -> /nav/action received,
   vs the same policy step in-process (median, p95); the difference is what ROS transport adds (target < 5 ms);
2. closed-loop rate: sim_node + vln_node (oracle) env steps per second over ROS vs in-process;
3. 640x480 rgb8 at 30 Hz into a recorder process: delivered/sent and latency, with and without the
   shared-memory Fast DDS profile (config/fastdds_shm.xml).
Last line: one JSON object."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def start(module: str, *args: str, env: dict[str, str]):
    import subprocess

    return subprocess.Popen([sys.executable, "-m", f"allday_ros.{module}", "--ros-args", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop(*procs) -> None:
    import signal

    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(15)
        except Exception:
            p.kill()


def latency(n: int, env: dict[str, str]) -> dict[str, float]:
    """Image publish -> action receive through vln_node, and the in-process equivalent."""
    import numpy as np
    import rclpy
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import Int8, String

    from agents.core.baselines import ForwardPolicy
    from agents.core.types import Observation, Pose
    from allday_ros.conversions import image_to_msg, msg_to_image
    from training.rosrun import spin_until

    rgb = np.random.default_rng(0).integers(0, 255, (224, 224, 3), dtype=np.uint8)
    pol = ForwardPolicy(steps=10**9)
    inproc = []
    for _ in range(n):
        t0 = time.perf_counter()
        img = msg_to_image(image_to_msg(rgb, "rgb8"), expected_encoding="rgb8")
        pol.act(Observation(rgb=img, depth=None, pose=Pose((0.0, 0.0, 0.0), 0.0), instruction="go"))
        inproc.append((time.perf_counter() - t0) * 1e3)
    node_proc = start("vln_node", "-p", "agent:=forward", "-p", "forward_steps:=1000000", "-p", "autostart:=true",
                      "-p", "stale_timeout:=5.0", env=env)
    ctx = rclpy.context.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("bench_latency", context=ctx)
    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
    pub = node.create_publisher(Image, "/camera/color/image_raw", 10)
    pub_i = node.create_publisher(String, "/instruction", latched)
    got: list[float] = []
    sub = node.create_subscription(Int8, "/nav/action", lambda m: got.append(time.perf_counter()), 10)
    ros = []
    try:
        assert spin_until(node, lambda: pub.get_subscription_count() > 0 and sub.get_publisher_count() > 0, 60)
        pub_i.publish(String(data="go forward"))
        for i in range(n + 5):
            msg = image_to_msg(rgb, "rgb8")
            msg.header.stamp.sec = i + 1
            k = len(got)
            t0 = time.perf_counter()
            pub.publish(msg)
            if i % 5 == 0:
                pub_i.publish(String(data="go forward"))
            if spin_until(node, lambda k=k: len(got) > k, 2.0) and i >= 5:   # first 5: warm-up
                ros.append((got[-1] - t0) * 1e3)
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        stop(node_proc)
    med_r, med_i = statistics.median(ros), statistics.median(inproc)
    return {"ros_median_ms": round(med_r, 3), "ros_p95_ms": round(pct(ros, 0.95), 3),
            "inproc_median_ms": round(med_i, 3), "inproc_p95_ms": round(pct(inproc, 0.95), 3),
            "transport_added_median_ms": round(med_r - med_i, 3), "samples": len(ros)}


def closed_loop(episodes: int, env: dict[str, str], size: int) -> dict[str, float]:
    import rclpy

    from sim.core.env import NavEnvConfig
    from sim.core.episodes import save_split
    from sim.nav.env import MujocoNavEnv
    from sim.nav.episode_gen import generate_episodes, scene_list
    from sim.nav.evaluate import evaluate
    from training.rosrun import WireClient, spin_until

    eps, gts, vocab = generate_episodes(scene_list(max(1, episodes // 2)), 2, progress=False)
    eps = eps[:episodes]
    gts = {str(e.episode_id): gts[str(e.episode_id)] for e in eps}
    tmp = Path(tempfile.mkdtemp())
    save_split(tmp, "b", eps, gts, vocab=vocab)
    sim = NavEnvConfig(width=size, height=size, quality="fast")
    e = MujocoNavEnv(sim, eps, gts)
    t0 = time.perf_counter()
    _, rows = evaluate(e, "oracle", progress=False)
    inproc_rate = sum(r["steps"] for r in rows) / (time.perf_counter() - t0)
    e.close()
    ctx = rclpy.context.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("bench_loop", context=ctx)
    client = WireClient(node, keep_frames_of=-1)
    procs = [start("sim_node", "-p", f"episodes:={tmp / 'b'}", "-p", f"width:={size}", "-p", f"height:={size}",
                   "-p", "quality:=fast", "-p", "wait_for_subscribers:=2", env=env),
             start("vln_node", "-p", "agent:=oracle", "-p", "autostart:=true", env=env)]
    try:
        assert spin_until(node, lambda: len(client.episodes) > 0, 60), "closed loop did not start"
        t0 = time.perf_counter()
        assert spin_until(node, lambda: client.finished, 300), "closed loop did not finish"
        dt = time.perf_counter() - t0
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        stop(*procs)
    steps = sum(ep.steps for ep in client.episodes)
    return {"ros_steps_per_s": round(steps / dt, 1), "inproc_steps_per_s": round(inproc_rate, 1),
            "ratio": round(steps / dt / inproc_rate, 3), "episodes": len(client.episodes), "size": size}


def vga_stream(frames: int, env: dict[str, str], shm: bool) -> dict[str, float]:
    import numpy as np
    import rclpy
    from sensor_msgs.msg import Image

    from allday_ros.conversions import image_to_msg
    from allday_ros.recorder import read_bag
    from training.rosrun import spin_until

    env = dict(env)
    if not shm:
        env.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    bag = Path(tempfile.mkdtemp()) / "vga"
    rec = start("recorder", "-p", f"output:={bag}", "-p", "topics:=['/bench/vga']",
                "-p", "types:=['sensor_msgs/msg/Image']", env=env)
    saved = os.environ.get("FASTDDS_DEFAULT_PROFILES_FILE")
    if not shm:
        os.environ.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)
    ctx = rclpy.context.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("bench_vga", context=ctx)
    pub = node.create_publisher(Image, "/bench/vga", 10)
    rgb = np.random.default_rng(1).integers(0, 255, (480, 640, 3), dtype=np.uint8)
    try:
        assert spin_until(node, lambda: pub.get_subscription_count() > 0, 60)
        period = 1 / 30
        t_next = time.perf_counter()
        for _ in range(frames):
            msg = image_to_msg(rgb, "rgb8", stamp=node.get_clock().now().to_msg())
            pub.publish(msg)
            t_next += period
            spin_until(node, lambda: False, max(0.0, t_next - time.perf_counter()))
        spin_until(node, lambda: False, 1.0)
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        stop(rec)
        if saved is not None:
            os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = saved
    msgs = read_bag(bag)
    lat = [(t - (m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec)) / 1e6 for _, t, m in msgs]
    ok = sum(1 for _, _, m in msgs if bytes(m.data) == rgb.tobytes())
    return {"sent": frames, "received": len(msgs), "intact": ok,
            "latency_median_ms": round(statistics.median(lat), 2) if lat else None,
            "latency_p95_ms": round(pct(lat, 0.95), 2) if lat else None, "shm_profile": shm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts (about a minute on 2 cores)")
    args = ap.parse_args()
    from training.rosrun import ensure_allday_ros, ros_env

    ensure_allday_ros()
    env = ros_env()
    for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_LOCALHOST_ONLY", "FASTDDS_DEFAULT_PROFILES_FILE"):
        os.environ[k] = env[k]
    n = 40 if args.quick else 300
    res = {"latency_224": latency(n, env)}
    print("latency", res["latency_224"], flush=True)
    res["closed_loop"] = closed_loop(2 if args.quick else 8, env, 224)
    print("closed loop", res["closed_loop"], flush=True)
    frames = 60 if args.quick else 180
    res["vga_30hz_shm"] = vga_stream(frames, env, shm=True)
    print("vga shm", res["vga_30hz_shm"], flush=True)
    if not args.quick:
        res["vga_30hz_default"] = vga_stream(frames, env, shm=False)
        print("vga default", res["vga_30hz_default"], flush=True)
    print(json.dumps({"benchmark": "ros_loop", "date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
                      "cpus": os.cpu_count(), "quick": args.quick, **res}))


if __name__ == "__main__":
    main()
