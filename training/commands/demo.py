"""``allday demo``: the main job on the embedded simulator (episodes -> agents -> metrics -> video)."""

from __future__ import annotations

import argparse
import logging
import math
import time
from pathlib import Path

log = logging.getLogger(__name__)


METRIC_KEYS = ("sr", "spl", "osr", "ne", "ndtw", "sdtw", "tl")


def _episodes(args: argparse.Namespace, out: Path):
    from sim.core.episodes import save_split
    from sim.nav.episode_gen import generate_episodes, scene_list

    n_scenes = max(1, min(3, args.episodes))
    per_scene = math.ceil(args.episodes / n_scenes)
    episodes, gts, vocab = generate_episodes(scene_list(n_scenes, seed=args.seed), per_scene, seed=args.seed,
                                             progress=not args.quiet)
    episodes = episodes[: args.episodes]
    gts = {str(e.episode_id): gts[str(e.episode_id)] for e in episodes}
    save_split(out / "episodes", "demo", episodes, gts, vocab=vocab)
    return episodes, gts


def _run_inproc(args: argparse.Namespace, episodes, gts, out: Path) -> tuple[dict, list[Path]]:
    from sim.core.env import NavEnvConfig
    from sim.nav.env import MujocoNavEnv
    from sim.nav.evaluate import evaluate
    from sim.nav.render_episode import render_episode

    env = MujocoNavEnv(NavEnvConfig(width=args.size, height=args.size, quality=args.quality), episodes, gts)
    table = {}
    try:
        for agent in args.agents:
            agg, _ = evaluate(env, agent, condition=args.condition, seed=args.seed, progress=not args.quiet)
            table[agent] = {k: round(float(agg[k]), 4) for k in METRIC_KEYS}
    finally:
        env.close()
    written = render_episode(episodes, gts, 0, out, agent=args.agents[0], condition=args.condition,
                             size=args.size, quality=args.quality, png_every=0)
    return table, written


def _run_ros(args: argparse.Namespace, episodes, gts, out: Path) -> tuple[dict, list[Path]]:
    """sim_node and vln_node as separate processes; metrics rebuilt from what crossed the wire."""
    import os

    import rclpy

    from training.rosrun import WireClient, ensure_allday_ros, ros_env, spin_until, write_bringup

    ensure_allday_ros()
    import random

    from allday_ros.bringup import Bringup, BringupConfig
    from sim import metrics as M
    from sim.nav.video import write_video

    # the demo never joins the user's ROS graph (a real robot may listen on it): own domain, this host only
    env = ros_env(domain_id=random.randint(1, 101), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    os.environ.update({k: env[k] for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_LOCALHOST_ONLY",
                                           "FASTDDS_DEFAULT_PROFILES_FILE")})
    by_id = {str(e.episode_id): e for e in episodes}
    table: dict[str, dict] = {}
    written: list[Path] = []
    for agent in args.agents:
        sim_p = {"episodes": str(out / "episodes" / "demo"), "width": args.size, "height": args.size,
                 "quality": args.quality, "condition": args.condition or "", "auto_reset": True,
                 "wait_for_subscribers": 2}
        vln_p = {"agent": agent, "autostart": True, "seed": args.seed}
        cfg = write_bringup(out / f"ros_{agent}", {"sim_node": sim_p, "vln_node": vln_p},
                            [{"executable": "sim_node"}, {"executable": "vln_node"}])
        ctx = rclpy.context.Context()
        rclpy.init(context=ctx)
        node = rclpy.create_node(f"allday_demo_{agent}", context=ctx)
        client = WireClient(node, keep_frames_of=1 if not written else 0)
        bringup = Bringup(BringupConfig.load(cfg), env=env, quiet=not args.verbose_nodes).start()
        try:
            ok = spin_until(node, lambda c=client, b=bringup: c.finished or b.poll() is not None,
                            timeout=args.timeout)
            if not ok or not client.finished:
                raise RuntimeError(f"ROS demo with agent {agent} did not finish within {args.timeout} s "
                                   f"(node exit code {bringup.poll()})")
        finally:
            bringup.stop()
            node.destroy_node()
            rclpy.try_shutdown(context=ctx)
        rows = client.metrics(by_id, gts)
        agg = M.aggregate(rows)
        table[agent] = {k: round(float(agg[k]), 4) for k in METRIC_KEYS}
        if client.frames and not written:
            written.append(write_video(client.frames, out / "episode_0_ros.mp4"))
            written.append(_wire_topdown(client.episodes[0], by_id, gts, table[agent], agent, out))
    return table, written


def _wire_topdown(ep, by_id: dict, gts: dict, m: dict, agent: str, out: Path) -> Path:
    """Top-down plot of the first episode's path as it crossed the wire."""
    from sim.nav.house import generate_house, parse_scene_id
    from sim.nav.occupancy import grid_for_scene
    from sim.nav.video import save_topdown_plot

    episode = by_id[str(ep.episode_id)]
    gt = gts.get(str(ep.episode_id))
    style, seed = parse_scene_id(ep.scene_id)
    title = (f"{episode.instruction_text}\n{agent} over ROS 2 "
             f"(mean over episodes: SR={m['sr']:.2f} SPL={m['spl']:.2f})")
    return save_topdown_plot(generate_house(seed, style), grid_for_scene(ep.scene_id), ep.positions,
                             gt.locations if gt else episode.reference_path, ep.goal,
                             out / "episode_0_topdown.png", title)


def cmd_demo(args: argparse.Namespace) -> int:
    from training.cli import print_json

    t0 = time.perf_counter()
    out = Path(args.out)
    episodes, gts = _episodes(args, out)
    transport = args.transport
    if transport == "auto":
        try:
            import rclpy  # noqa: F401

            transport = "ros2"
        except ImportError:
            log.warning("rclpy not installed (the ros extra): running the demo in-process")
            transport = "in-process"
    runner = _run_ros if transport == "ros2" else _run_inproc
    table, written = runner(args, episodes, gts, out)
    if not args.json:
        print(f"{'agent':<10}" + "".join(f"{k:>8}" for k in ("SR", "SPL", "OSR", "NE", "nDTW", "SDTW", "TL")))
        for agent, m in table.items():
            print(f"{agent:<10}" + "".join(f"{m[k]:>8.3f}" for k in METRIC_KEYS))
        for p in written:
            print(f"wrote {p}")
    print_json({"transport": transport, "episodes": len(episodes), "condition": args.condition or "normal",
                "metrics": table, "outputs": [str(p) for p in written],
                "seconds": round(time.perf_counter() - t0, 1)})
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    from sim.nav.conditions import available_conditions

    p = sub.add_parser("demo", help="run the demo: generate episodes, evaluate agents, write a video",
                       description="Closed-loop demo on the embedded MuJoCo simulator; outputs go to --out.")
    p.add_argument("--episodes", type=int, default=6, help="number of episodes (default 6)")
    p.add_argument("--agents", nargs="+", default=["oracle", "random"], help="agents to evaluate")
    p.add_argument("--condition", choices=available_conditions(), default=None)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--quality", default="default")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--transport", choices=["auto", "ros2", "in-process"], default="auto",
                   help="ros2: sim_node + vln_node processes over DDS (default when rclpy is installed)")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds allowed per agent over ROS 2")
    p.add_argument("--verbose-nodes", action="store_true", help="show the node processes' output")
    p.add_argument("--json", action="store_true", help="only the JSON result line")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_demo)
