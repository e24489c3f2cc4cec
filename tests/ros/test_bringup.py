"""bringup starts configured nodes in their own processes and shuts them down cleanly; launch files are sound."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from std_msgs.msg import String

from allday_ros.bringup import BringupConfig
from tests.ros.conftest import ROOT, ros_env, spin_until

pytestmark = pytest.mark.ros
CONFIG = ROOT / "ros2_ws" / "src" / "allday_ros" / "config"


def test_bringup_runs_loop_and_stops_on_sigint(tmp_path, ros_node):
    params = yaml.safe_load((CONFIG / "demo_params.yaml").read_text())
    params["sim_node"]["ros__parameters"].update(width=32, height=32, quality="fast", scenes=1, per_scene=1)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "bringup.yaml").write_text(yaml.safe_dump({"params_file": "params.yaml", "nodes": [
        {"executable": "sim_node"}, {"executable": "vln_node"}]}))
    events = []
    ros_node.create_subscription(String, "/episode/status", lambda m: events.append(m.data), 50)
    proc = subprocess.Popen([sys.executable, "-m", "allday_ros.bringup", str(tmp_path / "bringup.yaml")],
                            env=ros_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert spin_until(ros_node, lambda: any('"event": "done"' in e for e in events), timeout=90), \
            "no episode completed under bringup"
    finally:
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out
    assert time.monotonic() - t0 < 15


def test_bad_bringup_config_is_a_clear_error(tmp_path):
    (tmp_path / "b.yaml").write_text("nodes:\n  - executable: warp_drive\n")
    with pytest.raises(ValueError, match="unknown executable"):
        BringupConfig.load(tmp_path / "b.yaml")
    res = subprocess.run([sys.executable, "-m", "allday_ros.bringup", str(tmp_path / "missing.yaml")],
                         env=ros_env(), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "not found" in res.stderr


def test_shipped_bringup_configs_load():
    for cfg in CONFIG.glob("*.yaml"):
        data = yaml.safe_load(cfg.read_text())
        if "nodes" in data:
            loaded = BringupConfig.load(cfg)
            assert loaded.params_file is not None and loaded.params_file.exists()


def _launch_refs(path: Path) -> tuple[set[str], set[str]]:
    tree = ast.parse(path.read_text())
    exes, files = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "executable" and isinstance(node.value, ast.Constant):
            exes.add(node.value.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".yaml"):
            files.add(node.value)
    return exes, files


def test_launch_files_name_existing_executables_and_params():
    setup = (ROOT / "ros2_ws" / "src" / "allday_ros" / "setup.py").read_text()
    launch_files = sorted((ROOT / "launch").glob("*.launch.py"))
    assert launch_files
    for lf in launch_files:
        exes, files = _launch_refs(lf)
        assert exes, lf
        for exe in exes:
            assert f'"{exe} = allday_ros.' in setup, f"{lf.name}: executable {exe} is not an entry point"
            assert (ROOT / "ros2_ws" / "src" / "allday_ros" / "allday_ros" / f"{exe}.py").exists()
        for f in files:
            assert (CONFIG / f).exists(), f"{lf.name}: parameter file {f} missing"
