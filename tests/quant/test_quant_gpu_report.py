"""scripts/quant_gpu_report.py: the GPU part of a quant_speed run as a table, plot and JSON line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "quant_gpu_report.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_recorded_h200_run_renders(tmp_path: Path) -> None:
    res = _run(str(ROOT / "docs" / "quant_gpu_h200.json"), "--md", str(tmp_path / "t.md"),
               "--png", str(tmp_path / "p.png"))
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["largest"] == "4096 x 4096 x 11008"
    assert 0.5 < out["w8a8_vs_bf16"] < 1.0  # 0.501 ms bf16 / 0.671 ms W8A8
    md = (tmp_path / "t.md").read_text()
    assert "| 4096 x 4096 x 11008 | 0.501 (738) |" in md and "31.121 (12)" in md  # the old tiles, 46x slower
    assert "with the code range checks" in md  # that run predates check_codes
    assert (tmp_path / "p.png").stat().st_size > 10_000


def test_a_run_without_gpu_rows_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "cpu.json"
    f.write_text("log line\n" + json.dumps({"benchmark": "quant_speed", "gpu": {"skipped": "no CUDA device"}}))
    res = _run(str(f))
    assert res.returncode == 2 and "no GPU rows" in res.stderr and "no CUDA device" in res.stderr
    (tmp_path / "bad.json").write_text("{not json")
    res = _run(str(tmp_path / "bad.json"))
    assert res.returncode == 2 and "not a quant_speed JSON line" in res.stderr
