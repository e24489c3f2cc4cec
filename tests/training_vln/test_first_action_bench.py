"""benchmarks/vln_first_action.py: the view split counts every state once, its figures are what the hits say,
and a directory that is not a finished run is a clear command-line error."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import vln_first_action as bench  # noqa: E402

from training.vln.data import Sample  # noqa: E402


def _sample(target: str) -> Sample:
    return Sample(image=None, prompt="go", target=target)


def _env_at(goal_xyz: list[float], heading: float = 0.0) -> SimpleNamespace:
    """A stand-in with the two things goal_bearing_deg reads: the pose and the episode's goal (Habitat frame)."""
    return SimpleNamespace(pose=SimpleNamespace(position=[0.0, 0.0, 0.0], heading=heading),
                           episode=SimpleNamespace(goals=[SimpleNamespace(position=goal_xyz)]))


def test_goal_bearing_follows_habitat_conventions() -> None:
    # heading 0 looks along Habitat -z; CCW (to the left) is positive, as in the turn actions
    assert bench.goal_bearing_deg(_env_at([0.0, 0.0, -2.0])) == pytest.approx(0.0, abs=1e-9)
    assert bench.goal_bearing_deg(_env_at([-2.0, 0.0, 0.0])) == pytest.approx(90.0)
    assert bench.goal_bearing_deg(_env_at([2.0, 0.0, 0.0])) == pytest.approx(-90.0)
    assert abs(bench.goal_bearing_deg(_env_at([0.0, 0.0, 2.0]))) == pytest.approx(180.0)
    # turned 90 degrees left, the goal that was on the left is straight ahead
    assert bench.goal_bearing_deg(_env_at([-2.0, 0.0, 0.0], heading=math.pi / 2)) == pytest.approx(0.0, abs=1e-9)


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
    assert "object_visible" not in rep
    rep = bench.split_report(samples, hits, in_view, visible=[False, True, True, False, True])
    assert rep["object_visible"] == {"states": 3, "accuracy": 0.333, "majority": 0.667,
                                     "teacher": {"forward": 1, "left": 2}}
    assert rep["object_hidden"]["states"] == 2 and rep["object_hidden"]["accuracy"] == 1.0


def test_best_action_given_the_goal_word() -> None:
    samples = [_sample(t) for t in ("forward left", "forward", "left", "right left", "left stop")]
    words = ["middle", "middle", "left", "right", "left"]
    rep = bench.split_report(samples, None, [True, True, True, False, False], goal_words=words)
    # knowing the word predicts every first action here; always answering the majority gets 2 of 5
    assert rep["all"]["best_given_goal_word"] == 1.0 and rep["all"]["majority"] == 0.4
    assert "accuracy" not in rep["all"]
    assert rep["goal_out_of_view"]["best_given_goal_word"] == 1.0
    same = bench.split_report(samples, None, [True] * 5, goal_words=["none"] * 5)
    assert same["all"]["best_given_goal_word"] == same["all"]["majority"] == 0.4


def test_goal_word_accuracy_of_the_navigator() -> None:
    samples = [_sample(t) for t in ("forward left", "forward", "left", "right left", "left stop")]
    words = ["ahead", "ahead", "none", "right", "none"]
    said = ["ahead", "none", "none", None, "left"]
    rep = bench.split_report(samples, None, [True, True, True, False, False], goal_words=words, said=said)
    assert rep["all"]["goal_word_accuracy"] == 0.4
    assert rep["all"]["goal_words_said"] == {"ahead": 1, "none": 2, "None": 1, "left": 1}
    assert rep["goal_in_view"]["goal_word_accuracy"] == 0.667 and rep["goal_out_of_view"]["goal_word_accuracy"] == 0.0
    assert "goal_word_accuracy" not in bench.split_report(samples, None, [True] * 5, goal_words=words)["all"]


def test_teacher_only_run_from_a_config(tmp_path, capsys) -> None:
    cfg = tmp_path / "vln.yaml"
    cfg.write_text("n_scenes: 1\nepisodes_per_scene: 1\neval_per_scene: 2\nsame_room: true\nmin_distance: 1.0\n"
                   "max_distance: 3.0\nmax_steps: 40\nagent: {num_history: 0, num_future_steps: 4}\n")
    assert bench.main(["--config", str(cfg), "--set", "teacher=sightline", "--threads", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["mode"] == "teacher" and out["teacher"] == "sightline"
    assert out["teacher_metrics"]["sr"] == 1.0 and out["teacher_metrics"]["spl"] > 0.5
    assert out["all"]["states"] > 0 and "accuracy" not in out["all"]
    assert out["all"]["majority"] <= out["all"]["best_given_goal_word"] <= 1.0


def test_goal_prefix_targets_count_their_first_action() -> None:
    samples = [_sample("right: left forward"), _sample("none: left"), _sample("forward stop")]
    assert [bench.teacher_first(s) for s in samples] == ["left", "left", "forward"]
    assert bench.split_report(samples, [True, True, False], [True] * 3)["all"]["teacher"] == {"left": 2, "forward": 1}


def test_quick_run_splits_every_state(capsys) -> None:
    assert bench.main(["--quick", "--threads", "1", "--scene"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["all"]["states"] > 0
    assert out["goal_in_view"]["states"] + out["goal_out_of_view"]["states"] == out["all"]["states"]
    assert out["object_visible"]["states"] + out["object_hidden"]["states"] == out["all"]["states"]
    # the untrained backbone is asked where the goal objects are; the report is over every held-out question
    sq = out["scene_questions"]
    assert sq["n"] > 0 and sum(sq["answer_share"].values()) == pytest.approx(1.0, abs=0.01)
    assert sum(out["all"]["teacher"].values()) == out["all"]["states"]
    assert 0.0 <= out["all"]["accuracy"] <= 1.0


def test_a_directory_that_is_not_a_run_is_rejected(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--run", str(tmp_path)])
    assert exc.value.code == 2 and "is not a finished `allday train vln` run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main([])
    with pytest.raises(SystemExit):
        bench.main(["--run", str(tmp_path), "--set", "teacher=sightline"])  # --set needs --config
    with pytest.raises(SystemExit) as exc:
        bench.main(["--config", str(tmp_path / "missing.yaml")])
    assert exc.value.code == 2
