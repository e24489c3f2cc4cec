"""benchmarks/numerics_repro.py: its hashes are deterministic on one machine (else they could not be compared with
another's), it pins the numerics it reports, and one changed setting changes the trained weights."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents.core.numerics import cpu_has

ROOT = Path(__file__).resolve().parents[2]
HAS_AVX2 = cpu_has("avx2")


def _run(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/numerics_repro.py"), "--quick", *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_hashes_repeat_and_name_the_numerics():
    a, b = _run("--steps", "2", "--episodes", "1"), _run("--steps", "2", "--episodes", "1")
    assert re.fullmatch(r"[0-9a-f]{16}", a["weights_sha"]) and a["weights_sha"] == b["weights_sha"]
    assert a["frames"] == b["frames"] and a["frames"]["normal"] != a["frames"]["low_light"]
    assert a["numerics"]["threads"] == 2 and a["steps"] == 2
    if HAS_AVX2:
        assert a["pinned"] == "avx2" and a["numerics"]["cpu_capability"] == "AVX2"
        assert a["numerics"]["env"]["MKL_CBWR"] == "AVX2"
    assert set(a["ops"]) == {"gemm (MKL)", "conv2d (oneDNN)", "softmax, layer_norm, sum (torch)", "gelu (torch)",
                             "exp (torch)", "normal init (torch)"}
    assert a["ops"] == b["ops"] and a["init_weights_sha"] == b["init_weights_sha"] != a["weights_sha"]
    other = _run("--steps", "3", "--episodes", "1", "--pin-numerics", "none")
    assert other["weights_sha"] != a["weights_sha"] and other["frames"] == a["frames"]  # one more step moves them


@pytest.mark.skipif(not HAS_AVX2, reason="needs a CPU with AVX2 to compare its path with the baseline one")
def test_op_hashes_name_the_library_path_that_changed():
    avx2 = _run("--steps", "1", "--episodes", "1", "--pin-numerics", "avx2")
    base = _run("--steps", "1", "--episodes", "1", "--pin-numerics", "default")
    assert base["numerics"]["env"]["MKL_CBWR"] == "COMPATIBLE"
    assert base["ops"]["gemm (MKL)"] != avx2["ops"]["gemm (MKL)"]  # MKL's compatible path sums in another order
    assert base["ops"]["gelu (torch)"] != avx2["ops"]["gelu (torch)"]  # torch's baseline vs AVX2 maths
    assert base["init_weights_sha"] != avx2["init_weights_sha"]
    # each probe sees one path: portable has baseline's MKL branch and AVX2's torch and oneDNN kernels
    portable = _run("--steps", "1", "--episodes", "1", "--pin-numerics", "portable")
    assert portable["ops"]["gemm (MKL)"] == base["ops"]["gemm (MKL)"]
    assert {k: v for k, v in portable["ops"].items() if k != "gemm (MKL)"} == \
        {k: v for k, v in avx2["ops"].items() if k != "gemm (MKL)"}


def test_bad_arguments_are_clear_errors():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/numerics_repro.py"), "--steps", "0"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "--steps, --threads and --episodes must be positive" in proc.stderr


@pytest.mark.slow
def test_variants_change_the_weights_and_the_control_does_not():
    r = _run("--steps", "3", "--episodes", "1", "--variants")
    v = r["variants"]
    assert v["same settings (control)"]["same"] and v["same settings (control)"]["max_abs_diff"] == 0.0
    assert v["same settings (control)"]["weights_sha"] == r["weights_sha"]
    if HAS_AVX2:  # pinned to AVX2, the baseline-ISA kernels reduce in another order
        assert not v["torch kernels: baseline ISA"]["same"] and v["torch kernels: baseline ISA"]["max_abs_diff"] > 0
