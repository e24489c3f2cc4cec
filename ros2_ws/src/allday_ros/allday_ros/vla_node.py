"""``vla_node`` (lifecycle): serves a manipulation policy as the ``/vla/execute_instruction`` action.

Lifecycle: *configure* builds the policy by name from :data:`VLA_POLICIES` (``scripted_lift``,
``scripted_stack``, ``scripted_pick_place_can``), the publishers and the subscriptions; *activate* starts serving
goals on the action server (allday_interfaces/action/ExecuteInstruction; created at the first activation);
*deactivate* aborts a running goal and rejects new ones; *cleanup* drops the policy, publishers and subscriptions.
The action server itself lives until the node is destroyed: rclpy cannot destroy an action server while a
multi-threaded executor spins (the executor may still hold it for its next wait set, and the process dies with
``RCLError: ... action server pointer is invalid``), so an inactive node keeps it and rejects goals instead.

One goal runs at a time. Per control step the node waits for a new observation (``/camera/color/image_raw``,
``/ee_pose`` and ``/object_poses`` with one stamp, plus ``/manip/status`` for object names and the simulator's
success flag), calls the policy, clamps ``[dx, dy, dz]`` to ``max_delta`` per axis (NaN -> 0) and the gripper to
[-1, 1] (NaN -> 0 = hold), publishes the command on ``/arm_cmd`` (allday_interfaces/ArmCommand: the delta in
metres for this step and the gripper in one message, which is what the arm steps on) and mirrors it on the standard
``/gripper_cmd`` (std_msgs/Float32) and ``/ee_delta_cmd`` (geometry_msgs/TwistStamped) for drivers and recordings
that take those (DDS does not order the two across topics: see docs/ros2.md), then sends feedback (phase, step,
action).
Goals end with success when the status reports success, and abort on timeout, ``max_steps``, a policy that
finished without success, a policy error, or stale input: when any input is older than ``stale_timeout`` the
node publishes a zero delta and aborts with the reason; so does a deactivation or a shutdown (SIGINT/SIGTERM)
mid-goal. ``dry_run`` logs the commands instead of publishing them.
Empty or over-long (> 2000 characters) instructions are rejected by the goal callback (reason in the log).
``camera_frame_id`` (default "": any frame; opt-in, since a robot's frame names need not follow the simulator's)
names the camera the policy must see: when set, images with another ``header.frame_id`` are dropped (logged once
per frame), so the policy is not fed another view (a running goal then aborts on a stale camera). A learned
policy's training camera (``VLAPolicyConfig.camera``) is logged at configure.
With ``autostart`` a refused configure (unknown policy, bad checkpoint) exits with code 2.
Safety status goes to ``/diagnostics`` at 1 Hz.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue  # noqa: E402
from geometry_msgs.msg import PoseArray, PoseStamped, TwistStamped  # noqa: E402
from rclpy.action import ActionServer, CancelResponse, GoalResponse  # noqa: E402
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup  # noqa: E402
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import Float32, String  # noqa: E402

from agents.core.policy import Policy  # noqa: E402
from allday_ros.arm_commands import ArmCommander, stop_arm  # noqa: E402
from allday_ros.arm_observation import ARM_INPUTS, arm_observation  # noqa: E402
from allday_ros.conversions import ImageFormatError, instruction_problem, msg_to_image, stamp_to_ns  # noqa: E402
from allday_ros.interfaces import load_interfaces  # noqa: E402
from allday_ros.policies import VLA_POLICIES  # noqa: E402
from allday_ros.safety import LogOnce, SafetyLayer, VelocityLimits, Watchdog  # noqa: E402
from allday_ros.spin import autostart, run_node  # noqa: E402

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
STATUS_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
ACTION_NAME = "/vla/execute_instruction"


class _GoalEnded(Exception):
    """How a goal ended: ``how`` is succeed / abort / canceled."""

    def __init__(self, success: bool, message: str, how: str, steps: int) -> None:
        super().__init__(message)
        self.success, self.message, self.how, self.steps = success, message, how, steps


class VlaNode(ArmCommander, LifecycleNode):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("vla_node", **kwargs)
        p = self.declare_parameter
        p("policy", "scripted_lift")   # VLA_POLICIES key
        p("checkpoint", "")            # learned policies: a saved policy directory
        p("max_delta", 0.05)           # m per axis per step (safety clamp)
        p("stale_timeout", 0.5)        # s
        p("dry_run", False)
        p("default_timeout_s", 120.0)  # goals with timeout_s <= 0
        p("default_max_steps", 300)    # goals with max_steps <= 0
        p("stop_on_policy_done", True)  # abort when the policy reports phase "done" without success
        p("autostart", False)          # configure + activate at start-up
        p("camera_frame_id", "")       # accept only images with this header.frame_id ("": any)
        self.ExecuteInstruction = load_interfaces().ExecuteInstruction
        self.ArmCommand = load_interfaces("msg").ArmCommand
        self._log_once = LogOnce()
        self._camera_frame = ""  # set at configure from camera_frame_id
        self._cond = threading.Condition()
        self._active = False
        self._goal_running = False
        self._goal_info = "idle"
        self.policy: Policy | None = None
        self.safety: SafetyLayer | None = None
        self._action_server: ActionServer | None = None
        self._subs: list[Any] = []
        self._timers: list[Any] = []
        self._reset_inputs()

    def _reset_inputs(self) -> None:
        with self._cond:
            self._msgs: dict[str, tuple[int, Any]] = {}
            self._status: dict[str, Any] = {}
            self._cam_seq = 0

    # ---- lifecycle -----------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        g = lambda k: self.get_parameter(k).value  # noqa: E731
        try:
            max_delta = float(g("max_delta"))
            self.safety = SafetyLayer(VelocityLimits(max_linear=max_delta, max_angular=1.0),
                                      Watchdog(float(g("stale_timeout")), ARM_INPUTS), dry_run=bool(g("dry_run")))
            self.policy = VLA_POLICIES.get(str(g("policy")))({"max_delta": max_delta, "checkpoint": g("checkpoint")})
        except (KeyError, ValueError, OSError, ImportError) as exc:
            self.get_logger().error(f"configure failed: {exc}")
            self.safety = self.policy = None
            return TransitionCallbackReturn.FAILURE
        self._camera_frame = str(g("camera_frame_id"))  # before the image subscription exists
        self._inputs_group = MutuallyExclusiveCallbackGroup()
        self.pub_arm = self.create_publisher(self.ArmCommand, "/arm_cmd", STATUS_QOS)
        self.pub_delta = self.create_publisher(TwistStamped, "/ee_delta_cmd", STATUS_QOS)
        self.pub_gripper = self.create_publisher(Float32, "/gripper_cmd", STATUS_QOS)
        self.pub_diag = self.create_publisher(DiagnosticArray, "/diagnostics", RELIABLE)
        cg = self._inputs_group
        self._subs = [
            self.create_subscription(Image, "/camera/color/image_raw", self._on_image, RELIABLE, callback_group=cg),
            self.create_subscription(PoseStamped, "/ee_pose", self._on_ee, RELIABLE, callback_group=cg),
            self.create_subscription(PoseArray, "/object_poses", self._on_objects, RELIABLE, callback_group=cg),
            self.create_subscription(String, "/manip/status", self._on_status, STATUS_QOS, callback_group=cg),
        ]
        self._timers = [self.create_timer(1.0, self._publish_diag, callback_group=cg)]
        trained_on = getattr(getattr(self.policy, "config", None), "camera", "")
        self.get_logger().info(f"configured policy={g('policy')} max_delta={max_delta} dry_run={g('dry_run')}"
                               + (f" trained_on_camera={trained_on}" if trained_on else "")
                               + (f" camera_frame_id={self._camera_frame}" if self._camera_frame else ""))
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._reset_inputs()
        if self._action_server is None:
            self._action_server = ActionServer(
                self, self.ExecuteInstruction, ACTION_NAME, self._execute, goal_callback=self._on_goal,
                cancel_callback=self._on_cancel, callback_group=ReentrantCallbackGroup())
        self._active = True
        self.get_logger().info(f"active: serving {ACTION_NAME}")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_goals()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_goals()
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_goals()
        self._teardown()
        return TransitionCallbackReturn.SUCCESS

    def _stop_goals(self, wait_s: float = 3.0) -> None:
        """Stop serving: new goals are rejected; a running goal aborts at its next check (<= 0.1 s)."""
        with self._cond:
            self._active = False
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._goal_running, timeout=wait_s)

    def _teardown(self) -> None:
        for s in self._subs:
            self.destroy_subscription(s)
        for t in self._timers:
            self.destroy_timer(t)
        with self._cond:  # a goal thread that outlived _stop_goals' wait publishes under the same lock
            for name in ("pub_arm", "pub_delta", "pub_gripper", "pub_diag"):
                pub = getattr(self, name, None)
                if pub is not None:
                    self.destroy_publisher(pub)
                    setattr(self, name, None)
        self._subs, self._timers, self.policy, self.safety = [], [], None, None
        self._camera_frame = ""

    # ---- inputs --------------------------------------------------------------------------------
    def _store(self, name: str, stamp: int, value: Any) -> None:
        with self._cond:
            if self.safety is not None:
                self.safety.watchdog.feed(name, time.monotonic())
            self._msgs[name] = (stamp, value)
            self._cam_seq += name == "camera"
            self._cond.notify_all()

    def _on_image(self, msg: Image) -> None:
        want = self._camera_frame
        if want and msg.header.frame_id != want:
            self._log_once(self.get_logger(), f"frame-{msg.header.frame_id}",
                           f"dropped camera image from frame {msg.header.frame_id!r}: this policy takes "
                           f"camera_frame_id {want!r}")
            return
        try:
            rgb = msg_to_image(msg, expected_encoding="rgb8")
        except ImageFormatError as exc:
            self._log_once(self.get_logger(), f"image-{msg.encoding}", f"dropped camera image: {exc}")
            return
        self._store("camera", stamp_to_ns(msg.header.stamp), np.array(rgb))

    def _on_ee(self, msg: PoseStamped) -> None:
        p, q = msg.pose.position, msg.pose.orientation
        pos = np.array([p.x, p.y, p.z], dtype=np.float64)
        if not np.isfinite(pos).all():
            self._log_once(self.get_logger(), "ee-nan", "dropped a non-finite /ee_pose")
            return
        self._store("ee_pose", stamp_to_ns(msg.header.stamp), (pos, np.array([q.x, q.y, q.z, q.w])))

    def _on_objects(self, msg: PoseArray) -> None:
        pts = [np.array([p.position.x, p.position.y, p.position.z], dtype=np.float64) for p in msg.poses]
        self._store("object_poses", stamp_to_ns(msg.header.stamp), pts)

    def _on_status(self, msg: String) -> None:
        try:
            st = json.loads(msg.data)
            if not isinstance(st, dict):
                raise ValueError("not a JSON object")
        except (json.JSONDecodeError, ValueError) as exc:
            self._log_once(self.get_logger(), "status", f"dropped malformed /manip/status: {exc}")
            return
        with self._cond:
            self._status = st
            self._cond.notify_all()

    # ---- the action ----------------------------------------------------------------------------
    def _on_goal(self, goal: Any) -> GoalResponse:
        why = instruction_problem(goal.instruction)
        if why is not None:
            self.get_logger().warning(f"rejected goal: {why}")
            return GoalResponse.REJECT
        for name, v in (("timeout_s", goal.timeout_s), ("max_steps", goal.max_steps)):
            if not math.isfinite(v):
                self.get_logger().warning(f"rejected goal: {name} is not finite")
                return GoalResponse.REJECT
        with self._cond:
            if not self._active or self.policy is None:
                self.get_logger().warning("rejected goal: node is not active")
                return GoalResponse.REJECT
            if self._goal_running:
                self.get_logger().warning(f"rejected goal: another goal is running ({self._goal_info})")
                return GoalResponse.REJECT
            self._goal_running = True  # reserved until _execute ends
        return GoalResponse.ACCEPT

    def destroy_node(self) -> None:
        """Destroy the action server too (call after the executor has stopped spinning, as main() does)."""
        with self._cond:
            self._active = False
            self._cond.notify_all()
        if self._action_server is not None:
            self._action_server.destroy()
            self._action_server = None
        super().destroy_node()

    def _on_cancel(self, goal_handle: Any) -> CancelResponse:
        return CancelResponse.ACCEPT

    def _execute(self, goal_handle: Any) -> Any:
        goal = goal_handle.request
        g = lambda k: self.get_parameter(k).value  # noqa: E731
        timeout = float(goal.timeout_s) if goal.timeout_s > 0 else float(g("default_timeout_s"))
        max_steps = int(goal.max_steps) if goal.max_steps > 0 else int(g("default_max_steps"))
        instruction = goal.instruction.strip()
        Result = self.ExecuteInstruction.Result
        step = 0
        try:
            self.policy.reset()
            self.get_logger().info(f"goal: {instruction!r} (timeout {timeout:.0f} s, max {max_steps} steps)")
            self._run(goal_handle, instruction, timeout, max_steps)  # ends by raising _GoalEnded
        except _GoalEnded as end:
            step = end.steps
            if end.how == "succeed":
                goal_handle.succeed()
            elif end.how == "canceled":
                goal_handle.canceled()
            else:
                goal_handle.abort()
            self.get_logger().info(f"goal {end.how}: {end.message}")
            return Result(success=end.success, message=end.message, steps=step)
        except Exception as exc:  # a policy bug must not kill the node: stop and report
            self._send_zero(f"policy error: {exc}")
            goal_handle.abort()
            self.get_logger().error(f"goal aborted, policy error: {type(exc).__name__}: {exc}")
            return Result(success=False, message=f"policy error: {type(exc).__name__}: {exc}", steps=step)
        finally:
            with self._cond:
                self._goal_running = False
                self._goal_info = "idle"
                self._cond.notify_all()

    def _run(self, goal_handle: Any, instruction: str, timeout: float, max_steps: int) -> None:
        """The control loop of one goal; always ends by raising :class:`_GoalEnded`."""
        from sim.manip.action import EEDeltaAction

        _end = _GoalEnded
        t0 = time.monotonic()
        last_stamp = -1
        last_cam = -1
        step = 0
        dry_run = self.safety.dry_run
        grace = self.safety.watchdog.timeout_s  # inputs may still be arriving right after activation
        stop_on_done = bool(self.get_parameter("stop_on_policy_done").value)
        while True:
            # wait (in <= 0.1 s slices) for a new complete observation, watching cancel, deactivation, staleness
            with self._cond:
                while True:
                    now = time.monotonic()
                    if goal_handle.is_cancel_requested:
                        self._send_zero("goal canceled")
                        raise _end(False, f"canceled after {step} steps", "canceled", step)
                    if not self._active:
                        self._send_zero("node deactivated")
                        raise _end(False, f"node deactivated after {step} steps", "abort", step)
                    if now - t0 > timeout:
                        self._send_zero("goal timeout")
                        raise _end(False, f"timeout after {timeout:.1f} s ({step} steps)", "abort", step)
                    stale = self.safety.watchdog.stale(now) if now - t0 > grace else []
                    if stale:
                        reason = "; ".join(self.safety.watchdog.describe(n, now) for n in stale)
                        self._send_zero(f"stale input ({reason})")
                        raise _end(False, f"stale input, stopped: {reason}", "abort", step)
                    # object names come with the status: give it the grace period, then go on without it
                    got = arm_observation(self._msgs, self._status, instruction, step, wait_status=now - t0 <= grace)
                    # lockstep: a new stamp is a new state; in dry_run nothing moves, so a new camera frame will do
                    if got is not None and (got[0] > last_stamp or (dry_run and self._cam_seq != last_cam)):
                        break
                    self._cond.wait(timeout=0.1)
                stamp, obs = got
                last_stamp, last_cam = stamp, self._cam_seq
                self._goal_info = f"{instruction[:40]!r} step {step}"
            if obs["success"]:
                raise _end(True, f"task succeeded after {step} steps", "succeed", step)
            if step >= max_steps:
                self._send_zero("max_steps reached")
                raise _end(False, f"max_steps {max_steps} reached without success", "abort", step)
            action = EEDeltaAction.parse(self.policy.act(obs), phase=str(getattr(self.policy, "phase", "")))
            if action.phase == "done" and stop_on_done:
                if not obs["status_known"]:
                    raise _end(True, f"policy finished after {step} steps (no success signal)", "succeed",
                                    step)
                self._send_zero("policy done")
                raise _end(False, f"policy finished after {step} steps without success", "abort", step)
            sent = self._send(action.delta, action.gripper, action.phase)
            if sent is None:  # deactivated (or torn down) while the policy was acting: nothing was sent
                self._send_zero("node deactivated")
                raise _end(False, f"node deactivated after {step} steps", "abort", step)
            step += 1
            fb = self.ExecuteInstruction.Feedback(subtask=action.phase, step=step, action=[float(v) for v in sent])
            goal_handle.publish_feedback(fb)

    def _publish_diag(self) -> None:
        if self.safety is None or getattr(self, "pub_diag", None) is None:
            return
        now = time.monotonic()
        status = self.safety.diagnostic_status(now, "vla_node: safety", "allday")
        if not self._goal_running and status.level == DiagnosticStatus.ERROR and self.safety.watchdog.stale(now):
            status.level = DiagnosticStatus.WARN  # stale inputs only matter while a goal runs
        status.values += [KeyValue(key="policy", value=str(self.get_parameter("policy").value)),
                          KeyValue(key="active", value=str(self._active).lower()),
                          KeyValue(key="goal", value=self._goal_info)]
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        arr.status = [status]
        self.pub_diag.publish(arr)


def main(args: list[str] | None = None) -> None:
    run_node(VlaNode, args, "vla_node", on_start=autostart, threads=4, on_exit=stop_arm)


if __name__ == "__main__":
    main()
