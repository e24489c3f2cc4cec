"""The blind replay floor of the VLM2VLA benchmark: the mean demonstration, and its open-loop rollout in robosuite."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from training.vla.blind import Trajectory, mean_trajectory, replay_rollout


def _ep(deltas: list[list[float]], grip: list[float]) -> SimpleNamespace:
    return SimpleNamespace(deltas=np.asarray(deltas, np.float32), gripper=np.asarray(grip, np.float32))


def test_mean_trajectory_averages_running_demos_to_the_median_length():
    a = _ep([[0.02, 0, 0], [0.0, 0.01, 0], [0, 0, 0.03]], [-1, 1, 1])
    b = _ep([[0.04, 0, 0], [0.0, -0.03, 0]], [-1, -1])
    c = _ep([[0.0, 0, 0], [0.0, 0.02, 0], [0, 0, 0.01], [0, 0, 0.05]], [-1, 1, 1, 1])
    tr = mean_trajectory([a, b, c])
    assert len(tr.deltas) == 3                                  # median of 3, 2, 4
    np.testing.assert_allclose(tr.deltas[0], [0.02, 0, 0], atol=1e-7)
    np.testing.assert_allclose(tr.deltas[1], [0, 0, 0], atol=1e-7)     # (0.01 - 0.03 + 0.02) / 3
    np.testing.assert_allclose(tr.deltas[2], [0, 0, 0.02], atol=1e-7)  # b has ended: mean of a and c
    assert tr.gripper.tolist() == [-1, 1, 1]                    # step 1: mean +1/3 -> closed


def test_bad_trajectories_are_rejected():
    with pytest.raises(ValueError, match="no demonstrations"):
        mean_trajectory([])
    with pytest.raises(ValueError, match="NaN"):
        mean_trajectory([_ep([[np.nan, 0, 0]], [1])])
    with pytest.raises(ValueError, match="gripper"):
        Trajectory(np.zeros((2, 3), np.float32), np.zeros(3, np.float32))


def test_replay_of_a_demo_lifts_and_standing_still_does_not(tmp_path):
    pytest.importorskip("robosuite")
    from sim.manip import ManipTask
    from training.vla.data.robosuite_source import record_robosuite

    ep = record_robosuite("lift", 1, image_size=32, seed=3, cache_dir=tmp_path, progress=False)[0]
    task = ManipTask(task="lift", image_size=32)
    try:
        own = replay_rollout(Trajectory(ep.deltas, ep.gripper), task, [3], max_steps=40)
        still = replay_rollout(Trajectory(np.zeros((5, 3), np.float32), -np.ones(5, np.float32)), task, [3, 4],
                               max_steps=8)
    finally:
        task.close()
    assert own["success"] == 1.0 and own["steps"] <= len(ep.deltas) + 2   # the expert's own actions, same seed
    assert own["succeeded"] == [3]                                         # which episodes, for paired comparisons
    assert still == {"episodes": 2, "success": 0.0, "steps": 16, "succeeded": []}  # runs to max_steps, no lift


def test_demonstrations_own_language_lifts_and_a_lossy_codec_does_not(tmp_path):
    pytest.importorskip("robosuite")
    from agents.vla.codecs import make_codec
    from sim.manip import ManipTask
    from training.vla.blind import language_replay_rollout
    from training.vla.data.robosuite_source import record_robosuite
    from training.vla.relabel import ScriptedRelabeller

    lang = ScriptedRelabeller().relabel_all(record_robosuite("lift", 2, image_size=32, seed=3, cache_dir=tmp_path,
                                                             progress=False))

    class NoMotion:   # a codec that keeps the gripper but loses every motion
        def encode(self, chunk):
            return chunk

        def decode(self, chunk):
            out = np.array(chunk, dtype=np.float64)
            out[:, :3] = 0.0
            return out

    task = ManipTask(task="lift", image_size=32)
    try:
        ok = language_replay_rollout(lang, make_codec("language"), task, 0.03, 6, max_steps=40)
        lossy = language_replay_rollout(lang, NoMotion(), task, 0.03, 6, max_steps=40)
    finally:
        task.close()
    assert ok["success"] == 1.0 and ok["episodes"] == 2
    assert lossy["success"] == 0.0
