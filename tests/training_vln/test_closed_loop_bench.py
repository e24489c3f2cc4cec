"""benchmarks/vln_closed_loop.py: every run is scored under every condition and execute_steps on the same episodes,
the blind floor and the margins are what the rows say, and runs that would see different episodes are refused."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import vln_closed_loop as bench  # noqa: E402

import training.vln  # noqa: E402,F401 - preloads triton's LLVM before any EGL context
from training.vln.config import VLNTrainConfig  # noqa: E402

TINY = dict(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=128, vision_hidden_size=32,
            vision_layers=1, vision_heads=2, vision_intermediate_size=64, bpe_vocab_size=400)


@pytest.fixture(scope="module")
def cfg() -> VLNTrainConfig:
    return VLNTrainConfig(n_scenes=1, eval_per_scene=2, same_room=True, min_distance=1.0, max_distance=3.0,
                          max_steps=10, image_size=32, tiny=TINY, agent={"num_history": 0, "num_future_steps": 3})


@pytest.fixture(scope="module")
def run_dir(cfg, tmp_path_factory) -> Path:
    """A finished-run layout: metrics.json with the config and final/vlm (an untrained tiny backbone)."""
    from training.vln.navigator import build_backbone

    root = tmp_path_factory.mktemp("run")
    (root / "final").mkdir()
    build_backbone(cfg, root / "final" / "vlm", ["go to the sofa"])
    (root / "metrics.json").write_text(json.dumps({"config": cfg.to_dict()}))
    return root


def test_rows_blind_floor_and_margin(run_dir, capsys) -> None:
    assert bench.main(["--run", str(run_dir), "--conditions", "normal,low_light", "--execute-steps", "0,1",
                       "--blind", "2,5", "--threads", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = out["rows"]
    assert [(r["condition"], r["execute_steps"]) for r in rows] == [("normal", 0), ("normal", 1), ("low_light", 0),
                                                                    ("low_light", 1)]
    assert all(r["episodes"] == 2 and 0.0 <= r["sr"] <= r["osr"] <= 1.0 for r in rows)
    assert {(r["run"], r["condition"]) for r in out["blind_rows"]} == {(f"blind{n}", c) for n in (2, 5)
                                                                       for c in ("normal", "low_light")}
    for cond in ("normal", "low_light"):
        floor = [r for r in out["blind_rows"] if r["condition"] == cond]
        assert out["blind"][cond]["sr"] == max(r["sr"] for r in floor)
        best = max(r["sr"] for r in rows if r["condition"] == cond)
        assert out["margin"][str(run_dir)][cond] == pytest.approx(best - out["blind"][cond]["sr"], abs=1e-9)
    # the blind policy sees nothing: the same SR in the dark as in normal light
    assert [r["sr"] for r in out["blind_rows"] if r["condition"] == "normal"] == \
        [r["sr"] for r in out["blind_rows"] if r["condition"] == "low_light"]


def test_runs_on_other_episodes_are_refused(cfg, run_dir, tmp_path, capsys) -> None:
    other = tmp_path / "other"
    (other / "final").mkdir(parents=True)
    (other / "final" / "vlm").symlink_to(run_dir / "final" / "vlm")
    (other / "metrics.json").write_text(json.dumps({"config": dataclasses.replace(cfg, max_distance=5.0).to_dict()}))
    with pytest.raises(SystemExit) as exc:
        bench.main(["--run", str(run_dir), str(other)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "differs from" in err and "max_distance" in err
    with pytest.raises(ValueError, match="max_distance"):
        bench.check_same_episodes([cfg, dataclasses.replace(cfg, max_distance=5.0)], ["a", "b"])
    bench.check_same_episodes([cfg, dataclasses.replace(cfg, steps=7, teacher="search")], ["a", "b"])  # training only


def test_bad_arguments_are_command_line_errors(tmp_path, capsys) -> None:
    for argv, msg in ((["--run", str(tmp_path)], "is not a finished `allday train vln` run"),
                      ([], "give --run"),
                      (["--quick", "--conditions", "dusk"], "unknown ['dusk']"),
                      (["--quick", "--blind", "4,x"], "comma-separated integers"),
                      (["--quick", "--execute-steps", "-1"], "must be >= 0")):
        with pytest.raises(SystemExit) as exc:
            bench.main(argv)
        assert exc.value.code == 2
        assert msg in capsys.readouterr().err, argv
    (tmp_path / "final" / "vlm").mkdir(parents=True)
    (tmp_path / "final" / "vlm" / "config.json").write_text("{}")
    (tmp_path / "metrics.json").write_text("{not json")
    with pytest.raises(ValueError, match="no readable config"):
        bench.load_run(tmp_path)
