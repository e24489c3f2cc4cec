"""``manip_sim_node``: a robosuite tabletop task (:class:`sim.manip.ManipTask`) as a stand-in robot arm.

Publishes, after every step and re-published at ``publish_rate`` (same stamp, so consumers can tell a new
state from a repeat):

* ``/camera/color/image_raw`` (sensor_msgs/Image, rgb8, the ``camera`` parameter's view, default ``agentview``;
  ``header.frame_id`` ``<camera>_camera`` unless ``camera_frame_id`` says otherwise),
* ``/ee_pose`` (geometry_msgs/PoseStamped, world frame, metres),
* ``/object_poses`` (geometry_msgs/PoseArray, world frame; order = ``objects`` in the status),
* ``/manip/status`` (std_msgs/String JSON: task, step, phase, success, grasped, gripper, objects, instruction,
  seed, episode, stamp_ns).

Commands (lockstep: one env step per command), chosen by the ``command_input`` parameter:

* ``arm_cmd`` (default): ``/arm_cmd`` (allday_interfaces/ArmCommand): ``delta`` = end-effector displacement in
  metres for one control step (robot base frame = world axes here) and ``gripper`` (-1 open .. +1 close, 0 holds)
  in one message, so every step applies the gripper that was sent with its delta;
* ``twist_pair``: the standard-message pair a teleop tool or robot driver speaks: ``/ee_delta_cmd``
  (geometry_msgs/TwistStamped, ``twist.linear`` as above, angular ignored) steps, and ``/gripper_cmd``
  (std_msgs/Float32) is latched and applied with the next delta. DDS does not order the two topics, so a gripper
  sent just before a delta can land after it (docs/ros2.md).

Non-finite or oversized deltas are zeroed / clamped to ``max_delta`` per axis, with the reason logged once.
Service ``~/reset`` (std_srvs/Trigger) starts a new episode (seed = ``seed`` + episode index).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

from geometry_msgs.msg import Pose, PoseArray, PoseStamped, TwistStamped  # noqa: E402
from rclpy.node import Node  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402
from std_msgs.msg import Float32, String  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from allday_ros.conversions import image_to_msg  # noqa: E402
from allday_ros.interfaces import load_interfaces  # noqa: E402
from allday_ros.safety import LogOnce  # noqa: E402
from allday_ros.spin import run_node  # noqa: E402
from sim.manip.action import sanitize, sanitize_gripper  # noqa: E402

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
STATUS_QOS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)


def _pose(position: Any, quat_xyzw: Any) -> Pose:
    p = Pose()
    p.position.x, p.position.y, p.position.z = (float(v) for v in position)
    p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w = (float(v) for v in quat_xyzw)
    return p


class ManipSimNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("manip_sim_node", **kwargs)
        p = self.declare_parameter
        p("task", "lift")              # sim.manip.TASKS key: lift | stack | pick_place_can
        p("image_size", 128)
        p("camera", "agentview")
        p("fast_render", True)
        p("seed", 0)
        p("model_seed", 0)             # seeds robosuite's model build (cube size); -1: unseeded, new each launch
        p("max_delta", 0.05)           # m per axis per step
        p("publish_rate", 10.0)        # Hz re-publication of the current state (keeps watchdogs fed)
        p("frame_id", "world")
        p("camera_frame_id", "")       # the images' header.frame_id ("": <camera>_camera)
        p("command_input", "arm_cmd")  # arm_cmd (/arm_cmd, delta + gripper together) | twist_pair (see above)
        self._log_once = LogOnce()
        g = lambda k: self.get_parameter(k).value  # noqa: E731
        command_input = str(g("command_input"))  # checked before the (seconds-long) robosuite build
        if command_input not in COMMAND_INPUTS:
            raise ValueError(f"command_input {command_input!r} is not one of {sorted(COMMAND_INPUTS)}")
        from sim.manip.env import ManipTask, ManipTaskConfig

        t0 = time.perf_counter()
        model_seed = int(g("model_seed"))
        self.task = ManipTask(ManipTaskConfig(task=str(g("task")), image_size=int(g("image_size")),
                                              camera=str(g("camera")), fast_render=bool(g("fast_render")),
                                              max_delta_m=float(g("max_delta")),
                                              model_seed=None if model_seed < 0 else model_seed))
        # one throw-away step compiles robosuite's numba kernels (seconds on a fresh install) before any
        # consumer's watchdog is running, so the first real step is as fast as the rest
        self.task.reset(seed=int(g("seed")))
        self.task.step([0.0, 0.0, 0.0], -1.0)
        self._max_delta = float(g("max_delta"))
        self._episode = -1
        self._gripper = -1.0
        self._obs: dict[str, Any] = {}
        self._stamp = self.get_clock().now().to_msg()

        self.pub_rgb = self.create_publisher(Image, "/camera/color/image_raw", RELIABLE)
        self.pub_ee = self.create_publisher(PoseStamped, "/ee_pose", RELIABLE)
        self.pub_objects = self.create_publisher(PoseArray, "/object_poses", RELIABLE)
        self.pub_status = self.create_publisher(String, "/manip/status", STATUS_QOS)
        COMMAND_INPUTS[command_input](self)
        self.create_service(Trigger, "~/reset", self._on_reset)
        self._reset()
        rate = float(g("publish_rate"))
        if rate > 0:
            self.create_timer(1.0 / rate, self._publish)
        self.get_logger().info(f"task {self.task.spec.name} ready in {time.perf_counter() - t0:.1f} s "
                               f"({self.task.config.image_size}px {self.task.config.camera})")

    # ---- episode / state -----------------------------------------------------------------------
    def _reset(self) -> dict[str, Any]:
        self._episode += 1
        seed = int(self.get_parameter("seed").value) + self._episode
        self._gripper = -1.0
        self._obs = self.task.reset(seed)
        self._seed = seed
        self._new_state()
        return self._obs

    def _new_state(self) -> None:
        self._stamp = self.get_clock().now().to_msg()
        self._publish()

    def _status(self) -> dict[str, Any]:
        o = self._obs
        return {"task": o["task"], "step": int(o["step"]), "phase": o["phase"], "success": bool(o["success"]),
                "grasped": bool(o["grasped"]), "gripper": round(float(o["gripper"]), 5),
                "objects": list(o["objects"]), "instruction": o["instruction"], "seed": self._seed,
                "episode": self._episode, "substeps": int(o["substeps"]),
                "stamp_ns": int(self._stamp.sec) * 1_000_000_000 + int(self._stamp.nanosec)}

    def _publish(self) -> None:
        o, stamp, frame = self._obs, self._stamp, str(self.get_parameter("frame_id").value)
        if o.get("rgb") is not None:
            cam_frame = str(self.get_parameter("camera_frame_id").value) or f"{self.task.config.camera}_camera"
            self.pub_rgb.publish(image_to_msg(o["rgb"], "rgb8", stamp=stamp, frame_id=cam_frame))
        ee = PoseStamped()
        ee.header.stamp, ee.header.frame_id = stamp, frame
        ee.pose = _pose(o["ee_pos"], o["ee_quat"])
        self.pub_ee.publish(ee)
        arr = PoseArray()
        arr.header.stamp, arr.header.frame_id = stamp, frame
        quats = self.task.object_quats()
        arr.poses = [_pose(pos, quats[name]) for name, pos in o["objects"].items()]
        self.pub_objects.publish(arr)
        self.pub_status.publish(String(data=json.dumps(self._status())))

    # ---- commands ------------------------------------------------------------------------------
    def _subscribe_arm_cmd(self) -> None:
        try:
            arm_command = load_interfaces("msg").ArmCommand
        except ImportError as exc:  # run_node reports a RuntimeError in one line
            raise RuntimeError(f"{exc} (or use command_input:=twist_pair)") from None
        self.create_subscription(arm_command, "/arm_cmd", self._on_arm_cmd, STATUS_QOS)

    def _subscribe_twist_pair(self) -> None:
        # the gripper subscription first: when both commands are waiting, the executor serves them in creation
        # order, so the gripper value is set before the delta that triggers the step (narrows the cross-topic
        # window, does not close it: see docs/ros2.md)
        self.create_subscription(Float32, "/gripper_cmd", self._on_gripper, STATUS_QOS)
        self.create_subscription(TwistStamped, "/ee_delta_cmd", self._on_delta, STATUS_QOS)

    def _on_arm_cmd(self, msg: Any) -> None:
        self._step((msg.delta.x, msg.delta.y, msg.delta.z), float(msg.gripper), "arm_cmd")

    def _on_gripper(self, msg: Float32) -> None:
        g, fault = sanitize_gripper(msg.data)
        if fault is not None:
            self._log_once(self.get_logger(), f"gripper_cmd-{fault.kind}", f"gripper_cmd: {fault.detail}")
        self._gripper = g

    def _on_delta(self, msg: TwistStamped) -> None:
        lin, ang = msg.twist.linear, msg.twist.angular
        if any(v != 0.0 for v in (ang.x, ang.y, ang.z)):
            self._log_once(self.get_logger(), "angular", "ee_delta_cmd angular part is ignored (position-only control)")
        self._step((lin.x, lin.y, lin.z), self._gripper, "ee_delta_cmd")

    def _step(self, delta: Any, gripper: float, source: str) -> None:
        """One lockstep env step on a sanitized command (non-finite -> 0, clamped), then publish the new state."""
        safe = sanitize(delta, gripper, self._max_delta)
        if safe.faults:  # each combination of fault kinds is logged once per source
            self._log_once(self.get_logger(), f"{source}-{'+'.join(safe.kinds)}", f"{source}: {safe.reason}")
        self._gripper = safe.gripper
        self._obs = self.task.step(safe.delta, safe.gripper)
        self._new_state()

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        try:
            self._reset()
        except Exception as exc:  # report any sim failure through the service
            response.success, response.message = False, f"reset failed: {type(exc).__name__}: {exc}"
            return response
        response.success = True
        response.message = json.dumps({"episode": self._episode, "seed": self._seed, "task": self.task.spec.name})
        return response

    def destroy_node(self) -> None:
        task, self.task = getattr(self, "task", None), None
        if task is not None:
            task.close()
        super().destroy_node()


#: command_input -> the method that subscribes to that command interface
COMMAND_INPUTS = {"arm_cmd": ManipSimNode._subscribe_arm_cmd, "twist_pair": ManipSimNode._subscribe_twist_pair}


def main(args: list[str] | None = None) -> None:
    run_node(ManipSimNode, args, "manip_sim_node")


if __name__ == "__main__":
    main()
