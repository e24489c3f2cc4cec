"""``SimStateVerifier``: decides advance / retry for VLM2VLA subtasks from privileged simulator state.

It reads the :class:`~sim.manip.env.ManipTask` observation dicts (``ee_pos``, ``objects``, ``grasped``; the
``vla_node`` builds the same keys from ROS topics) and checks the subtask by keywords of the scripted experts'
phase names (the relabeller's subtasks): "move above" -> hand within ``xy_tol_m`` of the object in x/y and above
it; "descend"/"lower" -> hand near the object's height; "grasp" -> the object is grasped; "lift" -> grasped and
the object rose by ``lift_m``; "release" -> not grasped; "retreat" and anything unknown -> the hand moved.
Missing state (a real robot) -> advance, since it cannot judge. Registered as ``sim_state`` in
:data:`agents.core.verifier.VERIFIERS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from agents.core.verifier import VERIFIERS, Verdict


class SimStateVerifier:
    """Keyword rules over privileged state (see the module docstring); ``object_name`` defaults to the first."""

    def __init__(self, object_name: str | None = None, xy_tol_m: float = 0.02, z_tol_m: float = 0.02,
                 lift_m: float = 0.05, moved_m: float = 0.005) -> None:
        for name, v in (("xy_tol_m", xy_tol_m), ("z_tol_m", z_tol_m), ("lift_m", lift_m), ("moved_m", moved_m)):
            if not (isinstance(v, (int, float)) and 0.0 < v < 1.0):
                raise ValueError(f"{name} must be in (0, 1) m, got {v!r}")
        self.object_name = object_name
        self.xy_tol_m, self.z_tol_m, self.lift_m, self.moved_m = xy_tol_m, z_tol_m, lift_m, moved_m

    def _obj(self, obs: Mapping[str, Any], subtask: str) -> np.ndarray | None:
        objects = obs.get("objects") or {}
        if not objects:
            return None
        name = self.object_name
        if name is None:
            # "move above target" / "lower" refer to the target (the last named object) once something is grasped
            names = list(objects)
            name = names[-1] if ("target" in subtask or "lower" in subtask) and len(names) > 1 else names[0]
        if name not in objects:
            return None
        return np.asarray(objects[name], dtype=np.float64).reshape(3)

    def verify(self, before: Mapping[str, Any], after: Mapping[str, Any], subtask: str,
               next_subtask: str | None) -> Verdict:
        s = subtask.lower()
        ee0, ee1 = before.get("ee_pos"), after.get("ee_pos")
        if ee1 is None:
            return Verdict.ADVANCE
        ee1 = np.asarray(ee1, dtype=np.float64).reshape(3)
        obj1 = self._obj(after, s)
        ok: bool | None = None
        if "grasp" in s:
            ok = bool(after.get("grasped", False))
        elif "release" in s:
            ok = not bool(after.get("grasped", False))
        elif "lift" in s:
            obj0 = self._obj(before, s)
            rose = obj0 is not None and obj1 is not None and obj1[2] - obj0[2] >= self.lift_m
            ok = bool(after.get("grasped", False)) and (rose or obj1 is None)
        elif "above" in s and obj1 is not None:
            ok = bool(np.hypot(*(ee1[:2] - obj1[:2])) < self.xy_tol_m and ee1[2] > obj1[2])
        elif ("descend" in s or "lower" in s) and obj1 is not None:
            ok = bool(np.hypot(*(ee1[:2] - obj1[:2])) < self.xy_tol_m * 1.5
                      and abs(ee1[2] - obj1[2]) < self.z_tol_m + (0.06 if "lower" in s else 0.0))
        if ok is None:
            if ee0 is None:
                return Verdict.ADVANCE
            ok = float(np.abs(ee1 - np.asarray(ee0, dtype=np.float64).reshape(3)).max()) >= self.moved_m
        return Verdict.ADVANCE if ok else Verdict.RETRY


VERIFIERS.register("sim_state")(lambda **kw: SimStateVerifier(**{k: v for k, v in kw.items() if k != "bundle"}))
