"""A learned VLM2VLA policy (tiny PaliGemma steered to write a two-subtask plan) served by ``vla_node`` drives
robosuite Lift in ``manip_sim_node`` over ROS 2: subtasks, language action chunks, clamped deltas on the wire."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.ros.conftest import spin_until

pytestmark = pytest.mark.ros

pytest.importorskip("robosuite", reason="manip_sim_node needs robosuite (the manip extra)")
pytest.importorskip("peft", reason="the VLA policy needs the vlm extra")
from tests.ros.test_vla_node import ArmCommand, ExecuteInstruction, Goal, change_state, get_state, node_env  # noqa: E402

INS = "pick up the red cube"
LIFT_PLAN = "move up, then close the gripper"


def _steered_policy(out) -> None:
    """A tiny random-weight VLM fitted (full fine-tune, fixed batch) to answer the three prompt levels."""
    import torch

    from agents.vla import VLAPolicy, VLAPolicyConfig, prompts
    from agents.vlm import MICRO_SIZES, TinyVLMConfig, build_tiny_vlm, collate, load_vlm, training_example

    d = build_tiny_vlm(out / "vlm", config=TinyVLMConfig(**MICRO_SIZES))
    b = load_vlm(d)
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(2)]
    ex = [(im, p, t) for im in imgs for p, t in (
        (prompts.subtasks_prompt(INS), "descend; lift"),
        (prompts.motion_prompt(INS, "descend"), "move down"),
        (prompts.motion_prompt(INS, "lift"), LIFT_PLAN),
        (prompts.actions_prompt(INS, "descend", "move down"), "[[0.0, 0.0, -3.0, 1]]"),
        (prompts.actions_prompt(INS, "lift", LIFT_PLAN), "[[0.0, 0.0, 0.0, 0], [0.0, 0.0, 4.0, 0]]"),
    )]
    torch.manual_seed(0)
    batch = collate(b, [training_example(b, im, p, t) for im, p, t in ex])
    opt = torch.optim.AdamW(b.model.parameters(), lr=1e-2)
    b.model.train()
    for _ in range(150):
        loss = b.model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1, loss.item()
    b.model.eval()
    VLAPolicy(b, VLAPolicyConfig(resize_images=True, max_subtask_retries=1)).save_pretrained(out / "policy")


def test_vlm2vla_policy_runs_a_lift_episode_over_ros(tmp_path, start_node, ros_node):
    from lifecycle_msgs.msg import Transition
    from rclpy.action import ActionClient
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    from tests.ros.test_vla_node import call

    _steered_policy(tmp_path)
    env = node_env()
    sim = start_node("manip_sim_node", "-p", "task:=lift", "-p", "image_size:=64", "-p", "seed:=3", env=env)
    vla = start_node("vla_node", "-p", "policy:=vlm2vla", "-p", f"checkpoint:={tmp_path / 'policy'}",
                     "-p", "max_delta:=0.01", "-p", "stale_timeout:=5.0", env=env)
    status: list[dict] = []
    deltas: list = []
    ros_node.create_subscription(String, "/manip/status", lambda m: status.append(json.loads(m.data)), 50)
    ros_node.create_subscription(ArmCommand, "/arm_cmd", deltas.append, 200)
    assert spin_until(ros_node, lambda: bool(status) or sim.proc.poll() is not None, timeout=60), "no /manip/status"
    assert sim.proc.poll() is None and vla.proc.poll() is None, "a node exited at start-up"
    assert get_state(ros_node) == "unconfigured"
    assert change_state(ros_node, Transition.TRANSITION_CONFIGURE), "configure failed (policy did not load)"
    assert change_state(ros_node, Transition.TRANSITION_ACTIVATE)
    client = ActionClient(ros_node, ExecuteInstruction, "/vla/execute_instruction")
    assert client.wait_for_server(timeout_sec=20)
    assert call(ros_node, ros_node.create_client(Trigger, "/manip_sim_node/reset"), Trigger.Request()).success
    goal = Goal(ros_node, client, INS, timeout_s=120.0, max_steps=40)
    assert goal.accepted
    _, result = goal.result(timeout=150)
    fb = goal.feedback
    # the policy acted: its own subtasks, in order, as feedback; every command within the 1 cm clamp
    assert result.steps >= 3 and len(fb) == result.steps, result.message
    phases = list(dict.fromkeys(f.subtask for f in fb))
    assert phases[0] == "descend" and set(phases) <= {"descend", "lift", "done"}, phases
    assert all(max(abs(v) for v in f.action[:3]) <= 0.01 + 1e-6 for f in fb)
    assert any(f.action[2] < -0.005 for f in fb), "never moved down (the descend chunk)"
    assert spin_until(ros_node, lambda: len(deltas) >= result.steps, timeout=5)
    assert result.message  # succeeded, or stopped with a reason (policy done / max steps), never silently
    client.destroy()
