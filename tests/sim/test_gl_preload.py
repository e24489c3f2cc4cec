"""Rendering then importing triton must not crash the process (Mesa LLVM vs triton LLVM clash)."""

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")

SCRIPT = """
from sim.nav.renderer import NavRenderer
from sim.nav.mjcf import QUALITIES
xml = "<mujoco><worldbody><geom size='1'/><body name='a'><camera name='agent'/></body></worldbody></mujoco>"
r = NavRenderer(xml, 32, 24, QUALITIES["fast"])
import torch._dynamo  # imports triton lazily: crashed with SIGSEGV before sim.core.gl.prepare_gl
print("ok")
"""


def test_render_then_triton_import_survives():
    env = {**os.environ, "MUJOCO_GL": "egl", "PYOPENGL_PLATFORM": "egl"}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert out.stdout.strip().endswith("ok")
