"""vla_node's observation assembly: one state's stamped inputs + its simulator status, or None."""

from __future__ import annotations

import numpy as np
import pytest

from allday_ros.arm_observation import ARM_INPUTS, arm_observation

pytestmark = pytest.mark.ros


def _msgs(cam=5, ee=5, obj=5, n_objects=2):
    rgb = np.zeros((4, 4, 3), np.uint8)
    pose = (np.array([0.1, 0.2, 0.3]), np.array([0.0, 0.0, 0.0, 1.0]))
    pts = [np.array([float(i), 0.0, 0.8]) for i in range(n_objects)]
    return {"camera": (cam, rgb), "ee_pose": (ee, pose), "object_poses": (obj, pts)}


def test_one_stamp_and_its_status_give_the_observation():
    status = {"stamp_ns": 5, "objects": ["cube", "plate"], "success": True, "phase": "lift", "grasped": 1,
              "gripper": 0.5}
    stamp, obs = arm_observation(_msgs(), status, "pick up the cube", 3)
    assert stamp == 5 and set(obs["objects"]) == {"cube", "plate"}
    assert obs["objects"]["plate"].tolist() == [1.0, 0.0, 0.8] and obs["ee_pos"].tolist() == [0.1, 0.2, 0.3]
    assert (obs["success"], obs["phase"], obs["grasped"], obs["gripper"], obs["status_known"]) == (
        True, "lift", True, 0.5, True)
    assert (obs["instruction"], obs["step"], obs["rgb"].shape) == ("pick up the cube", 3, (4, 4, 3))


@pytest.mark.parametrize("missing", ARM_INPUTS)
def test_a_missing_input_gives_none(missing):
    msgs = _msgs()
    del msgs[missing]
    assert arm_observation(msgs, {}, "go", 0) is None


@pytest.mark.parametrize("stamps", [(5, 5, 4), (6, 5, 5), (5, 4, 5)])
def test_inputs_of_different_states_give_none(stamps):
    assert arm_observation(_msgs(*stamps), {}, "go", 0) is None


def test_a_status_of_another_state_waits_and_no_status_waits_only_when_asked():
    assert arm_observation(_msgs(), {"stamp_ns": 4, "success": True}, "go", 0) is None  # still on its way
    assert arm_observation(_msgs(), {}, "go", 0, wait_status=True) is None
    stamp, obs = arm_observation(_msgs(), {}, "go", 0)  # no status at all: go on, success unknown
    assert stamp == 5 and obs["status_known"] is False and obs["success"] is False


def test_an_unstamped_status_names_objects_but_its_success_is_not_trusted():
    _, obs = arm_observation(_msgs(), {"objects": ["cube", "plate"], "success": True}, "go", 0)
    assert list(obs["objects"]) == ["cube", "plate"]
    assert (obs["success"], obs["status_known"]) == (False, False)  # cannot be tied to this state


def test_names_fall_back_when_the_status_names_another_number_of_objects():
    _, obs = arm_observation(_msgs(n_objects=3), {"stamp_ns": 5, "objects": ["cube"]}, "go", 0)
    assert list(obs["objects"]) == ["object_0", "object_1", "object_2"]
