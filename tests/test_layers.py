"""Layer contracts of DESIGN.md and the light `import agents`."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    res = subprocess.run([str(exe)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "broken" in res.stdout and " 0 broken" in res.stdout


def test_import_agents_is_light():
    code = ("import sys, agents, agents.core; heavy = [m for m in ('torch', 'rclpy', 'triton', 'mujoco', "
            "'transformers', 'cv2', 'flwr') if m in sys.modules]; print(','.join(heavy))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"import agents pulled in heavy modules: {res.stdout.strip()}"


def test_ros_nodes_never_import_training():
    for py in (ROOT / "ros2_ws").rglob("*.py"):
        text = py.read_text()
        assert "import training" not in text and "from training" not in text, py


def test_ruff_clean():
    exe = Path(sys.executable).with_name("ruff")
    res = subprocess.run([str(exe), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:]
