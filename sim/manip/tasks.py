"""The manipulation tasks: robosuite environment names, the objects an expert and the ROS node report, instructions."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.core.registry import Registry


@dataclass(frozen=True)
class TaskSpec:
    """One task. ``objects`` maps our object name -> the robosuite attribute holding the object model
    (its root body is read from the sim); ``targets`` are named goal positions reported like objects."""

    name: str
    env_name: str
    instruction: str
    objects: dict[str, str] = field(default_factory=dict)
    targets: tuple[str, ...] = ()
    env_kwargs: dict[str, object] = field(default_factory=dict)
    #: typical number of control steps the scripted expert needs (sizes default step budgets)
    expert_steps: int = 60


TASKS: Registry[TaskSpec] = Registry("manipulation task")


def _add(spec: TaskSpec) -> TaskSpec:
    TASKS.register(spec.name)(spec)
    return spec


LIFT = _add(TaskSpec("lift", "Lift", "pick up the red cube", objects={"cube": "cube"}, expert_steps=40))
STACK = _add(TaskSpec("stack", "Stack", "stack the red cube on the green cube",
                      objects={"cubeA": "cubeA", "cubeB": "cubeB"}, expert_steps=80))
#: robosuite's single-object PickPlace variant: the can goes into its quadrant of the second bin
PICK_PLACE_CAN = _add(TaskSpec("pick_place_can", "PickPlaceCan", "put the red can in the bin",
                               objects={"can": "Can"}, targets=("can_target",), expert_steps=110))


def get_task(name: str) -> TaskSpec:
    """Task by name; the robosuite name (``Lift``, ``Stack``, ``PickPlaceCan``) is accepted too."""
    for spec in (TASKS.get(n) for n in TASKS.names()):
        if name == spec.env_name:
            return spec
    return TASKS.get(name.lower())
