"""The lifelong benchmark end to end in --quick mode (slow: trains a tiny base and four methods)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_benchmark_prints_json(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/lifelong_vln.py"), "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    methods = {"seq_lora", "ewc_lora", "oracle_multi_lora", "tuka_dkil"}
    assert set(last["avg_sr"]) == methods and set(last["forgetting"]) == methods
    assert all(0.0 <= v <= 1.0 for v in last["avg_sr"].values())
    assert set(last["reference_avg_sr"]) == {"base", "blind"}
    assert last["served_parity"]["routes_equal"] and last["served_parity"]["max_logit_diff"] < 1e-3
    report = json.loads((tmp_path / "lifelong_vln.json").read_text())
    assert len(report["tasks"]) == 3 and len(report["unseen"]) == 1
    assert set(report["references"]["blind"]) == set(report["tasks"]) | set(report["unseen"])
    tuka = report["results"]["tuka_dkil"]  # a route is right only where both its parts are
    assert tuka["routing_acc"] <= min(tuka["routing_scene_acc"], tuka["routing_env_acc"]) + 1e-9
    for key in ("routing_acc", "routing_scene_acc", "routing_env_acc"):  # all tasks = 3 seen + 1 unseen, per task
        assert tuka[key] == pytest.approx((3 * tuka[f"{key}_seen"] + tuka[f"{key}_unseen"]) / 4)
    assert last["routing_acc_seen"] == tuka["routing_acc_seen"] and last["routing_acc_unseen"] == tuka[
        "routing_acc_unseen"]
    assert set(last["oracle_route_unseen_sr"]) == {"tuka_dkil"}  # the composed unseen SR, routed methods only
    assert last["oracle_route_unseen_sr"]["tuka_dkil"] == tuka["oracle_route"]["unseen"]["sr"]
    assert (tmp_path / "lifelong_vln.png").stat().st_size > 1000
    num = report["numerics"]  # which CPU kernels and threads decided the figures
    assert num["threads"] == 1 and num["pinned"] in ("avx2", None)
    if num["pinned"]:
        assert num["cpu_capability"] == "AVX2" and num["env"]["MKL_CBWR"] == "AVX2"


@pytest.mark.slow
def test_quick_benchmark_with_the_projector_adapted(tmp_path):
    """... and with scene questions in every adaptation batch (``--cotrain``)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/lifelong_vln.py"), "--quick", "--adapt-projector",
                           "--methods", "tuka_dkil", "--cotrain", "0.5", "--out", str(tmp_path),
                           "--progress-dir", str(tmp_path / "progress")],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["served_parity"]["routes_equal"] and last["served_parity"]["max_logit_diff"] < 1e-3
    report = json.loads((tmp_path / "lifelong_vln.json").read_text())
    assert report["config"]["adapt_projector"] is True and report["config"]["cotrain"] == 0.5
    exported = [json.loads(p.read_text()) for p in tmp_path.rglob("vln_config.json")]
    assert exported and all(c["routing_features"] == "vision_tower" for c in exported)
    # saved after each task, then removed once the report holds the result
    assert (tmp_path / "progress").is_dir() and not list((tmp_path / "progress").iterdir())


@pytest.mark.slow
def test_quick_benchmark_never_overwrites_progress_and_refuses_a_corrupt_one(tmp_path):
    stray = tmp_path / "progress" / "seq_lora.pt"
    stray.parent.mkdir()
    stray.write_bytes(b"junk")
    cmd = [sys.executable, str(ROOT / "benchmarks/lifelong_vln.py"), "--quick", "--methods", "seq_lora",
           "--out", str(tmp_path), "--progress-dir", str(stray.parent)]
    fresh = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert fresh.returncode == 2 and "pass --resume to go on from it or delete it" in fresh.stderr
    resumed = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert resumed.returncode == 2 and "not a readable lifelong progress file" in resumed.stderr
    assert stray.read_bytes() == b"junk" and not (tmp_path / "lifelong_vln.json").exists()
    from training.vln.resume import DirLock

    lock = DirLock(stray.parent)  # a run already working in that directory
    try:
        busy = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    finally:
        lock.release()
    assert busy.returncode == 2 and "in use by another lifelong run" in busy.stderr
    assert stray.read_bytes() == b"junk"
