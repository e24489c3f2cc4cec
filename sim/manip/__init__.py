"""Tabletop manipulation on robosuite (Panda + OSC_POSE): tasks, scripted experts, the end-effector delta action.

robosuite is optional (the ``manip`` extra, pinned ``robosuite==1.5.2`` with ``mujoco==3.3.7``) and is
imported only when a :class:`ManipTask` is built; importing this package never imports it.

Action language: one control step is ``[dx, dy, dz, gripper]``, the end-effector displacement in metres in
the robot base frame (+x forward, +y left, +z up; for these tasks the same axes as the world frame) and the
gripper command (-1 open .. +1 close). See :mod:`sim.manip.action`.
"""

from __future__ import annotations

from sim.manip.action import MAX_DELTA_M, EEDeltaAction
from sim.manip.env import ManipTask, ManipTaskConfig, require_robosuite, robosuite_available
from sim.manip.experts import EXPERTS, ScriptedLiftExpert, ScriptedPickPlaceExpert, ScriptedStackExpert, make_expert
from sim.manip.tasks import TASKS, TaskSpec

__all__ = [
    "EXPERTS",
    "MAX_DELTA_M",
    "TASKS",
    "EEDeltaAction",
    "ManipTask",
    "ManipTaskConfig",
    "ScriptedLiftExpert",
    "ScriptedPickPlaceExpert",
    "ScriptedStackExpert",
    "TaskSpec",
    "make_expert",
    "require_robosuite",
    "robosuite_available",
]
