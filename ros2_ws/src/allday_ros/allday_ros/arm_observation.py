"""The manipulation observation a VLA policy acts on, assembled from the latest arm-side messages (no rclpy).

``vla_node`` keeps the latest ``camera``, ``ee_pose`` and ``object_poses`` messages with their stamps and the
simulator's ``/manip/status``; :func:`arm_observation` turns them into the dict that
:class:`agents.core.policy.Policy` ``act`` takes, or None while they do not yet describe one state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: the stamped inputs one observation needs, by the name ``vla_node`` stores them under
ARM_INPUTS = ("camera", "ee_pose", "object_poses")


def arm_observation(
    msgs: Mapping[str, tuple[int, Any]],
    status: Mapping[str, Any],
    instruction: str,
    step: int,
    wait_status: bool = False,
) -> tuple[int, dict[str, Any]] | None:
    """``(stamp_ns, observation)`` from the latest inputs, or None when they are incomplete or of different states.

    ``msgs`` maps each of :data:`ARM_INPUTS` to ``(stamp_ns, value)``: an RGB array, ``(position, quaternion)``
    and a list of object positions. ``status`` is the latest ``/manip/status`` (object names, success, phase,
    grasp, gripper); when it carries a ``stamp_ns`` it must be the inputs' stamp (else None: the status of this
    state is still on its way); an unstamped status names the objects, but its success, phase and grasp cannot be
    tied to this state and are left unknown (``status_known`` False). ``wait_status``: None until some status has
    arrived. Object names come from the status when it names as many objects as there are poses, else
    ``object_i``.
    """
    if any(n not in msgs for n in ARM_INPUTS) or (wait_status and not status):
        return None
    stamps = {msgs[n][0] for n in ARM_INPUTS}
    if len(stamps) != 1:
        return None
    stamp = stamps.pop()
    st = status if status.get("stamp_ns") == stamp else {}
    if "stamp_ns" in status and not st:
        return None
    pts = msgs["object_poses"][1]
    names = list(status.get("objects", []))
    if len(names) != len(pts):
        names = [f"object_{i}" for i in range(len(pts))]
    ee_pos, ee_quat = msgs["ee_pose"][1]
    obs = {"rgb": msgs["camera"][1], "ee_pos": ee_pos, "ee_quat": ee_quat,
           "objects": dict(zip(names, pts)), "instruction": instruction, "step": step,
           "success": bool(st.get("success", False)), "phase": st.get("phase", ""),
           "grasped": bool(st.get("grasped", False)), "gripper": st.get("gripper"), "status_known": bool(st)}
    return stamp, obs
