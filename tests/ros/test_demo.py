"""`allday demo --json` over ROS 2 (what `make demo` runs)."""

import json

import pytest

from training.cli import main

pytestmark = pytest.mark.ros


def test_demo_over_ros_prints_wire_metrics(tmp_path, capsys):
    assert main(["demo", "--episodes", "2", "--agents", "oracle", "--transport", "ros2", "--json", "--quiet",
                 "--size", "48", "--quality", "fast", "--out", str(tmp_path), "--timeout", "120"]) == 0
    res = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert res["transport"] == "ros2" and res["episodes"] == 2
    m = res["metrics"]["oracle"]
    assert m["sr"] == 1.0 and m["spl"] >= 0.9 and m["ne"] < 0.5
    assert (tmp_path / "episode_0_ros.mp4").stat().st_size > 1000
