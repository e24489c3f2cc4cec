"""The standard node entry point: init, build, spin, and always destroy + try_shutdown."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def run_node(factory: Callable[[], Any], args: list[str] | None = None, name: str = "node",
             on_start: Callable[[Any], None] | None = None, threads: int = 1,
             on_exit: Callable[[Any], None] | None = None) -> None:
    """Run one node until Ctrl-C or an external shutdown. A failing constructor (bad parameters) prints one
    line and exits with code 2; ``on_start(node)`` runs before spinning (e.g. lifecycle autostart);
    ``threads > 1`` spins a MultiThreadedExecutor (action servers with long-running goals); ``on_exit(node)``
    runs while the context is still valid (robot-facing nodes send their stop command there). rclpy's own
    signal handlers would invalidate the context first, so SIGINT/SIGTERM become KeyboardInterrupt instead."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    # a node started from a non-interactive shell's background job inherits SIGINT ignored; launchers stop nodes
    # with SIGINT, so restore it (otherwise they hang until SIGKILL and the robot gets no stop command)
    signal.signal(signal.SIGINT, _raise_interrupt)
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
        if on_exit is not None:
            try:
                on_exit(node)
            except Exception as exc:  # noqa: BLE001 - shutdown must go on
                print(f"{name}: stop hook failed: {exc}", file=sys.stderr)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
