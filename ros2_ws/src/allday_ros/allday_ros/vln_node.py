"""``vln_node`` (lifecycle): serves a navigation policy from ``agents`` over ROS 2.

Subscribes ``/camera/color/image_raw`` (rgb8), ``/camera/depth/image_raw`` (32FC1), ``/odom``,
``/instruction`` (transient local) and ``/episode/status``; acts once per new camera frame and publishes
the discrete action on ``/nav/action`` and the matching, clamped velocity on ``/cmd_vel``. A watchdog
publishes zero velocity when camera or instruction input is older than ``stale_timeout`` (0.5 s).
``dry_run`` computes and logs actions without commanding the robot. Status goes to ``/diagnostics``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import Twist  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup  # noqa: E402
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import Int8, String  # noqa: E402

from agents.core.types import NavAction, Observation  # noqa: E402
from allday_ros.conversions import (  # noqa: E402
    ImageFormatError,
    action_to_twist,
    instruction_problem,
    msg_to_image,
    odometry_to_pose,
    stamp_to_ns,
)
from allday_ros.policies import EpisodeAwarePolicy, make_policy  # noqa: E402
from allday_ros.safety import (  # noqa: E402
    LogOnce,
    SafetyLayer,
    VelocityLimits,
    Watchdog,
    policy_status,
    zero_twist,
)
from allday_ros.spin import autostart, run_node  # noqa: E402

LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
STATUS_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)


class VlnNode(LifecycleNode):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("vln_node", **kwargs)
        p = self.declare_parameter
        p("agent", "oracle")          # registry name in allday_ros.policies
        p("checkpoint", "")           # learned agents: a saved policy directory
        p("device", "cpu")
        p("rate", 0.0)                # max decisions per second (0: every new frame)
        p("quantization", "none")     # none | int8 | int4 (applies to learned agents)
        p("max_linear", 0.5)          # m/s
        p("max_angular", 1.0)         # rad/s
        p("control_period", 0.5)      # s: one discrete action as a velocity over this period
        p("stale_timeout", 0.5)       # s
        p("dry_run", False)
        p("autostart", False)         # configure + activate at start-up
        p("forward_step", 0.25)
        p("turn_angle_deg", 15.0)
        p("seed", 0)
        p("forward_steps", 37)        # the forward baseline: steps before STOP
        p("watchdog_inputs", ["camera", "instruction"])  # robots with a one-shot instruction: ["camera"]
        p("routing_fallback", "checkpoint")  # TuKA agents: true | false | checkpoint (keep the saved setting)
        self._log_once = LogOnce()
        self._active = False
        self.policy = None
        self.safety: SafetyLayer | None = None
        self._reset_inputs()

    def _reset_inputs(self) -> None:
        self._image: tuple[int, np.ndarray] | None = None
        self._depth: np.ndarray | None = None
        self._pose: tuple[int, Any] | None = None
        self._instruction: str | None = None
        self._statuses: dict[int, dict[str, Any]] = {}  # frame stamp -> episode status of that frame
        self._episode_id: Any = None
        self._last_acted_ns = -1
        self._last_decision = 0.0
        self._last_cmd_time: float | None = None

    # ---- lifecycle -----------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        g = lambda k: self.get_parameter(k).value  # noqa: E731
        try:
            for k in ("forward_step", "turn_angle_deg", "control_period"):
                if not float(g(k)) > 0:
                    raise ValueError(f"{k} must be > 0, got {g(k)}")
            limits = VelocityLimits(float(g("max_linear")), float(g("max_angular")))
            watched = tuple(str(n) for n in g("watchdog_inputs"))
            if not watched or not set(watched) <= {"camera", "instruction"}:
                raise ValueError(f"watchdog_inputs must be a non-empty subset of camera, instruction: {watched}")
            self.safety = SafetyLayer(limits, Watchdog(float(g("stale_timeout")), watched),
                                      dry_run=bool(g("dry_run")))
            params = {k: g(k) for k in ("checkpoint", "device", "quantization", "forward_step", "turn_angle_deg",
                                        "seed", "forward_steps")}
            fallback = str(g("routing_fallback")).strip().lower()
            if fallback not in ("true", "false", "checkpoint"):
                raise ValueError(f"routing_fallback must be true, false or checkpoint, got {fallback!r}")
            if fallback != "checkpoint":
                params["routing_fallback"] = fallback == "true"
            self.policy = make_policy(str(g("agent")), params)
        except (KeyError, ValueError, OSError) as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.pub_action = self.create_publisher(Int8, "/nav/action", STATUS_QOS)
        self.pub_cmd = self.create_publisher(Twist, "/cmd_vel", RELIABLE)
        self.pub_diag = self.create_publisher(DiagnosticArray, "/diagnostics", RELIABLE)
        self._subs = [
            self.create_subscription(Image, "/camera/color/image_raw", self._on_image, RELIABLE),
            self.create_subscription(Image, "/camera/depth/image_raw", self._on_depth, RELIABLE),
            self.create_subscription(Odometry, "/odom", self._on_odom, STATUS_QOS),
            self.create_subscription(String, "/instruction", self._on_instruction, LATCHED),
            self.create_subscription(String, "/episode/status", self._on_status, STATUS_QOS),
        ]
        # the watchdog has its own callback group: spin vln_node with a MultiThreadedExecutor for slow policies
        watchdog_group = MutuallyExclusiveCallbackGroup()
        self._timers = [self.create_timer(0.05, self._watchdog_tick, callback_group=watchdog_group),
                        self.create_timer(1.0, self._publish_diag, callback_group=watchdog_group)]
        self.get_logger().info(f"configured agent={g('agent')} dry_run={g('dry_run')}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = True
        instruction = self._instruction  # latched: not re-delivered to this subscription
        self._reset_inputs()
        self._instruction = instruction
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        self._send(zero_twist(), None)
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        for s in getattr(self, "_subs", []):
            self.destroy_subscription(s)
        for t in getattr(self, "_timers", []):
            self.destroy_timer(t)
        for pub in ("pub_action", "pub_cmd", "pub_diag"):
            if hasattr(self, pub):
                self.destroy_publisher(getattr(self, pub))
                delattr(self, pub)
        self._subs, self._timers, self.policy = [], [], None
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._active:
            self._send(zero_twist(), None)
        return TransitionCallbackReturn.SUCCESS

    # ---- inputs --------------------------------------------------------------------------------
    def _now(self) -> float:
        return time.monotonic()

    def _on_image(self, msg: Image) -> None:
        stamp = stamp_to_ns(msg.header.stamp)
        try:
            rgb = msg_to_image(msg, expected_encoding="rgb8")
        except ImageFormatError as exc:
            self._log_once(self.get_logger(), f"image-{msg.encoding}-{msg.width}x{msg.height}",
                           f"dropped camera image: {exc}")
            self._stop_robot()
            return
        if self._image is not None and stamp < self._image[0]:
            self._log_once(self.get_logger(), "image-order", "dropped an out-of-order camera image (older stamp)")
            return
        self._image = (stamp, rgb)
        self.safety.watchdog.feed("camera", self._now())
        self._try_act()

    def _on_depth(self, msg: Image) -> None:
        try:
            self._depth = msg_to_image(msg, expected_encoding="32FC1")
        except ImageFormatError as exc:
            self._log_once(self.get_logger(), "depth", f"dropped depth image: {exc}")

    def _on_odom(self, msg: Odometry) -> None:
        try:
            pose = odometry_to_pose(msg)
        except ValueError as exc:
            self._log_once(self.get_logger(), "odom", f"dropped odometry: {exc}")
            return
        stamp = stamp_to_ns(msg.header.stamp)
        if self._pose is None or stamp >= self._pose[0]:
            self._pose = (stamp, pose)
            self._try_act()

    def _on_instruction(self, msg: String) -> None:
        why = instruction_problem(msg.data)
        if why is not None:
            self._log_once(self.get_logger(), f"instr-{why.startswith('empty')}", f"rejected /instruction: {why}")
            self._instruction = None
            self._stop_robot()
            return
        self._instruction = msg.data.strip()
        if "instruction" in self.safety.watchdog.inputs:
            self.safety.watchdog.feed("instruction", self._now())
        self._try_act()

    def _on_status(self, msg: String) -> None:
        try:
            st = json.loads(msg.data)
            stamp = int(st["stamp_ns"]) if "stamp_ns" in st else None
        except (json.JSONDecodeError, TypeError, ValueError, OverflowError):
            self._log_once(self.get_logger(), "status", "dropped malformed /episode/status (not JSON)")
            return
        if stamp is None:
            return
        self._statuses[stamp] = st
        if len(self._statuses) > 64:
            for k in sorted(self._statuses)[:-32]:
                del self._statuses[k]
        self._try_act()

    def _episode_of(self, stamp: int) -> dict[str, Any] | None:
        """The simulator's status for the frame ``stamp``; starts the policy's episode when it changes."""
        st = self._statuses.get(stamp)
        if st is None:
            return None
        if st.get("episode_id") != self._episode_id:
            self._episode_id = st.get("episode_id")
            self.policy.reset()
            if isinstance(self.policy, EpisodeAwarePolicy):
                self.policy.on_episode(st)
        return st

    # ---- acting --------------------------------------------------------------------------------
    def _try_act(self) -> None:
        if not self._active or self._image is None or self._instruction is None:
            return
        stamp, rgb = self._image
        if stamp <= self._last_acted_ns:
            return
        # in simulation every frame has a status: act only on frames of a running episode, and (for policies
        # that need the pose, like the oracle) only once this frame's odometry has arrived too
        needs_status = isinstance(self.policy, EpisodeAwarePolicy) or self._statuses
        if needs_status:
            try:
                st = self._episode_of(stamp)
            except Exception as exc:  # noqa: BLE001 - a bad status must stop the robot, not the node
                self._log_once(self.get_logger(), "episode", f"cannot start the episode, stopping the robot: {exc}")
                self._statuses.pop(stamp, None)
                self._stop_robot()
                return
            if st is None or st.get("done") or st.get("finished"):
                return
            if isinstance(self.policy, EpisodeAwarePolicy) and (self._pose is None or self._pose[0] != stamp):
                return
        rate = float(self.get_parameter("rate").value)
        if rate > 0 and self._now() - self._last_decision < 1.0 / rate:
            return
        if self.safety.watchdog.stale(self._now()):
            return
        pose = self._pose[1] if self._pose is not None else None
        from agents.core.types import Pose

        obs = Observation(rgb=rgb, depth=self._depth if self._depth is not None and
                          self._depth.shape == rgb.shape[:2] else None,
                          pose=pose or Pose((0.0, 0.0, 0.0), 0.0), instruction=self._instruction)
        g = lambda k: float(self.get_parameter(k).value)  # noqa: E731
        try:
            action = NavAction.parse(self.policy.act(obs))
            twist = action_to_twist(action, g("forward_step"), g("turn_angle_deg"), g("control_period"))
        except Exception as exc:  # noqa: BLE001 - any policy failure stops the robot, the node keeps running
            self._log_once(self.get_logger(), "policy", f"policy failed, stopping the robot: {exc}")
            self._stop_robot()
            return
        self._last_acted_ns = stamp
        self._last_decision = self._now()
        self._send(twist, action)
        self._last_cmd_time = self._now()

    def _send(self, twist: Twist, action: NavAction | None) -> None:
        if self.safety is None or not hasattr(self, "pub_cmd"):
            return
        now = self._now()
        stale = self.safety.watchdog.stale(now)
        safe, reasons = self.safety.filter(twist, now)
        if reasons and not stale:
            self._log_once(self.get_logger(), "clamp", f"velocity limited: {reasons[0]}")
        if self.safety.dry_run:
            self.get_logger().info(f"dry_run: action={action} linear={safe.linear.x:.3f} angular={safe.angular.z:.3f}")
            return
        if action is not None and not stale:
            self.pub_action.publish(Int8(data=int(action)))
        self.pub_cmd.publish(safe)

    def _stop_robot(self) -> None:
        if self.safety is not None and not self.safety.dry_run and hasattr(self, "pub_cmd"):
            self.pub_cmd.publish(zero_twist())

    def _watchdog_tick(self) -> None:
        if not self._active or self.safety is None:
            return
        now = self._now()
        stale = self.safety.watchdog.stale(now)
        if stale:
            self._log_once(self.get_logger(), "stale", f"inputs stale ({', '.join(stale)}): zero velocity")
            self._stop_robot()
        else:
            self._log_once.reset("stale")
        # one action is a velocity over control_period: after that the robot stops until the next decision
        period = float(self.get_parameter("control_period").value)
        if self._last_cmd_time is not None and now - self._last_cmd_time > period:
            self._last_cmd_time = None
            self._stop_robot()

    def _publish_diag(self) -> None:
        if self.safety is None or not hasattr(self, "pub_diag"):
            return
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        arr.status = [self.safety.diagnostic_status(self._now(), "vln_node: safety", "allday")]
        report = getattr(self.policy, "diagnostics", None)
        if callable(report):
            arr.status.append(policy_status(report()))
        self.pub_diag.publish(arr)


def _stop(node: VlnNode) -> None:
    """On shutdown: zero velocity, and wait (bounded) until subscribers acknowledged it before the node goes."""
    if node._active:
        node._stop_robot()
        if hasattr(node, "pub_cmd"):
            from rclpy.duration import Duration

            node.pub_cmd.wait_for_all_acked(Duration(seconds=1.0))


def main(args: list[str] | None = None) -> None:
    run_node(VlnNode, args, "vln_node", on_start=autostart, on_exit=_stop)


if __name__ == "__main__":
    main()
