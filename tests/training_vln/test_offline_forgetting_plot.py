"""scripts/offline_forgetting_plot.py: lifelong runs compared on their offline matrices, grouped by task order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "offline_forgetting_plot.py"
TASKS = ["S0-normal", "S0-low_light"]


def _result(after: list[float], final: list[float]) -> dict:
    drop = sum(a - f for a, f in zip(after[:-1], final[:-1])) / sum(after[:-1])
    return {"avg": {"sr": 0.1}, "offline": {"right_after": {"token_acc": after},
                                            "avg": {"token_acc": sum(final) / len(final)},
                                            "forgetting": {"token_acc": drop}}}


def _report(tmp: Path, name: str, config: dict, results: dict) -> str:
    path = tmp / f"{name}.json"
    base = {t: {"sr": 0.0, "token_acc": acc} for t, acc in zip(TASKS, (0.8, 0.6))}
    path.write_text(json.dumps({"tasks": TASKS, "config": config, "results": results,
                                "references": {"base": base}}))
    return str(path)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_rows_label_tuka_variants_and_count_a_run_once(tmp_path) -> None:
    lora = _report(tmp_path, "lora", {"order_seed": 1},
                   {"seq_lora": _result([0.8, 0.7], [0.6, 0.7]), "no_offline": {"avg": {"sr": 0.2}}})
    again = _report(tmp_path, "again", {"order_seed": 1}, {"seq_lora": _result([0.8, 0.7], [0.6, 0.7])})
    tuka = _report(tmp_path, "tuka", {"order_seed": 1, "tuka_ranks": [8, 8, 64, 64], "dkil_anchor_reused": True,
                                       "dkil_core_fisher": "pair"}, {"tuka_dkil": _result([0.8, 0.7], [0.8, 0.7])})
    other = _report(tmp_path, "other", {"order_seed": 2}, {"tuka_dkil": _result([0.8, 0.7], [0.7, 0.7])})
    out = tmp_path / "plot.png"
    proc = _run(lora, again, tuka, other, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout.strip().splitlines()[-1])["rows"]
    assert [(r["order"].split(":")[0], r["variant"]) for r in rows] == [
        ("order 1", "seq_lora"), ("order 1", "tuka_dkil 8,8,64,64 + anchor reused + pair EWC"),
        ("order 2", "tuka_dkil 8,8,4,4")]
    seq = rows[0]
    assert seq["final"] == pytest.approx(0.65) and seq["after"] == pytest.approx(0.75)
    assert seq["forgetting"] == pytest.approx(0.25) and seq["base"] == pytest.approx(0.7)
    assert "| order 1: S0-normal, S0-low_light | seq_lora | 0.750 | 0.650 | 0.250 | 0.10 |" in proc.stdout
    assert out.stat().st_size > 10_000


def test_conflicting_runs_and_reports_without_offline_figures_are_refused(tmp_path) -> None:
    a = _report(tmp_path, "a", {"order_seed": 1}, {"seq_lora": _result([0.8, 0.7], [0.6, 0.7])})
    b = _report(tmp_path, "b", {"order_seed": 1}, {"seq_lora": _result([0.8, 0.7], [0.7, 0.7])})
    proc = _run(a, b, "--out", str(tmp_path / "p.png"))
    assert proc.returncode == 2 and "two different seq_lora runs of order 1" in proc.stderr
    bare = _report(tmp_path, "bare", {"order_seed": 1}, {"seq_lora": {"avg": {"sr": 0.1}}})
    proc = _run(bare, "--out", str(tmp_path / "p.png"))
    assert proc.returncode == 2 and "no report has offline figures" in proc.stderr
    (tmp_path / "broken.json").write_text("{")
    proc = _run(str(tmp_path / "broken.json"), "--out", str(tmp_path / "p.png"))
    assert proc.returncode == 2 and "not a readable JSON report" in proc.stderr
    assert _run("--help").returncode == 0
