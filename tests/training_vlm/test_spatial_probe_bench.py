"""The spatial probe benchmark. Slow (--quick, 3-size curriculum, 250 steps per size, three seeds, ~5 min): the
vision features hold the square's side, the VLM fine-tuned on 8 px squares alone stays near chance, the size curriculum
learns them. Fast: the binding mode's command line and summary line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_probe_shows_the_curriculum_effect():
    """Three seeds, because one fine-tuning is a draw: on an Intel AVX-512 box seed 0's curriculum stayed at chance
    (0.50 against 0.49 direct) while seeds 1 and 2 reached 0.82 and 0.85 (direct 0.50, 0.465); on earlier boxes
    seed 0 passed alone."""
    runs = []
    for seed in (0, 1, 2):
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/vlm_spatial_probe.py"), "--quick", "--threads",
                               "2", "--sizes", "24,12,8", "--stage-steps", "250", "--seed", str(seed)],
                              capture_output=True, text=True, timeout=900, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    mean = {k: sum(r[k]["8"] for r in runs) / len(runs) for k in ("probe_flat", "direct", "curriculum")}
    assert mean["probe_flat"] >= 0.8  # the information is in the random-init features
    assert mean["direct"] <= 0.65  # ... but fine-tuning on small squares alone does not find it
    assert mean["curriculum"] >= mean["direct"] + 0.1  # large squares first does


def test_binding_mode_reports_every_seed_and_validates_arguments():
    cmd = [sys.executable, str(ROOT / "benchmarks/vlm_spatial_probe.py"), "--quick", "--threads", "1", "--binding"]
    proc = subprocess.run(cmd + ["--bind-steps", "2", "--bind-seeds", "3"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["task"] == "bind" and last["steps_per_stage"] == 2 and set(last["final"]) == {"3"}
    assert all(0.0 <= v <= 1.0 for v in last["final"].values())
    bad = subprocess.run(cmd + ["--bind-steps", "0"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "--bind-steps must be >= 1" in bad.stderr


@pytest.mark.slow
def test_quick_binding_recipe_beats_chance():
    """The bind preset shortened to 150 steps per stage (~90 s): seed 0 ends at 0.81 on 12 px side-of-colour
    questions (chance 0.50; seed 1 at this length: 0.655, the full 450 steps: 0.89-0.97 over three seeds)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/vlm_spatial_probe.py"), "--quick", "--threads", "2",
                           "--binding", "--bind-steps", "150", "--bind-seeds", "0"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["final"]["0"] >= 0.7
