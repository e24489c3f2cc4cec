"""sim.manip: the end-effector action, scripted experts (kinematic and in robosuite), metres -> controller scaling."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from agents.core.policy import Policy
from sim.manip import EXPERTS, TASKS, EEDeltaAction, ManipTaskConfig, make_expert
from sim.manip.action import FAULT_KINDS, sanitize, sanitize_gripper
from sim.manip.experts import run_expert

# ------------------------------------------------------------------------------------------- no robosuite needed


def test_import_does_not_import_robosuite():
    code = "import sys, sim.manip; assert 'robosuite' not in sys.modules, 'robosuite imported eagerly'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_robosuite_error_names_the_extra(monkeypatch):
    import builtins

    from sim.manip.env import require_robosuite

    real_import = builtins.__import__

    def fake_import(name, *a, **kw):
        if name == "robosuite" or name.startswith("robosuite."):
            raise ImportError("No module named 'robosuite'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"manip"):
        require_robosuite()


def test_action_parse_and_sanitize():
    a = EEDeltaAction.parse([0.01, -0.02, 0.03, 1.0], phase="lift")
    assert a.delta == (0.01, -0.02, 0.03) and a.gripper == 1.0 and a.phase == "lift"
    assert np.allclose(a.as_array(), [0.01, -0.02, 0.03, 1.0]) and a.as_array().dtype == np.float32
    assert EEDeltaAction.parse({"delta": [0, 0, 1], "gripper": -1, "phase": "x"}).phase == "x"
    assert EEDeltaAction.parse(a) is a
    with pytest.raises(ValueError, match="dx, dy, dz, gripper"):
        EEDeltaAction.parse([1, 2, 3])
    safe = sanitize([0.2, -0.2, 0.01], 3.0, max_delta=0.05)
    assert np.allclose(safe.delta, [0.05, -0.05, 0.01]) and safe.gripper == 1.0
    assert safe.kinds == ("delta-clamp", "gripper-clamp") and "clamped" in safe.reason
    d, g, faults = sanitize([math.nan, 0, 0], math.inf)  # unpacks as (delta, gripper, faults)
    assert np.allclose(d, 0) and g == 0.0 and [f.kind for f in faults] == ["delta-nan", "gripper-nan"]
    assert sanitize([math.nan, 0, 9.0], 0.5).kinds == ("delta-nan",)  # zeroed first, so nothing left to clamp
    ok = sanitize([0.01, 0, 0], -1)
    assert ok.faults == () and ok.reason == "" and ok.gripper == -1.0
    assert set(sanitize([1.0, math.nan, 0], math.nan).kinds) <= set(FAULT_KINDS)
    assert sanitize_gripper(-0.5) == (-0.5, None)
    with pytest.raises(ValueError, match="3 components"):
        sanitize([0.0, 0.0], 0.0)


def test_registries():
    assert {"lift", "stack", "pick_place_can"} <= set(TASKS.names()) <= set(EXPERTS.names()) | set(TASKS.names())
    for name in TASKS.names():
        assert isinstance(make_expert(name), Policy)
    with pytest.raises(ValueError, match="image_size"):
        ManipTaskConfig(image_size=3)
    with pytest.raises(KeyError, match="known"):
        ManipTaskConfig(task="juggle")


def test_lift_expert_on_a_kinematic_arm():
    """An ideal arm (the hand moves exactly by the delta; the cube follows once grasped): phases in order, closes the
    gripper before lifting, every step within the per-axis limit."""
    expert = make_expert("lift")
    ee, cube = np.array([-0.1, 0.0, 1.0]), np.array([0.05, -0.03, 0.83])
    grasped, trace = False, []
    for _ in range(60):
        a = expert.act({"ee_pos": ee.copy(), "objects": {"cube": cube.copy()}, "grasped": grasped})
        trace.append(a)
        assert max(abs(v) for v in a.delta) <= expert.max_step_m + 1e-12
        ee = ee + np.asarray(a.delta)
        if a.phase == "grasp" and np.linalg.norm(ee - cube) < 0.01:
            grasped = True
        if grasped:
            cube = ee.copy()
        if cube[2] > 0.83 + 0.12:
            break
    phases = list(dict.fromkeys(a.phase for a in trace))
    assert phases == ["move above", "descend", "grasp", "lift"], phases
    first_lift = next(i for i, a in enumerate(trace) if a.phase == "lift")
    assert all(a.gripper > 0 for a in trace[first_lift:]) and trace[0].gripper < 0
    assert cube[2] > 0.95


# ------------------------------------------------------------------------------------------------- in robosuite


@pytest.fixture(scope="module")
def lift():
    pytest.importorskip("robosuite", reason="robosuite tasks need the manip extra: pip install -e '.[manip]'")
    from sim.manip import ManipTask

    task = ManipTask(task="lift", image_size=64)
    yield task
    task.close()


def test_observation_contract_and_seeding(lift):
    obs = lift.reset(1)
    assert obs["rgb"].shape == (64, 64, 3) and obs["rgb"].dtype == np.uint8 and obs["rgb"].std() > 5
    assert obs["ee_pos"].shape == (3,) and obs["ee_quat"].shape == (4,)
    assert set(obs["objects"]) == {"cube"} and obs["objects"]["cube"].shape == (3,)
    assert 0.0 < obs["gripper"] < 0.1 and obs["success"] is False and obs["phase"] == "reach"
    assert obs["step"] == 0 and obs["instruction"] == "pick up the red cube"
    again = lift.reset(1)["objects"]["cube"]
    other = lift.reset(2)["objects"]["cube"]
    assert np.allclose(again, obs["objects"]["cube"]) and not np.allclose(other, again)


def test_model_seed_makes_the_world_the_same_in_every_build():
    """robosuite samples the cube's size when it builds the model; the seeded build (the default) gives the same
    world every time, in any process, so a reset seed means the same episode everywhere."""
    pytest.importorskip("robosuite", reason="robosuite tasks need the manip extra: pip install -e '.[manip]'")
    from sim.manip import ManipTask, ManipTaskConfig

    def cube_z(**kw):
        with ManipTask(task="lift", render=False, **kw) as task:
            return float(task.reset(3)["objects"]["cube"][2])

    assert cube_z() == cube_z() == cube_z(model_seed=0)
    assert len({cube_z(model_seed=None) for _ in range(3)}) > 1  # unseeded: robosuite draws a new cube each build
    with pytest.raises(ValueError, match="model_seed"):
        ManipTaskConfig(model_seed=-1)


def test_unknown_camera_is_refused_when_the_task_is_built():
    pytest.importorskip("robosuite", reason="robosuite tasks need the manip extra: pip install -e '.[manip]'")
    from sim.manip import ManipTask

    with pytest.raises(ValueError, match=r"camera 'wristcam' is not in robosuite's Lift scene; choose from .*"
                                         r"robot0_eye_in_hand"):
        ManipTask(task="lift", image_size=32, camera="wristcam")
    with ManipTask(task="lift", render=False, camera="wristcam") as task:  # no frames, no camera needed
        assert task.reset(0)["rgb"] is None


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_metres_to_controller_scaling(lift, axis):
    """A commanded 2 cm along one axis moves the hand about 2 cm (tracking mode), and little along the others."""
    p0 = lift.reset(0)["ee_pos"]
    cmd = np.zeros(3)
    cmd[axis] = 0.02
    moved = lift.step(cmd, -1.0)["ee_pos"] - p0
    assert moved[axis] == pytest.approx(0.02, abs=0.004), moved
    assert np.abs(np.delete(moved, axis)).max() < 0.004, moved


def test_raw_controller_scale_is_a_set_point_offset(lift):
    """OSC_POSE maps +-1 to a +-5 cm set-point offset; one 50 ms control step realises only a fraction of it
    (why ManipTask tracks the target over sub-steps by default)."""
    lift.config.tracking = False
    try:
        p0 = lift.reset(0)["ee_pos"]
        moved = lift.step([0.02, 0.0, 0.0], -1.0)["ee_pos"][0] - p0[0]
    finally:
        lift.config.tracking = True
    assert 0.1 * 0.02 < moved < 0.5 * 0.02, moved


def test_bad_commands_are_sanitised(lift):
    p0 = lift.reset(0)["ee_pos"]
    obs = lift.step([math.nan, 0.0, 0.0], math.nan)
    assert "non-finite" in lift.last_clamp_reason and lift.last_faults == ("delta-nan", "gripper-nan")
    assert np.abs(obs["ee_pos"] - p0).max() < 0.003
    p1 = obs["ee_pos"]
    obs = lift.step([1.0, 0.0, 0.0], -1.0)
    assert "clamped" in lift.last_clamp_reason and lift.last_faults == ("delta-clamp",)
    assert obs["ee_pos"][0] - p1[0] < 0.05 + 0.01


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scripted_lift_succeeds(lift, seed):
    res = run_expert(lift, make_expert("lift"), seed=seed, max_steps=60)
    assert res["success"], res
    assert res["phases"][:3] == ["move above", "descend", "grasp"]


@pytest.mark.parametrize("task_name", ["stack", "pick_place_can"])
def test_scripted_stack_and_pick_place_succeed(task_name):
    pytest.importorskip("robosuite", reason="robosuite tasks need the manip extra: pip install -e '.[manip]'")
    from sim.manip import ManipTask

    with ManipTask(task=task_name, render=False) as task:
        res = run_expert(task, make_expert(task_name), seed=0, max_steps=150)
    assert res["success"], res
    assert "release" in res["phases"]


@pytest.mark.slow
@pytest.mark.parametrize("task_name", ["lift", "stack", "pick_place_can"])
def test_scripted_experts_ten_seeds(task_name):
    pytest.importorskip("robosuite", reason="robosuite tasks need the manip extra: pip install -e '.[manip]'")
    from sim.manip import ManipTask

    with ManipTask(task=task_name, render=False) as task:
        wins = [run_expert(task, make_expert(task_name), seed=s, max_steps=200)["success"] for s in range(10)]
    assert sum(wins) >= 9, wins
