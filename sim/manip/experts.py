"""Scripted experts: privileged-state pick / stack / pick-and-place controllers in the VLA action language.

Each expert is an :class:`agents.core.policy.Policy` whose ``act(observation)`` takes a :class:`ManipTask`
observation dict (``ee_pos`` and ``objects`` are required; ``gripper`` and ``grasped`` are optional) and returns
an :class:`~sim.manip.action.EEDeltaAction`: ``[dx, dy, dz]`` in metres, the gripper command (-1 open / +1
close) and a phase label ("move above", "descend", "grasp", "lift", ...). The phase labels double as the
subtasks a relabeller writes for VLM2VLA-style data. Experts are keyed by task name in :data:`EXPERTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.core.policy import Policy
from agents.core.registry import Registry
from sim.manip.action import GRIPPER_CLOSE, GRIPPER_OPEN, EEDeltaAction

EXPERTS: Registry[Callable[..., Policy]] = Registry("manipulation expert")


@dataclass(frozen=True)
class Waypoint:
    """One phase of a scripted plan: move to ``target(obs)`` (None: stay) with ``gripper`` until ``done``."""

    phase: str
    target: Callable[[Mapping[str, Any], dict[str, Any]], np.ndarray | None]
    gripper: float
    done: Callable[[Mapping[str, Any], dict[str, Any], int], bool]


def _near(tol_xy: float, tol_z: float) -> Callable[[Mapping[str, Any], np.ndarray], bool]:
    def ok(obs: Mapping[str, Any], target: np.ndarray) -> bool:
        err = np.asarray(target) - np.asarray(obs["ee_pos"])
        return bool(np.hypot(err[0], err[1]) < tol_xy and abs(err[2]) < tol_z)

    return ok


class ScriptedExpert(Policy):
    """A phase machine over :class:`Waypoint` s; per-axis step limit ``max_step_m`` (m)."""

    name = "scripted"
    task = ""

    def __init__(self, max_step_m: float = 0.03, grasp_steps: int = 10, release_steps: int = 6) -> None:
        if not 0.001 <= max_step_m <= 0.05:
            raise ValueError(f"max_step_m must be in [0.001, 0.05], got {max_step_m}")
        self.max_step_m = float(max_step_m)
        self.grasp_steps = int(grasp_steps)
        self.release_steps = int(release_steps)
        self.plan = self._plan()
        self.reset()

    def reset(self) -> None:
        self._i = 0
        self._t_phase = 0
        self._mem: dict[str, Any] = {}

    @property
    def phase(self) -> str:
        return self.plan[self._i].phase if self._i < len(self.plan) else "done"

    @property
    def phases(self) -> list[str]:
        return [w.phase for w in self.plan]

    def _plan(self) -> list[Waypoint]:
        raise NotImplementedError

    def act(self, observation: Mapping[str, Any]) -> EEDeltaAction:
        obs = observation
        if "ee_pos" not in obs or "objects" not in obs:
            raise ValueError("scripted experts need privileged state: observation keys 'ee_pos' and 'objects'")
        # advance through finished phases (at most one per call, so every phase emits at least one action)
        if self._i < len(self.plan):
            w = self.plan[self._i]
            if w.done(obs, self._mem, self._t_phase):
                self._i += 1
                self._t_phase = 0
        if self._i >= len(self.plan):
            return EEDeltaAction((0.0, 0.0, 0.0), self.plan[-1].gripper, "done")
        w = self.plan[self._i]
        self._t_phase += 1
        target = w.target(obs, self._mem)
        if target is None:
            delta = np.zeros(3)
        else:
            self._mem["target"] = np.asarray(target, dtype=np.float64)
            delta = np.clip(self._mem["target"] - np.asarray(obs["ee_pos"], dtype=np.float64),
                            -self.max_step_m, self.max_step_m)
        return EEDeltaAction(tuple(delta), w.gripper, w.phase)

    # ------------------------------------------------------------ building blocks
    @staticmethod
    def _obj(obs: Mapping[str, Any], name: str) -> np.ndarray:
        try:
            return np.asarray(obs["objects"][name], dtype=np.float64)
        except KeyError:
            raise KeyError(f"observation has no object {name!r}; has {sorted(obs['objects'])}") from None

    def _move(self, phase: str, target: Callable[[Mapping[str, Any], dict[str, Any]], np.ndarray], gripper: float,
              tol_xy: float = 0.01, tol_z: float = 0.01, max_steps: int = 40) -> Waypoint:
        near = _near(tol_xy, tol_z)

        def done(obs: Mapping[str, Any], mem: dict[str, Any], t: int) -> bool:
            return t >= max_steps or (t > 0 and near(obs, mem.get("target", target(obs, mem))))

        return Waypoint(phase, target, gripper, done)

    def _wait(self, phase: str, gripper: float, steps: int) -> Waypoint:
        """Hold still for ``steps``; remembers where (``mem[phase + "_pos"]``)."""

        def done(obs: Mapping[str, Any], mem: dict[str, Any], t: int) -> bool:
            mem[f"{phase}_pos"] = np.asarray(obs["ee_pos"], dtype=np.float64)
            return t >= steps

        return Waypoint(phase, lambda obs, mem: None, gripper, done)

    def _grasp(self, obj: str) -> Waypoint:
        """Close until the fingers stop (or ``grasp_steps``); remembers the grasp height for the lift."""

        def done(obs: Mapping[str, Any], mem: dict[str, Any], t: int) -> bool:
            mem["grasp_pos"] = np.asarray(obs["ee_pos"], dtype=np.float64)
            if obs.get("grasped") and t >= 4:
                return True
            return t >= self.grasp_steps

        return Waypoint("grasp", lambda obs, mem: None, GRIPPER_CLOSE, done)


@EXPERTS.register("lift")
class ScriptedLiftExpert(ScriptedExpert):
    """Lift: above the cube -> descend -> grasp -> lift 15 cm."""

    name = "scripted_lift"
    task = "lift"

    def __init__(self, hover_m: float = 0.08, lift_m: float = 0.15, **kw: Any) -> None:
        self.hover_m, self.lift_m = hover_m, lift_m
        super().__init__(**kw)

    def _plan(self) -> list[Waypoint]:
        up = np.array([0.0, 0.0, 1.0])
        cube = lambda obs, mem: self._obj(obs, "cube")
        return [
            self._move("move above", lambda o, m: cube(o, m) + self.hover_m * up, GRIPPER_OPEN, 0.01, 0.02),
            self._move("descend", lambda o, m: cube(o, m) - 0.003 * up, GRIPPER_OPEN, 0.008, 0.006),
            self._grasp("cube"),
            self._move("lift", lambda o, m: m["grasp_pos"] + self.lift_m * up, GRIPPER_CLOSE, 0.02, 0.01),
        ]


@EXPERTS.register("stack")
class ScriptedStackExpert(ScriptedExpert):
    """Stack: pick cubeA (red), carry it above cubeB (green), lower, release, retreat."""

    name = "scripted_stack"
    task = "stack"

    def __init__(self, hover_m: float = 0.08, **kw: Any) -> None:
        self.hover_m = hover_m
        super().__init__(**kw)

    def _plan(self) -> list[Waypoint]:
        up = np.array([0.0, 0.0, 1.0])
        a = lambda obs, mem: self._obj(obs, "cubeA")
        b = lambda obs, mem: self._obj(obs, "cubeB")
        # cubeA (half size 0.02) resting on cubeB (half size 0.025): centres 0.045 apart; release a little higher
        place = lambda o, m: b(o, m) + 0.052 * up
        return [
            self._move("move above", lambda o, m: a(o, m) + self.hover_m * up, GRIPPER_OPEN, 0.01, 0.02),
            self._move("descend", lambda o, m: a(o, m) - 0.003 * up, GRIPPER_OPEN, 0.008, 0.006),
            self._grasp("cubeA"),
            self._move("lift", lambda o, m: m["grasp_pos"] + 0.1 * up, GRIPPER_CLOSE, 0.02, 0.015),
            self._move("move above target", lambda o, m: b(o, m) + 0.12 * up, GRIPPER_CLOSE, 0.008, 0.02),
            self._move("lower", place, GRIPPER_CLOSE, 0.006, 0.006),
            self._wait("release", GRIPPER_OPEN, self.release_steps),
            self._move("retreat", lambda o, m: b(o, m) + 0.15 * up, GRIPPER_OPEN, 0.03, 0.02),
        ]


@EXPERTS.register("pick_place_can")
class ScriptedPickPlaceExpert(ScriptedExpert):
    """PickPlaceCan: pick the can from the left bin and drop it into its quadrant of the right bin."""

    name = "scripted_pick_place_can"
    task = "pick_place_can"

    def __init__(self, carry_z: float = 0.98, **kw: Any) -> None:
        self.carry_z = carry_z
        super().__init__(**kw)

    def _plan(self) -> list[Waypoint]:
        up = np.array([0.0, 0.0, 1.0])
        can = lambda obs, mem: self._obj(obs, "can")
        goal = lambda obs, mem: self._obj(obs, "can_target")

        def at_z(p: np.ndarray, z: float) -> np.ndarray:
            return np.array([p[0], p[1], z])

        return [
            self._move("move above", lambda o, m: can(o, m) + 0.1 * up, GRIPPER_OPEN, 0.01, 0.02),
            self._move("descend", lambda o, m: can(o, m) + 0.0 * up, GRIPPER_OPEN, 0.008, 0.006),
            self._grasp("can"),
            self._move("lift", lambda o, m: at_z(m["grasp_pos"], self.carry_z), GRIPPER_CLOSE, 0.02, 0.02),
            # the far quadrants are near the edge of the Panda's reach: loose tolerances, bounded phases
            self._move("move above target", lambda o, m: at_z(goal(o, m), self.carry_z), GRIPPER_CLOSE, 0.02, 0.02,
                       max_steps=30),
            self._move("lower", lambda o, m: goal(o, m) + 0.1 * up, GRIPPER_CLOSE, 0.02, 0.015, max_steps=10),
            self._wait("release", GRIPPER_OPEN, self.release_steps),
            # straight up can be blocked at full reach: back off towards the robot (-x) and the middle (y -> 0)
            self._move("retreat", lambda o, m: m["release_pos"] + np.array([-0.08, -0.04 * np.sign(m["release_pos"][1]),
                                                                           0.04]), GRIPPER_OPEN, 0.03, 0.03,
                       max_steps=15),
        ]


def make_expert(task: str, **kwargs: Any) -> Policy:
    """The scripted expert of ``task`` (a :data:`~sim.manip.tasks.TASKS` key)."""
    return EXPERTS.get(task)(**kwargs)


def run_expert(task: Any, expert: Policy, seed: int | None = 0, max_steps: int = 200,
               on_step: Callable[[dict[str, Any], EEDeltaAction], None] | None = None) -> dict[str, Any]:
    """Roll ``expert`` out in a :class:`~sim.manip.env.ManipTask` until success (then a couple of settle steps
    for stack / pick-and-place, whose success needs the hand away) or ``max_steps``.
    Returns ``{"success", "steps", "phases"}``."""
    obs = task.reset(seed)
    expert.reset()
    phases: list[str] = []
    for t in range(1, max_steps + 1):
        a = EEDeltaAction.parse(expert.act(obs))
        if not phases or phases[-1] != a.phase:
            phases.append(a.phase)
        obs = task.step(a.delta, a.gripper)
        if on_step is not None:
            on_step(obs, a)
        if obs["success"]:
            return {"success": True, "steps": t, "phases": phases}
    return {"success": False, "steps": max_steps, "phases": phases}
