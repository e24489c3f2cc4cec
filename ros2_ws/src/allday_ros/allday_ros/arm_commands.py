"""How ``vla_node`` commands the arm: clamp, publish on ``/arm_cmd`` and its standard-topic mirrors, stop.

:class:`ArmCommander` is a mixin of the node (it uses the node's lock ``_cond``, ``_active``, ``safety``,
``_log_once`` and the publishers ``pub_arm`` / ``pub_gripper`` / ``pub_delta``); :func:`stop_arm` is its shutdown hook
for :func:`allday_ros.spin.run_node`.
"""

from __future__ import annotations

import time
from typing import Any

from geometry_msgs.msg import Twist, TwistStamped
from std_msgs.msg import Float32


class ArmCommander:
    """The command side of ``VlaNode`` (a mixin: see the module docstring)."""

    def _send(self, delta: Any, gripper: float, phase: str = "") -> list[float] | None:
        """Clamp and publish one command; returns what was sent ([dx, dy, dz, gripper]), None when the node is no
        longer active (nothing published)."""
        from sim.manip.action import sanitize_gripper

        tw = Twist()
        tw.linear.x, tw.linear.y, tw.linear.z = (float(v) for v in delta)
        safe, reason = self.safety.clamp(tw, time.monotonic())  # limits only: _run handles staleness itself
        if reason:
            self._log_once(self.get_logger(), "clamp-nan" if "non-finite" in reason else "clamp",
                           f"ee delta {reason} (max_delta {self.safety.limits.max_linear:g} m)")
        g, fault = sanitize_gripper(gripper)  # the simulator's rule: NaN -> 0 (hold), clamp to [-1, 1]
        if fault is not None:
            self._log_once(self.get_logger(), fault.kind, f"gripper command: {fault.detail}")
        out = [safe.linear.x, safe.linear.y, safe.linear.z, g]
        if self.safety.dry_run:
            self.get_logger().info(f"dry_run [{phase}]: delta=({out[0]:+.4f}, {out[1]:+.4f}, {out[2]:+.4f}) m "
                                   f"gripper={g:+.2f}")
            return out
        return out if self._publish_command(out[:3], g) else None

    def _publish_command(self, delta: list[float], gripper: float, stop: bool = False) -> bool:
        """One command: ``/arm_cmd`` (delta and gripper together), then the standard-topic mirrors.

        Runs under the node's lock, so a lifecycle teardown cannot destroy the publishers half-way; a motion command
        (not ``stop``) after deactivation is dropped. Returns whether it was published."""
        with self._cond:
            pubs = tuple(getattr(self, n, None) for n in ("pub_arm", "pub_gripper", "pub_delta"))
            if any(p is None for p in pubs) or not (stop or self._active):
                return False
            cmd = self.ArmCommand()
            cmd.header.stamp, cmd.header.frame_id = self.get_clock().now().to_msg(), "world"
            cmd.delta.x, cmd.delta.y, cmd.delta.z = (float(v) for v in delta)
            cmd.gripper = float(gripper)
            tw = TwistStamped()
            tw.header = cmd.header
            tw.twist.linear = cmd.delta
            pubs[0].publish(cmd)
            pubs[1].publish(Float32(data=cmd.gripper))
            pubs[2].publish(tw)
            return True

    def _send_zero(self, reason: str) -> None:
        self.get_logger().warning(f"{reason}: zero delta")
        if self.safety is not None and not self.safety.dry_run:
            self._publish_command([0.0, 0.0, 0.0], 0.0, stop=True)  # gripper 0 holds it as it is


def stop_arm(node: Any) -> None:
    """On shutdown (SIGINT/SIGTERM): no motion command goes out any more, a running goal's arm gets a zero delta,
    and the node waits (bounded) until subscribers acknowledged it before it goes."""
    with node._cond:
        running, node._active = node._goal_running, False  # the goal thread's next motion command is dropped
        node._cond.notify_all()
    if running:
        node._send_zero("shutting down")
        pub = getattr(node, "pub_arm", None)
        if pub is not None:
            from rclpy.duration import Duration

            pub.wait_for_all_acked(Duration(seconds=1.0))
