"""Headless MuJoCo RGB-D rendering from the agent's egocentric camera."""

from __future__ import annotations

import logging
import math
import os

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")
import mujoco  # noqa: E402  (MUJOCO_GL must be set first)

from sim.core.gl import prepare_gl  # noqa: E402
from sim.nav.mjcf import RenderQuality  # noqa: E402

log = logging.getLogger(__name__)


def camera_quat(phi: float) -> np.ndarray:
    """MuJoCo camera quaternion looking along yaw ``phi`` (camera -z forward, +y up)."""
    f = np.array([math.cos(phi), math.sin(phi), 0.0])
    up = np.array([0.0, 0.0, 1.0])
    right = np.cross(f, up)
    mat = np.stack([right, up, -f], axis=1)  # columns: camera x, y, z in world
    q = np.zeros(4)
    mujoco.mju_mat2Quat(q, mat.reshape(-1))
    return q


class NavRenderer:
    """Owns one compiled model and one GL context; renders RGB (uint8) and depth (float32 metres)."""

    def __init__(self, xml: str, width: int, height: int, quality: RenderQuality, fog: bool = False,
                 camera_height: float = 1.25, max_depth: float = 10.0) -> None:
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.data = mujoco.MjData(self.model)
        mujoco.mj_kinematics(self.model, self.data)
        self.cam_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, "agent")
        self.width, self.height = int(width), int(height)
        self.camera_height = float(camera_height)
        self.max_depth = float(max_depth)
        prepare_gl()
        self._renderer = mujoco.Renderer(self.model, self.height, self.width)
        flags = self._renderer.scene.flags
        flags[mujoco.mjtRndFlag.mjRND_SHADOW] = int(quality.shadows)
        flags[mujoco.mjtRndFlag.mjRND_FOG] = int(fog)
        flags[mujoco.mjtRndFlag.mjRND_SKYBOX] = 1
        self._opt = mujoco.MjvOption()
        self._closed = False

    def set_pose(self, x: float, y: float, phi: float) -> None:
        self.model.cam_pos[self.cam_id] = (x, y, self.camera_height)
        self.model.cam_quat[self.cam_id] = camera_quat(phi)
        mujoco.mj_camlight(self.model, self.data)

    def render(self, x: float, y: float, phi: float, depth: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """RGB (HxWx3 uint8) and, if asked, depth (HxW float32 metres, clipped to max_depth)."""
        self.set_pose(x, y, phi)
        r = self._renderer
        # keep scene flags: update_scene resets them only through scene_option, which we leave default
        shadow = r.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW]
        fog = r.scene.flags[mujoco.mjtRndFlag.mjRND_FOG]
        r.update_scene(self.data, camera=self.cam_id)
        r.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = shadow
        r.scene.flags[mujoco.mjtRndFlag.mjRND_FOG] = fog
        rgb = r.render()
        d = None
        if depth:
            r.enable_depth_rendering()
            d = r.render()
            r.disable_depth_rendering()
            np.minimum(d, self.max_depth, out=d)
            d = d.astype(np.float32, copy=False)
        return rgb, d

    def segment(self, x: float, y: float, phi: float) -> np.ndarray:
        """Per-pixel MuJoCo geom id (HxW int32, -1 where no geom, e.g. the sky) seen from the pose."""
        self.set_pose(x, y, phi)
        r = self._renderer
        r.update_scene(self.data, camera=self.cam_id)
        r.enable_segmentation_rendering()
        try:
            seg = r.render()
        finally:
            r.disable_segmentation_rendering()
        ids = seg[..., 0].astype(np.int32)
        ids[seg[..., 1] != int(mujoco.mjtObj.mjOBJ_GEOM)] = -1
        return ids

    def geom_id(self, name: str) -> int:
        """Geom id of a named geom (-1 if absent)."""
        return int(mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, name))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._renderer.close()
            except Exception as exc:  # pragma: no cover - GL teardown noise at exit
                log.debug("renderer close: %s", exc)

    def __del__(self) -> None:  # pragma: no cover
        self.close()
