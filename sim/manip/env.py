"""``ManipTask``: a robosuite tabletop task (Panda, OSC_POSE) driven by end-effector displacements in metres.

robosuite is imported lazily (:func:`require_robosuite`); set ``MUJOCO_GL=egl`` (or ``osmesa``) before the
first task is built for headless rendering (done here when unset).

Metres -> controller scale. robosuite's OSC_POSE (``BASIC`` composite config) takes a delta input in [-1, 1]
and scales it by ``output_max`` = 0.05 m, so +-1 is a +-5 cm *set-point offset*. It is not the distance the
hand moves in one 50 ms control step: the impedance controller (kp 150, critically damped) realises only about
a quarter of it (a single 0.4 = 2 cm command moves the hand ~4.7 mm; sustained, 0.44 cm per step). With
``tracking=True`` (default) one :meth:`ManipTask.step` therefore runs up to ``max_substeps`` controller steps,
each commanding ``gain * (target - ee) / 0.05`` towards ``target = ee + delta``, until the hand is within
``tol_m`` of the target and nearly at rest, so a commanded 2 cm moves the hand by about 2 cm. The orientation is
held at the reset orientation. ``tracking=False`` sends ``delta / 0.05`` once (the raw controller scale).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from agents.core.config import check_ints, check_ranges, config_from_dict
from sim.core.gl import prepare_gl
from sim.manip.action import MAX_DELTA_M, sanitize
from sim.manip.tasks import TaskSpec, get_task

log = logging.getLogger(__name__)

ROBOSUITE_INSTALL_HINT = ("robosuite is not installed; install the manip extra: "
                          "pip install -e '.[manip]' (pins robosuite==1.5.2 with mujoco==3.3.7)")
#: OSC_POSE output scale of the BASIC composite controller: input +-1 -> +-5 cm / +-0.5 rad set-point offset
OSC_POS_SCALE_M: float = 0.05
OSC_ROT_SCALE_RAD: float = 0.5


def robosuite_available() -> bool:
    """Whether robosuite can be found (without importing it)."""
    return importlib.util.find_spec("robosuite") is not None


class _QuietRobosuite(logging.Filter):
    """Drops robosuite's known harmless start-up warnings (private macro file, optional robosuite_models and mink
    IK, the BASIC composite config naming body parts a Panda does not have), repeated on every import / build."""

    NOISE = ("private macro file", "setup_macros.py", "Could not import robosuite_models", "mink-based whole-body IK",
             "but the robot does not have this component")

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(n in msg for n in self.NOISE)


def require_robosuite() -> Any:
    """Import and return ``robosuite``; ``ImportError`` naming the ``manip`` extra when it is missing."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    rs_log = logging.getLogger("robosuite_logs")
    if not any(isinstance(f, _QuietRobosuite) for f in rs_log.filters):
        rs_log.addFilter(_QuietRobosuite())
    try:
        import robosuite
    except ImportError as e:
        raise ImportError(f"{ROBOSUITE_INSTALL_HINT} ({e})") from e
    return robosuite


@dataclass
class ManipTaskConfig:
    """Settings of a :class:`ManipTask`; ``task`` is a :data:`~sim.manip.tasks.TASKS` key (or robosuite name)."""

    task: str = "lift"
    image_size: int = 128
    camera: str = "agentview"
    render: bool = True
    #: offsamples 0 + no reflections: ~15 ms per 128^2 frame instead of ~45 ms
    fast_render: bool = True
    control_freq: int = 20
    max_delta_m: float = MAX_DELTA_M
    tracking: bool = True
    gain: float = 1.5
    tol_m: float = 0.002
    max_substeps: int = 12
    #: steps after which ``done`` is reported (0: never); the env keeps stepping either way
    max_steps: int = 0
    robot: str = "Panda"
    #: seeds robosuite's model build (the random cube size of Lift/Stack, ...), so a task is the same world in every
    #: process; ``reset(seed)`` then fixes the placement. ``None``: robosuite's unseeded default (differs per process)
    model_seed: int | None = 0

    def __post_init__(self) -> None:
        get_task(self.task)
        if not isinstance(self.image_size, int) or not 16 <= self.image_size <= 1024:
            raise ValueError(f"image_size must be an int in 16..1024, got {self.image_size!r}")
        checks = {"max_delta_m": (1e-4, 0.2), "gain": (0.1, 10.0), "tol_m": (1e-5, 0.05)}
        check_ranges(self, checks)
        if self.model_seed is not None:
            check_ints(self, {"model_seed": (0, 2**63 - 1)})
        for name, lo in (("control_freq", 1), ("max_substeps", 1), ("max_steps", 0)):
            v = getattr(self, name)
            if not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ManipTaskConfig":
        return config_from_dict(cls, d)


def _rotvec_error(q_target_xyzw: np.ndarray, q_cur_xyzw: np.ndarray) -> np.ndarray:
    """Rotation vector (world frame) taking the current orientation to the target one."""
    from scipy.spatial.transform import Rotation as R

    return (R.from_quat(q_target_xyzw) * R.from_quat(q_cur_xyzw).inv()).as_rotvec()


