"""The routing benchmark (``benchmarks/vln_routing.py``) end to end in --quick mode."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_quick_routing_benchmark_compares_the_rules(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/vln_routing.py"), "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    routing = last["routing"]
    assert set(routing) == {"mean-first64", "mean-spread", "memory-4"}
    for r in routing.values():
        assert all(0.0 <= r[k] <= 1.0 for k in ("scene", "env", "joint")) and r["episodes"] == 8
        assert r["joint"] <= min(r["scene"], r["env"]) + 1e-9  # a route is right only where both parts are
    report = json.loads((tmp_path / "vln_routing.json").read_text())
    assert report["routing"] == routing and len(report["tasks"]) == 4
    assert "| memory-4 |" in (tmp_path / "vln_routing.md").read_text()
    assert (tmp_path / "vln_routing.png").stat().st_size > 1000


def test_routing_benchmark_rejects_bad_memories():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/vln_routing.py"), "--memories", "0,abc"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "--memories: comma-separated positive ints" in proc.stderr


def test_quick_routing_benchmark_routes_unseen_pairs_apart(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/vln_routing.py"), "--quick", "--unseen", "1",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "vln_routing.json").read_text())
    assert len(report["tasks"]) == 3 and len(report["unseen"]) == 1 and not set(report["tasks"]) & set(report["unseen"])
    for r in report["routing"].values():  # 2 held-out episodes per task: 6 seen, 2 unseen
        assert r["episodes"] == 6 and r["unseen"]["episodes"] == 2
        assert r["unseen"]["joint"] <= min(r["unseen"]["scene"], r["unseen"]["env"]) + 1e-9
    md = (tmp_path / "vln_routing.md").read_text()
    assert "1 unseen pair," in md and "unseen: scene" in md and md.count("| memory-4 |") == 1


def test_routing_benchmark_rejects_a_negative_unseen_count():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/vln_routing.py"), "--unseen", "-1"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "--unseen must be >= 0" in proc.stderr


@pytest.mark.parametrize("script", ["vln_routing.py", "lifelong_vln.py"])
def test_a_missing_exported_base_is_a_usage_error(script, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--base-dir", str(tmp_path / "none"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2 and "--base-dir: base folder" in proc.stderr and "does not exist" in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("script,args,message", [
    ("lifelong_vln.py", ["--methods", "seq_lora,tuka"], "unknown lifelong VLN method 'tuka'; known: "),
    ("lifelong_vln.py", ["--order-seed", "-1"], "order_seed must be an int in [0, 4294967295], got -1"),
    ("vln_routing.py", ["--scenes", "0"], "n_scenes must be an int in 1..3"),
    ("lifelong_vln.py", ["--quick", "--methods", "tuka"], "unknown lifelong VLN method 'tuka'"),
    ("vln_routing.py", ["--quick", "--order-seed", "-1"], "order_seed must be an int in [0, 4294967295], got -1"),
    ("vln_routing.py", ["--base-config", "{bad_yaml}"], "bad.yaml: not valid YAML"),
])
def test_a_bad_setting_is_a_usage_error_not_a_traceback(script, args, message, tmp_path):
    (tmp_path / "bad.yaml").write_text("image_size: [32\n")
    args = [a.format(bad_yaml=tmp_path / "bad.yaml") for a in args]
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--base-dir", str(tmp_path / "none"),
                           "--out", str(tmp_path / "out"), *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-1500:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
