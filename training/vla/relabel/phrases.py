"""Subtask phrases and auxiliary direction labels, written deterministically from phase labels and deltas.

Motion plans come from :func:`agents.vla.action_language.motion_plan` (grammar v1, direction only), so training
targets and the policy's parser agree. Frame: the robot base frame, +x forward, +y left, +z up.
"""

from __future__ import annotations

import numpy as np

#: net sideways displacement (metres) below which a step counts as "none" for the direction label
STILL_M = 0.004

#: phase label -> subtask template; {obj} is the grasped object, {target} the place target
PHASE_SUBTASKS = {
    "move above": "move above the {obj}",
    "descend": "lower the gripper to the {obj}",
    "grasp": "grasp the {obj}",
    "lift": "lift the {obj}",
    "move above target": "carry the {obj} above the {target}",
    "lower": "lower the {obj} onto the {target}",
    "release": "release the {obj}",
    "retreat": "move the gripper away",
}
#: task -> (object phrase, target phrase)
TASK_OBJECTS = {
    "lift": ("red cube", "table"),
    "stack": ("red cube", "green cube"),
    "pick_place_can": ("red can", "bin"),
}


def direction_label(delta_m: np.ndarray) -> str:
    """The auxiliary left/right/none label of a net displacement (base frame: +y is left)."""
    dy = float(np.asarray(delta_m, dtype=np.float64).reshape(3)[1])
    if abs(dy) < STILL_M:
        return "none"
    return "left" if dy > 0 else "right"


def subtask_phrase(phase: str, task: str, motion: str) -> str:
    """The subtask of a phase of ``task`` (templates in :data:`PHASE_SUBTASKS`); other labels are used as
    written (lower-cased); unlabelled steps are named from their motion plan ("move the gripper down")."""
    obj, target = TASK_OBJECTS.get(task, ("object", "target"))
    if phase in PHASE_SUBTASKS:
        return PHASE_SUBTASKS[phase].format(obj=obj, target=target)
    if phase:
        return " ".join(phase.replace("_", " ").lower().split())
    if motion.startswith("move "):
        return "move the gripper " + motion[len("move "):].split(", then")[0]
    return motion if motion != "stay still" else "wait"