class ManipTask:
    """A robosuite task as a stand-in robot arm: ``reset(seed)`` and ``step(ee_delta_m, gripper)``.

    Observations are dicts: ``rgb`` (HxWx3 uint8, upright, or None when ``render=False``), ``ee_pos`` (world, m),
    ``ee_quat`` (xyzw), ``gripper`` (finger opening, m), ``objects`` (name -> world position, targets included),
    ``grasped``, ``success``, ``phase`` (task progress: ``reach`` / ``grasped`` / ``success``), ``step``,
    ``substeps`` (controller steps of the last step), ``task``, ``instruction`` and ``done``.
    """

    def __init__(self, config: ManipTaskConfig | None = None, **overrides: Any) -> None:
        cfg = config or ManipTaskConfig()
        if overrides:
            cfg = ManipTaskConfig.from_dict({**{f.name: getattr(cfg, f.name) for f in fields(cfg)}, **overrides})
        self.config = cfg
        self.spec: TaskSpec = get_task(cfg.task)
        if cfg.render:
            prepare_gl()
        suite = require_robosuite()
        from robosuite.controllers import load_composite_controller_config

        t0 = time.perf_counter()
        controller = load_composite_controller_config(controller="BASIC", robot=cfg.robot)
        arm = controller["body_parts"]["right"]
        if arm.get("type") != "OSC_POSE" or arm.get("input_type", "delta") != "delta":
            raise RuntimeError(f"expected a delta OSC_POSE arm controller, got {arm}")
        self._pos_scale = float(np.asarray(arm["output_max"], dtype=float)[0])
        self._rot_scale = float(np.asarray(arm["output_max"], dtype=float)[3])
        self.env = suite.make(
            self.spec.env_name, robots=cfg.robot, controller_configs=controller,
            has_renderer=False, has_offscreen_renderer=cfg.render, use_camera_obs=False,
            control_freq=cfg.control_freq, horizon=10**9, ignore_done=True, hard_reset=False,
            reward_shaping=False, seed=cfg.model_seed, **self.spec.env_kwargs,
        )
        cams = tuple(self.env.sim.model.camera_names)
        if cfg.render and cfg.camera not in cams:
            self.env.close()
            raise ValueError(f"camera {cfg.camera!r} is not in robosuite's {self.spec.env_name} scene; choose from "
                             f"{', '.join(cams)}")
        if cfg.render and cfg.fast_render:
            self._fast_render()
        self._objects = self._resolve_objects()
        self.robot = self.env.robots[0]
        self._step = 0
        self._last_substeps = 0
        self._hold_quat: np.ndarray | None = None
        self.last_clamp_reason = ""  # the last step's repaired faults, as text ...
        self.last_faults: tuple[str, ...] = ()  # ... and as sim.manip.action.FAULT_KINDS
        self.make_time_s = time.perf_counter() - t0
        log.info("built %s (%s) in %.2f s", self.spec.name, self.spec.env_name, self.make_time_s)

    # ---------------------------------------------------------------- setup
    def _fast_render(self) -> None:
        import mujoco

        ctx = self.env.sim._render_context_offscreen
        model = self.env.sim.model._model
        model.vis.quality.offsamples = 0
        model.mat_reflectance[:] = 0.0
        s = self.config.image_size
        model.vis.global_.offwidth, model.vis.global_.offheight = max(s, 64), max(s, 64)
        if ctx is not None:  # offsamples and buffer size are fixed when the MjrContext is made: remake it
            ctx.gl_ctx.make_current()
            ctx.con.free()
            ctx._set_mujoco_context_and_buffers()
            ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0

    def _resolve_objects(self) -> dict[str, int]:
        by_name = {o.name: o for o in self.env.model.mujoco_objects}
        out = {}
        for ours, theirs in self.spec.objects.items():
            if theirs not in by_name:
                raise RuntimeError(f"{self.spec.env_name} has no object {theirs!r}; has {sorted(by_name)}")
            out[ours] = self.env.sim.model.body_name2id(by_name[theirs].root_body)
        #: the object the task grasps first (the only one for lift / pick_place_can; cubeA for stack)
        self._grasp_object = by_name[next(iter(self.spec.objects.values()))]
        return out

    # ---------------------------------------------------------------- state
    @property
    def instruction(self) -> str:
        return self.spec.instruction

    @property
    def object_names(self) -> list[str]:
        return [*self._objects, *self.spec.targets]

    def ee_pos(self) -> np.ndarray:
        return np.array(self.env.sim.data.site_xpos[self.robot.eef_site_id["right"]], dtype=np.float64)

    def ee_quat(self) -> np.ndarray:
        from scipy.spatial.transform import Rotation as R

        m = np.asarray(self.env.sim.data.site_xmat[self.robot.eef_site_id["right"]]).reshape(3, 3)
        return R.from_matrix(m).as_quat()

    def gripper_opening(self) -> float:
        q = self.env.sim.data.qpos[self.robot._ref_gripper_joint_pos_indexes["right"]]
        return float(abs(q[0] - q[1]))

    def object_positions(self) -> dict[str, np.ndarray]:
        d = self.env.sim.data
        out = {k: np.array(d.body_xpos[i], dtype=np.float64) for k, i in self._objects.items()}
        for t in self.spec.targets:
            out[t] = self._target_position(t)
        return out

    def object_quats(self) -> dict[str, np.ndarray]:
        """Object orientations as xyzw quaternions (targets: identity)."""
        d = self.env.sim.data
        out = {k: np.roll(np.array(d.body_xquat[i], dtype=np.float64), -1) for k, i in self._objects.items()}
        for t in self.spec.targets:
            out[t] = np.array([0.0, 0.0, 0.0, 1.0])
        return out

    def _target_position(self, name: str) -> np.ndarray:
        if name == "can_target":
            return np.array(self.env.target_bin_placements[self.env.object_to_id["can"]], dtype=np.float64)
        raise KeyError(f"unknown target {name!r}")

    def grasped(self) -> bool:
        return bool(self.env._check_grasp(gripper=self.robot.gripper, object_geoms=self._grasp_object))

    def success(self) -> bool:
        return bool(self.env._check_success())

    def render(self, camera: str | None = None) -> np.ndarray | None:
        """The ``image_size`` RGB frame (rows top-down) of the task's camera or of ``camera``, another camera of the
        scene; None when the task does not render."""
        if not self.config.render:
            return None
        if camera is not None and camera not in self.env.sim.model.camera_names:
            raise ValueError(f"camera {camera!r} is not in this scene; choose from "
                             f"{list(self.env.sim.model.camera_names)}")
        s = self.config.image_size
        img = self.env.sim.render(width=s, height=s, camera_name=camera or self.config.camera)
        return np.ascontiguousarray(img[::-1])  # OpenGL rows are bottom-up

    def observation(self) -> dict[str, Any]:
        success = self.success()
        grasped = self.grasped()
        return {
            "rgb": self.render(),
            "ee_pos": self.ee_pos(),
            "ee_quat": self.ee_quat(),
            "gripper": self.gripper_opening(),
            "objects": self.object_positions(),
            "grasped": grasped,
            "success": success,
            "phase": "success" if success else ("grasped" if grasped else "reach"),
            "step": self._step,
            "substeps": self._last_substeps,
            "task": self.spec.name,
            "instruction": self.spec.instruction,
            "done": bool(self.config.max_steps and self._step >= self.config.max_steps),
        }

    # ---------------------------------------------------------------- control
    def reset(self, seed: int | None = None) -> dict[str, Any]:
        """Soft reset (a few ms; the model is built once). ``seed`` fixes the object placement."""
        if seed is not None:
            # the placement samplers hold a reference to env.rng: reseed it in place
            self.env.rng.bit_generator.state = np.random.default_rng(int(seed)).bit_generator.state
        self.env.reset()
        self._step = 0
        self._last_substeps = 0
        self._hold_quat = self.ee_quat()
        return self.observation()

    def step(self, ee_delta_m: Any, gripper: float) -> dict[str, Any]:
        """Move the hand by ``ee_delta_m`` = [dx, dy, dz] metres (clamped to +-``max_delta_m`` per axis; NaN -> 0)
        and apply ``gripper`` (-1 open .. +1 close, 0 holds). Returns the new observation."""
        if self._hold_quat is None:
            raise RuntimeError("call reset() before step()")
        safe = sanitize(ee_delta_m, gripper, self.config.max_delta_m)
        delta, g = safe.delta, safe.gripper
        self.last_faults, self.last_clamp_reason = safe.kinds, safe.reason
        if safe.faults:
            log.debug("step %d: %s", self._step, safe.reason)
        cfg = self.config
        if not cfg.tracking:
            self._send(delta / self._pos_scale, g)
            self._last_substeps = 1
        else:
            target = self.ee_pos() + delta
            prev = self.ee_pos()
            # relative tolerance so millimetre steps are realised too (0.3 mm floor)
            tol = max(3e-4, min(cfg.tol_m, 0.3 * float(np.abs(delta).max())))
            n = 0
            for n in range(1, cfg.max_substeps + 1):  # noqa: B007 - n is the substep count
                err = target - prev
                self._send(cfg.gain * err / self._pos_scale, g)
                cur = self.ee_pos()
                moved = np.abs(cur - prev).max()
                prev = cur
                if np.abs(target - cur).max() < tol and moved < tol:
                    break
            self._last_substeps = n
        self._step += 1
        return self.observation()

    def _send(self, u_pos: np.ndarray, gripper: float) -> None:
        rot = _rotvec_error(self._hold_quat, self.ee_quat()) / self._rot_scale
        action = np.concatenate([np.clip(u_pos, -1, 1), np.clip(rot, -1, 1), [gripper]])
        self.env.step(action)

    def close(self) -> None:
        env, self.env = getattr(self, "env", None), None
        if env is not None:
            env.close()

    def __enter__(self) -> "ManipTask":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
