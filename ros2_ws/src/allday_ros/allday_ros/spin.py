"""The standard node entry point: init, build, spin, and always destroy + try_shutdown."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.exceptions import InvalidHandle
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

MAX_INVALID_HANDLE_RETRIES = 1000
#: longest the spin loop stays inside rcl_wait: Python runs signal handlers only between bytecodes, so a node with
#: nothing to wake it (an unconfigured lifecycle node has no timer) would otherwise never see SIGINT / SIGTERM
SIGNAL_POLL_S = 0.2


def spin(executor: Executor, max_retries: int = MAX_INVALID_HANDLE_RETRIES) -> int:
    """``executor.spin()`` that survives an entity destroyed while another thread builds the wait set.

    rclpy (9.1) marks a QoS event handler in use while the executor gathers its wait set, but a publisher or
    subscription destroyed in that window (a lifecycle *cleanup* running on a worker thread of a
    MultiThreadedExecutor) makes ``add_to_wait_set`` raise ``InvalidHandle: cannot use Destroyable because
    destruction was requested``, and ``executor.spin()`` lets it kill the node. The destroyed entity has already
    left the node's lists, so the next ``spin_once`` builds a clean wait set: retry, and give up only after
    ``max_retries`` such errors in a row. Each wait is bounded by :data:`SIGNAL_POLL_S` so that a signal is handled
    even when no callback is due. Returns how many were absorbed."""
    absorbed = in_a_row = 0
    while executor.context.ok() and not getattr(executor, "_is_shutdown", False):  # spin()'s own condition
        try:
            executor.spin_once(timeout_sec=SIGNAL_POLL_S)
        except InvalidHandle:
            absorbed += 1
            in_a_row += 1
            if in_a_row > max_retries:
                raise
            continue
        in_a_row = 0
    return absorbed


def autostart(node: Any) -> None:
    """Lifecycle autostart (an ``on_start`` for :func:`run_node`): when the node's ``autostart`` parameter is set,
    configure and activate it. A refused configure exits with code 2, so a launcher sees a required node exit
    instead of a silent, unconfigured node."""
    if not bool(node.get_parameter("autostart").value):
        return
    from rclpy.lifecycle import TransitionCallbackReturn

    if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
        print(f"{node.get_name()}: configure failed (reason in the log above)", file=sys.stderr)
        raise SystemExit(2)
    node.trigger_activate()


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
        spin(executor)
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
