"""``sim_node``: the embedded navigation simulator as a stand-in robot.

Publishes RGB (rgb8), depth (32FC1, metres), camera info, odometry, the instruction (transient local)
and a JSON episode status; steps the env once per command (lockstep). Commands come from the discrete
action topic ``/nav/action`` (std_msgs/Int8: 0 STOP, 1 FORWARD, 2 LEFT, 3 RIGHT) or, with
``command_source: cmd_vel``, from ``/cmd_vel`` integrated into discrete steps (0.25 m, 15 deg).
Services: ``/sim/reset`` (std_srvs/Trigger, next episode) and ``/sim/set_condition``
(allday_interfaces/SetCondition, when built); the ``condition`` parameter does the same.
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

from geometry_msgs.msg import Twist  # noqa: E402
from nav_msgs.msg import Odometry  # noqa: E402
from rcl_interfaces.msg import SetParametersResult  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import CameraInfo, Image  # noqa: E402
from std_msgs.msg import Int8, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from agents.core.types import NavAction  # noqa: E402
from allday_ros.conversions import CmdVelIntegrator, image_to_msg, pose_to_odometry, stamp_to_ns  # noqa: E402
from allday_ros.safety import LogOnce  # noqa: E402
from allday_ros.spin import run_node  # noqa: E402

log = logging.getLogger(__name__)

LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
STATUS_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)


class SimNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("sim_node", **kwargs)
        p = self.declare_parameter
        p("episodes", "")            # dataset root / split dir; empty: generate episodes
        p("split", "")
        p("scenes", 2)
        p("per_scene", 3)
        p("seed", 0)
        p("condition", "")           # empty: each episode's own (normal by default)
        p("width", 224)
        p("height", 224)
        p("quality", "default")
        p("publish_rate", 10.0)      # Hz re-publication of the current frame (keeps watchdogs fed)
        p("command_source", "action")  # action | cmd_vel
        p("cmd_vel_hold", 0.5)         # s each /cmd_vel message is applied for (vln_node's control_period)
        p("auto_reset", True)        # start the next episode when one ends
        p("loop_episodes", False)    # after the last episode start again (else publish status finished)
        p("frame_id", "camera_color_optical_frame")
        p("wait_for_subscribers", 0)  # start the first episode once /episode/status has this many subscribers
        self._log_once = LogOnce()
        self._env = self._make_env()
        self._index = 0
        self._finished = False
        self._episode_metrics: list[dict[str, Any]] = []
        self._integrator = CmdVelIntegrator(self._env.config.forward_step, self._env.config.turn_angle_deg)

        self.pub_rgb = self.create_publisher(Image, "/camera/color/image_raw", RELIABLE)
        self.pub_depth = self.create_publisher(Image, "/camera/depth/image_raw", RELIABLE)
        self.pub_info = self.create_publisher(CameraInfo, "/camera/color/camera_info", RELIABLE)
        self.pub_odom = self.create_publisher(Odometry, "/odom", STATUS_QOS)
        self.pub_instr = self.create_publisher(String, "/instruction", LATCHED)
        self.pub_status = self.create_publisher(String, "/episode/status", STATUS_QOS)
        self.create_subscription(Int8, "/nav/action", self._on_action, STATUS_QOS)
        self.create_subscription(Twist, "/cmd_vel", self._on_cmd_vel, RELIABLE)
        self.create_service(Trigger, "/sim/reset", self._on_reset)
        self._make_condition_service()
        self.add_on_set_parameters_callback(self._on_params)
        self.add_post_set_parameters_callback(self._after_params)
        rate = float(self.get_parameter("publish_rate").value)
        if rate > 0:
            self.create_timer(1.0 / rate, self._republish)
        self._started = False
        self._start_timer = self.create_timer(0.05, self._maybe_start)

    def _maybe_start(self) -> None:
        """Start the first episode once enough consumers (agent, evaluator) are matched."""
        need = int(self.get_parameter("wait_for_subscribers").value)
        if self.pub_status.get_subscription_count() < need:
            return
        self._start_timer.cancel()
        self._started = True
        self._reset_episode()

    # ---- setup ---------------------------------------------------------------------------------
    def _make_env(self):
        from sim.core.env import NavEnvConfig
        from sim.core.episodes import load_split
        from sim.nav.env import MujocoNavEnv
        from sim.nav.episode_gen import generate_episodes, scene_list

        g = lambda k: self.get_parameter(k).value  # noqa: E731
        cfg = NavEnvConfig(width=int(g("width")), height=int(g("height")), quality=str(g("quality")),
                           condition=str(g("condition")) or None)
        if g("episodes"):
            episodes, gts = load_split(g("episodes"), g("split") or None)
        else:
            episodes, gts, _ = generate_episodes(scene_list(int(g("scenes")), seed=int(g("seed"))),
                                                 int(g("per_scene")), seed=int(g("seed")), progress=False)
        self.get_logger().info(f"{len(episodes)} episodes, condition={cfg.condition or 'per-episode'}")
        return MujocoNavEnv(cfg, episodes, gts)

    def _make_condition_service(self) -> None:
        try:
            from allday_ros.interfaces import load_interfaces

            self.create_service(load_interfaces("srv").SetCondition, "/sim/set_condition", self._on_set_condition)
        except (ImportError, RuntimeError) as exc:  # not built, or its type support libraries not on the path
            self.get_logger().warning(f"/sim/set_condition unavailable ({type(exc).__name__}: {exc}); "
                                      "use the 'condition' parameter to switch conditions")

    # ---- episode flow --------------------------------------------------------------------------
    def _reset_episode(self) -> None:
        if self._index >= len(self._env.episodes):
            if not bool(self.get_parameter("loop_episodes").value):
                self._finished = True
                self._publish_status(event="finished")
                return
            self._index = 0
        self._obs, self._info = self._env.reset(options={"episode_index": self._index})
        self._index += 1
        self._integrator.reset()
        self._done = False
        self._stamp = self.get_clock().now().to_msg()
        self.pub_instr.publish(String(data=self._obs["instruction"]))
        self._publish_obs(event="reset")

    def _apply(self, action: NavAction) -> None:
        if not self._started:
            self._log_once(self.get_logger(), "not-started", "command ignored: waiting for subscribers to start")
            return
        if self._done or self._finished:
            self._log_once(self.get_logger(), "done", "command ignored: the episode is over (waiting for reset)")
            return
        self._obs, _, term, trunc, self._info = self._env.step(action)
        self._done = term or trunc
        self._stamp = self.get_clock().now().to_msg()
        self._publish_obs(event="done" if self._done else "step", action=int(action))
        if self._done:
            self._episode_metrics.append(self._info["metrics"])
            if bool(self.get_parameter("auto_reset").value):
                self._reset_episode()

    def _publish_obs(self, event: str, action: int | None = None) -> None:
        stamp = self._stamp
        frame = str(self.get_parameter("frame_id").value)
        self.pub_odom.publish(pose_to_odometry(self._env.pose, stamp))
        self.pub_rgb.publish(image_to_msg(self._obs["rgb"], "rgb8", stamp, frame))
        if "depth" in self._obs:
            self.pub_depth.publish(image_to_msg(self._obs["depth"], "32FC1", stamp, frame))
        self.pub_info.publish(self._camera_info(stamp, frame))
        self._publish_status(event=event, action=action)

    def _publish_status(self, event: str, action: int | None = None) -> None:
        st: dict[str, Any] = {"event": event, "finished": self._finished}
        if not self._finished or event != "finished":
            ep = self._env.episode
            st.update(episode_id=ep.episode_id, scene_id=ep.scene_id, condition=self._info["condition"],
                      goal=ep.goals[0].position, step=self._info["steps"], done=self._done,
                      distance_to_goal=self._info["distance_to_goal"], position=self._info["position"],
                      heading=self._info["heading"], stamp_ns=stamp_to_ns(self._stamp), action=action)
            if "metrics" in self._info and event == "done":
                st["metrics"] = self._info["metrics"]
        st["episodes_done"] = len(self._episode_metrics)
        self.pub_status.publish(String(data=json.dumps(st)))

    def _republish(self) -> None:
        if self._started and not self._finished and not self._done:
            frame = str(self.get_parameter("frame_id").value)
            self.pub_rgb.publish(image_to_msg(self._obs["rgb"], "rgb8", self._stamp, frame))
            self.pub_odom.publish(pose_to_odometry(self._env.pose, self._stamp))
            self.pub_instr.publish(String(data=self._obs["instruction"]))  # keeps instruction watchdogs fed

    def _camera_info(self, stamp, frame: str) -> CameraInfo:
        cfg = self._env.config
        fx = cfg.width / 2 / math.tan(math.radians(cfg.hfov_deg) / 2)
        msg = CameraInfo()
        msg.header.stamp, msg.header.frame_id = stamp, frame
        msg.width, msg.height = cfg.width, cfg.height
        msg.distortion_model = "plumb_bob"
        msg.d = [0.0] * 5
        msg.k = [fx, 0.0, cfg.width / 2, 0.0, fx, cfg.height / 2, 0.0, 0.0, 1.0]
        msg.p = [fx, 0.0, cfg.width / 2, 0.0, 0.0, fx, cfg.height / 2, 0.0, 0.0, 0.0, 1.0, 0.0]
        msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        return msg

    # ---- inputs --------------------------------------------------------------------------------
    def _on_action(self, msg: Int8) -> None:
        if self.get_parameter("command_source").value != "action":
            self._log_once(self.get_logger(), "src-action", "/nav/action ignored: command_source is cmd_vel")
            return
        try:
            action = NavAction.parse(int(msg.data))
        except ValueError as exc:
            self._log_once(self.get_logger(), f"bad-action-{msg.data}", f"rejected /nav/action: {exc}")
            return
        self._apply(action)

    def _on_cmd_vel(self, msg: Twist) -> None:
        if self.get_parameter("command_source").value != "cmd_vel":
            return
        # zero-order hold: each command drives the robot for cmd_vel_hold seconds (a lockstep simulator has no
        # wall-clock motion between commands), so one vln_node action (step / control_period) is one step
        try:
            actions = self._integrator.add(msg, float(self.get_parameter("cmd_vel_hold").value))
        except ValueError as exc:
            self._log_once(self.get_logger(), "bad-twist", f"rejected /cmd_vel: {exc}")
            return
        for a in actions:
            self._apply(a)

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        if not self._env.episodes:
            response.success, response.message = False, "no episodes loaded"
            return response
        self._finished = False
        self._started = True
        self._start_timer.cancel()
        if self._index >= len(self._env.episodes):
            self._index = 0
        self._reset_episode()
        response.success = True
        response.message = f"episode {self._env.episode.episode_id} in {self._env.episode.scene_id}"
        return response

    def _switch_condition(self, name: str) -> str | None:
        """Restart the current episode under condition ``name``; an error message when unknown."""
        from sim.nav.conditions import available_conditions

        if name and name not in available_conditions():
            return f"unknown condition {name!r}; known: {available_conditions()}"
        self._env.config.condition = name or None
        if not self._started:
            return None  # the first episode starts under the new condition
        self._index = max(self._index - 1, 0)
        self._finished = False
        self._reset_episode()
        return None

    def _on_set_condition(self, request: Any, response: Any) -> Any:
        err = self._switch_condition(request.condition.strip())
        response.success = err is None
        response.message = err or f"condition {request.condition!r} active"
        if err:
            self._log_once(self.get_logger(), f"cond-{request.condition}", err)
        return response

    def _on_params(self, params: list[Parameter]) -> SetParametersResult:
        for prm in params:
            if prm.name == "condition":
                from sim.nav.conditions import available_conditions

                if prm.value and prm.value not in available_conditions():
                    return SetParametersResult(successful=False, reason=f"unknown condition {prm.value!r}; "
                                                                        f"known: {available_conditions()}")
            elif prm.name == "command_source" and prm.value not in ("action", "cmd_vel"):
                return SetParametersResult(successful=False, reason="command_source must be 'action' or 'cmd_vel'")
        return SetParametersResult(successful=True)

    def _after_params(self, params: list[Parameter]) -> None:
        for prm in params:
            if prm.name == "condition":
                self._switch_condition(str(prm.value))

    def destroy_node(self) -> None:
        self._env.close()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    run_node(SimNode, args, "sim_node")


if __name__ == "__main__":
    main()
