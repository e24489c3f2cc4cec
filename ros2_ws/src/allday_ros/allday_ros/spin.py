"""The standard node entry point: init, build, spin, and always destroy + try_shutdown."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor


def run_node(factory: Callable[[], Any], args: list[str] | None = None, name: str = "node",
             on_start: Callable[[Any], None] | None = None, threads: int = 1) -> None:
    """Run one node until Ctrl-C or an external shutdown. A failing constructor (bad parameters) prints one
    line and exits with code 2; ``on_start(node)`` runs before spinning (e.g. lifecycle autostart);
    ``threads > 1`` spins a MultiThreadedExecutor (action servers with long-running goals)."""
    rclpy.init(args=args)
    try:
        node = factory()
    except (ValueError, OSError, KeyError, RuntimeError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        rclpy.try_shutdown()
        raise SystemExit(2) from None
    executor = MultiThreadedExecutor(num_threads=threads) if threads > 1 else SingleThreadedExecutor()
    try:
        executor.add_node(node)
        if on_start is not None:
            on_start(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
