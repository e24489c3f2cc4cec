"""scripts/dkil_sweep_plot.py: TuKA's trade-off over DKIL's EWC weight from lifelong_vln.json reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "dkil_sweep_plot.py"
TASKS = ["S0-normal", "S0-low_light", "S1-normal"]


def _report(tmp: Path, name: str, w: float | None, diag: list[float], f_sr: float | None,
            tasks: list[str] = TASKS) -> str:
    sr = [[diag[k] if k == t else None for t in range(len(tasks))] for k in range(len(tasks))]
    res = {"matrices": {"sr": sr}, "avg": {"sr": 0.1}, "forgetting": {"sr": {"relative": f_sr}}}
    cfg = {} if w is None else {"dkil_w_ewc": w}
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({"tasks": tasks, "config": cfg, "results": {"tuka_dkil": res}}))
    return str(path)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_rows_split_normal_and_shifted_tasks_and_sort_by_weight(tmp_path) -> None:
    old = _report(tmp_path, "old", None, [0.3, 0.0, 0.1], 0.35)  # predates the field: the default 0.2
    zero = _report(tmp_path, "zero", 0.0, [0.2, 0.4, 0.0], None)
    out = tmp_path / "sweep.png"
    proc = _run(old, zero, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout.strip().splitlines()[-1])["rows"]
    assert [r["w_ewc"] for r in rows] == [0.0, 0.2]
    assert rows[0]["after_normal"] == 0.1 and rows[0]["after_shifted"] == 0.4 and rows[0]["f_sr"] is None
    assert abs(rows[1]["after_normal"] - 0.2) < 1e-12 and rows[1]["after_shifted"] == 0.0
    assert out.stat().st_size > 5000


def test_bad_reports_are_refused(tmp_path) -> None:
    a = _report(tmp_path, "a", 0.0, [0.2, 0.4, 0.0], 0.5)
    again = _report(tmp_path, "again", 0.0, [0.1, 0.1, 0.1], 0.5)
    other = _report(tmp_path, "other", 0.1, [0.1, 0.1], 0.5, tasks=["S0-normal", "S1-normal"])
    (tmp_path / "none.json").write_text(json.dumps({"tasks": TASKS, "results": {}}))
    for args, msg in (((a, again), "one report per weight"), ((a, other), "another task sequence"),
                      ((str(tmp_path / "none.json"),), "no tuka_dkil result"),
                      ((str(tmp_path / "missing.json"),), "missing.json")):
        proc = _run(*args)
        assert proc.returncode == 2 and msg in proc.stderr, proc.stderr
