"""benchmarks/vln_first_action.py: the view split counts every state once, its figures are what the hits say,
and a directory that is not a finished run is a clear command-line error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import vln_first_action as bench  # noqa: E402

from training.vln.data import Sample  # noqa: E402


def _sample(target: str) -> Sample:
    return Sample(image=None, prompt="go", target=target)


def test_split_report_counts_and_majorities() -> None:
    samples = [_sample(t) for t in ("forward left", "forward", "left", "right left", "left stop")]
    hits = [True, False, True, True, False]
    in_view = [True, True, True, False, False]
    rep = bench.split_report(samples, hits, in_view)
    assert rep["all"] == {"states": 5, "accuracy": 0.6, "majority": 0.4,
                          "teacher": {"forward": 2, "left": 2, "right": 1}}
    assert rep["goal_in_view"]["accuracy"] == 0.667 and rep["goal_in_view"]["majority"] == 0.667
    assert rep["goal_out_of_view"] == {"states": 2, "accuracy": 0.5, "majority": 0.5,
                                       "teacher": {"right": 1, "left": 1}}
    assert bench.split_report(samples[:1], hits[:1], [True])["goal_out_of_view"] == {"states": 0}


def test_quick_run_splits_every_state(capsys) -> None:
    assert bench.main(["--quick", "--threads", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["all"]["states"] > 0
    assert out["goal_in_view"]["states"] + out["goal_out_of_view"]["states"] == out["all"]["states"]
    assert sum(out["all"]["teacher"].values()) == out["all"]["states"]
    assert 0.0 <= out["all"]["accuracy"] <= 1.0


def test_a_directory_that_is_not_a_run_is_rejected(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--run", str(tmp_path)])
    assert exc.value.code == 2 and "is not a finished `allday train vln` run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main([])
