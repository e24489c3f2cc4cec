"""VLAPolicy on a real tiny PaliGemma steered by fitting a few examples: the three-level loop, the chunk queue,
retries on malformed text, the verifier, save -> load, bad input. Plus the AT / binned codecs on the tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from agents.core.verifier import AlwaysAdvance, Verdict
from agents.vla import (
    MalformedActionError,
    VLAGenerationError,
    VLAPolicy,
    VLAPolicyConfig,
    VLMPromptVerifier,
    load_policy,
    make_codec,
    prompts,
)
from agents.vlm import MICRO_SIZES, TinyVLMConfig, build_tiny_vlm, collate, load_vlm, training_example
from sim.manip.verifier import SimStateVerifier

MICRO = dict(MICRO_SIZES)
INS = "pick up the red cube"
DESCEND = "[[0.0, 0.0, -3.0, 1]]"
LIFT = "[[0.0, 0.0, 0.0, 0], [0.0, 0.0, 4.0, 0]]"
RETRY_INS = "lift the cube"
RETRY_BAD = "[[1.0, 0.0, 0.0]]"  # three numbers: malformed; differs from the valid one only at the end
RETRY_GOOD = "[[1.0, 0.0, 0.0, 1]]"


def scene(size: int = 32) -> np.ndarray:
    img = np.full((size, size, 3), 120, dtype=np.uint8)
    img[8:16, 10:18] = (200, 30, 30)
    return img


def fit(bundle, examples, steps: int, lr: float = 1e-2) -> list[float]:
    """Full fine-tune on a fixed batch (steers what the tiny model generates)."""
    import torch

    torch.manual_seed(0)
    batch = collate(bundle, [training_example(bundle, im, p, t) for im, p, t in examples])
    opt = torch.optim.AdamW(bundle.model.parameters(), lr=lr)
    bundle.model.train()
    losses = []
    for _ in range(steps):
        loss = bundle.model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    bundle.model.eval()
    return losses


@pytest.fixture(scope="module")
def steered(tmp_path_factory):
    d = build_tiny_vlm(tmp_path_factory.mktemp("vla"), config=TinyVLMConfig(**MICRO))
    b = load_vlm(d)
    img = scene()
    ex = [
        (img, prompts.subtasks_prompt(INS), "descend; lift"),
        (img, prompts.motion_prompt(INS, "descend"), "move down"),
        (img, prompts.motion_prompt(INS, "lift"), "move up, then close the gripper"),
        (img, prompts.actions_prompt(INS, "descend", "move down"), DESCEND),
        (img, prompts.actions_prompt(INS, "lift", "move up, then close the gripper"), LIFT),
        # twice each: the two questions differ in one word and their answers are one token of the whole batch's loss
        (img, prompts.verify_prompt(INS, "descend"), "yes"), (img, prompts.verify_prompt(INS, "descend"), "yes"),
        (img, prompts.verify_prompt(INS, "lift"), "no"), (img, prompts.verify_prompt(INS, "lift"), "no"),
        (img, prompts.subtasks_prompt(RETRY_INS), "lift"),
        (img, prompts.motion_prompt(RETRY_INS, "lift"), "move forward"),
    ]
    act = prompts.actions_prompt(RETRY_INS, "lift", "move forward")
    ex += [(img, act, RETRY_BAD)] * 2 + [(img, act, RETRY_GOOD)]  # greedy -> malformed; sampling -> often valid
    losses = fit(b, ex, steps=200)
    assert losses[-1] < 0.1 < losses[0]  # memorised (the 2:1 malformed/valid mix keeps it above 0)
    return d, b


def run(policy, n=40, **obs):
    out = []
    for _ in range(n):
        a = policy.act({"rgb": scene(), "instruction": INS, **obs})
        out.append(a)
        if a.done:
            break
    return out


def test_three_level_loop_executes_the_chunks(steered):
    _, b = steered
    pol = VLAPolicy(b, VLAPolicyConfig(max_step_m=0.02, gripper_steps=3))
    acts = run(pol)
    assert pol.subtasks == ["descend", "lift"]
    assert acts[-1].done and acts[-1].phase == "done"
    desc = [a for a in acts if a.phase == "descend"]
    lift = [a for a in acts if a.phase == "lift"]
    # descend: -3 cm in steps of <= 2 cm, gripper open (-1)
    assert len(desc) == 2 and np.allclose(sum(a.delta[2] for a in desc), -0.03) and all(a.gripper == -1 for a in desc)
    # lift: close (held >= gripper_steps steps with no motion) then +4 cm, gripper closed (+1)
    assert len(lift) == 3 + 2 and np.allclose(sum(a.delta[2] for a in lift), 0.04)
    assert all(a.gripper == 1 for a in lift) and all(abs(v) <= 0.02 + 1e-12 for a in acts for v in a.delta)
    assert pol.stats.malformed == 0 and pol.stats.chunks == 2 and pol.stats.generations == 5


def test_malformed_output_is_resampled_and_counted(steered):
    _, b = steered
    pol = VLAPolicy(b, VLAPolicyConfig(max_tries=12, temperature_actions=1.0, top_p=1.0))
    a = pol.act({"rgb": scene()}, instruction=RETRY_INS)
    assert pol.stats.malformed >= 1  # the greedy first try is the malformed text
    np.testing.assert_allclose(pol.last_chunk, [[1.0, 0.0, 0.0, 1.0]])
    assert a.delta == pytest.approx((0.01, 0.0, 0.0)) and a.gripper == -1
    assert 0 < pol.stats.malformed_rate < 1
    strict = VLAPolicy(b, VLAPolicyConfig(max_tries=1))
    with pytest.raises(VLAGenerationError, match="action chunk after 1 tries"):
        strict.act({"rgb": scene()}, instruction=RETRY_INS)
    assert strict.stats.failures == 1 and strict.stats.malformed == 1


def test_verifier_retry_regenerates_the_same_subtask(steered):
    _, b = steered
    # no state change after the descend chunk -> the sim-state verifier says retry (bounded by max_subtask_retries)
    state = {"ee_pos": np.array([0.0, 0.0, 1.0]), "objects": {"cube": np.array([0.0, 0.0, 0.82])}, "grasped": False}
    pol = VLAPolicy(b, VLAPolicyConfig(max_subtask_retries=1, gripper_steps=1), verifier=SimStateVerifier())
    acts = run(pol, n=30, **state)
    phases = [a.phase for a in acts]
    assert pol.stats.subtask_retries == 2  # descend once, lift once
    assert phases.count("descend") == 4 and acts[-1].done  # two descend chunks of 2 steps


def test_vlm_prompt_verifier_reads_yes_no(steered):
    _, b = steered
    v = VLMPromptVerifier(b)
    obs = {"rgb": scene(), "instruction": INS}
    assert v.verify(obs, obs, "descend", "lift") is Verdict.ADVANCE
    assert v.verify(obs, obs, "lift", None) is Verdict.RETRY
    assert v.unreadable == 0


def test_save_load_gives_identical_actions(steered, tmp_path):
    from peft import LoraConfig, get_peft_model

    from agents.vlm import lora_target_regex

    d, b = steered
    pol = VLAPolicy(b, VLAPolicyConfig(greedy_first=False, seed=3))
    pol.save_pretrained(tmp_path / "full")
    again = load_policy(tmp_path / "full")
    assert [a.as_array().tolist() for a in run(pol)] == [a.as_array().tolist() for a in run(again)]
    # base + LoRA adapter directory (real peft), reloaded through the policy file
    base = load_vlm(d)
    base.model = get_peft_model(base.model, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                                       target_modules=lora_target_regex("paligemma"))).eval()
    lora = VLAPolicy(base, VLAPolicyConfig(codec="binned", max_tries=1))
    lora.save_pretrained(tmp_path / "lora")
    assert (tmp_path / "lora" / "adapter" / "adapter_config.json").is_file()
    back = load_policy(tmp_path / "lora")
    assert back.codec.to_dict() == lora.codec.to_dict()
    import torch

    ex = collate(base, [training_example(base, scene(), "x", "y")])
    with torch.inference_mode():
        assert torch.allclose(base.model(**ex).logits, back.bundle.model(**ex).logits, atol=1e-5)
    # a damaged policy file is a ValueError naming it (the node and the CLI report it), never a raw error
    meta = tmp_path / "lora" / "vla_policy.json"
    good = meta.read_text()
    for broken, why in ((good[:40], "unreadable JSON"), ("[1, 2]", "expected a JSON object"),
                        ('{"format": 1}', "missing base, config")):
        meta.write_text(broken)
        with pytest.raises(ValueError, match=f"vla_policy.json: {why}"):
            load_policy(tmp_path / "lora")
    meta.write_text(good)
    adapter_meta = tmp_path / "lora" / "adapter" / "allday_adapter.json"
    adapter_meta.write_text("{")
    with pytest.raises(ValueError, match="allday_adapter.json: unreadable JSON"):
        load_policy(tmp_path / "lora")


def test_bad_input_is_rejected_before_generation(steered):
    _, b = steered
    pol = VLAPolicy(b)
    with pytest.raises(ValueError, match="32x32"):
        pol.act({"rgb": scene(64), "instruction": INS})
    with pytest.raises(ValueError, match="uint8"):
        pol.act({"rgb": scene().astype(np.float32), "instruction": INS})
    with pytest.raises(ValueError, match="empty"):
        pol.act({"rgb": scene(), "instruction": "   "})
    with pytest.raises(ValueError, match="English"):
        pol.act({"rgb": scene(), "instruction": "拿起红色方块"})
    with pytest.raises(ValueError, match="rgb"):
        pol.act({"instruction": INS})
    assert pol.stats.generations == 0
    resize = VLAPolicy(b, VLAPolicyConfig(resize_images=True))
    assert resize.act({"rgb": scene(64), "instruction": INS}).phase == "descend"
    with pytest.raises(ValueError, match="codec"):
        VLAPolicyConfig(codec="nope")
    with pytest.raises(ValueError, match="max_step_m"):
        VLAPolicyConfig(max_step_m=float("nan"))


@pytest.mark.parametrize("name", ["language", "action_tokens", "binned"])
def test_codec_round_trip(steered, name):
    _, b = steered
    codec = make_codec(name, b.tokenizer)
    chunk = np.array([[1.2, -0.4, -2.5, 1.0], [0.0, 3.3, 0.1, 0.0]])
    target = codec.encode(chunk)
    if isinstance(target, str):
        text, ids = target, b.tokenizer(target, add_special_tokens=False)["input_ids"]
    else:
        ids, text = target, b.tokenizer.decode(target)
        special = set(b.tokenizer.all_special_ids)
        assert not special & set(ids)
    back = codec.decode(text, ids)
    tol = 0.05 if name != "binned" else 20.0 / 256
    np.testing.assert_allclose(back, chunk, atol=tol + 1e-9)
    again = make_codec(name, b.tokenizer, **{k: v for k, v in codec.to_dict().items() if k != "name"})
    assert again.encode(chunk) == target
    if name != "language":
        with pytest.raises(MalformedActionError):
            codec.decode("", list(b.tokenizer("hello world", add_special_tokens=False)["input_ids"]))


def test_sim_state_verifier_rules():
    v = SimStateVerifier()
    cube = {"cube": np.array([0.0, 0.0, 0.82])}
    far = {"ee_pos": np.array([0.2, 0.0, 1.0]), "objects": cube, "grasped": False}
    above = {"ee_pos": np.array([0.005, 0.0, 0.9]), "objects": cube, "grasped": False}
    held = {"ee_pos": np.array([0.0, 0.0, 0.83]), "objects": cube, "grasped": True}
    lifted = {"ee_pos": np.array([0.0, 0.0, 0.95]), "objects": {"cube": np.array([0.0, 0.0, 0.94])}, "grasped": True}
    assert v.verify(far, above, "move above the red cube", "descend") is Verdict.ADVANCE
    assert v.verify(far, far, "move above the red cube", "descend") is Verdict.RETRY
    assert v.verify(above, held, "grasp", "lift") is Verdict.ADVANCE
    assert v.verify(above, above, "grasp", "lift") is Verdict.RETRY
    assert v.verify(held, lifted, "lift", None) is Verdict.ADVANCE
    assert v.verify(held, held, "lift", None) is Verdict.RETRY
    assert v.verify({"rgb": 0}, {"rgb": 0}, "lift", None) is Verdict.ADVANCE  # no state: cannot judge
    assert isinstance(AlwaysAdvance().verify({}, {}, "x", None), Verdict)


def test_ros_registry_builds_the_policy(steered, tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ros2_ws" / "src" / "allday_ros"))
    from allday_ros.policies import VLA_POLICIES

    _, b = steered
    VLAPolicy(b).save_pretrained(tmp_path / "pol")
    make = VLA_POLICIES.get("vlm2vla")
    with pytest.raises(ValueError, match="checkpoint"):
        make({"max_delta": 0.05, "checkpoint": ""})
    pol = make({"max_delta": 0.01, "checkpoint": str(tmp_path / "pol")})
    assert isinstance(pol.verifier, SimStateVerifier) and pol.config.max_step_m == 0.01


def test_expand_chunk_splits_elements_and_holds_gripper_changes():
    from agents.vla.policy import expand_chunk

    chunk = np.array([[5.0, 0.0, -1.0, 1.0],    # 5 cm at 2 cm per step -> 3 equal steps
                      [0.0, 0.0, 0.0, 0.0],     # the gripper closes: held for 4 steps
                      [0.0, 0.0, 1.0, 0.0]])    # 1 cm up, closed
    steps, g = expand_chunk(chunk, 1.0, max_step_m=0.02, gripper_steps=4)
    assert len(steps) == 3 + 4 + 1 and g == 0.0
    np.testing.assert_allclose(sum(d for d, _ in steps[:3]), [0.05, 0.0, -0.01])
    assert all(np.abs(d).max() <= 0.02 + 1e-12 for d, _ in steps)
    assert [c for _, c in steps] == [-1.0] * 3 + [1.0] * 5          # open, then close (commands -1 / +1)
    np.testing.assert_allclose(steps[-1][0], [0.0, 0.0, 0.01])
    assert steps[0][0] is not steps[1][0]                            # no aliased arrays in the queue


def test_replan_steps_plan_the_subtask_again_mid_chunk(steered):
    _, b = steered
    cfg = VLAPolicyConfig(max_step_m=0.01, gripper_steps=3, replan_steps=1, max_replans=2)
    pol = VLAPolicy(b, cfg)
    acts = run(pol)
    desc = [a for a in acts if a.phase == "descend"]
    lift = [a for a in acts if a.phase == "lift"]
    # descend (-3 cm in 1 cm steps): one step, re-plan, one step, re-plan, then the third chunk runs out
    assert len(desc) == 1 + 1 + 3 and np.allclose(sum(a.delta[2] for a in desc), -0.05)
    # lift: the close is held its gripper_steps (3) steps before any re-plan; the re-planned chunks' close is no
    # change any more (1 still step, not 3): 3, re-plan, 1, re-plan, then 1 + 4
    assert len(lift) == 3 + 1 + (1 + 4) and np.allclose(sum(a.delta[2] for a in lift), 0.04)
    assert all(a.delta == (0.0, 0.0, 0.0) for a in lift[:3])
    assert all(a.gripper == 1 for a in lift) and acts[-1].done
    assert pol.stats.replans == 4 and pol.stats.chunks == 6
    # the paper's protocol (the default) never re-plans
    plain = VLAPolicy(b, VLAPolicyConfig(max_step_m=0.01, gripper_steps=3))
    run(plain)
    assert plain.stats.replans == 0 and plain.stats.chunks == 2
    with pytest.raises(ValueError, match="replan_steps"):
        VLAPolicyConfig(replan_steps=-1)


def test_replan_drops_gripper_changes_that_were_not_executed(steered, monkeypatch):
    _, b = steered
    pol = VLAPolicy(b, VLAPolicyConfig(max_step_m=0.01, gripper_steps=3, replan_steps=1, max_replans=1))
    monkeypatch.setattr(pol, "plan_subtasks", lambda image, instruction: ["descend"])
    # descend 2 cm, then close: the re-plan after the first step must still see an open gripper
    monkeypatch.setattr(pol, "plan_chunk", lambda image, instruction, subtask: (
        "move down", np.array([[0.0, 0.0, -2.0, 1.0], [0.0, 0.0, 0.0, 0.0]])))
    acts = run(pol)
    grips = [a.gripper for a in acts if not a.done]
    # 1 step, re-plan: 2 descend steps + the close held gripper_steps (3) steps
    assert grips == [-1, -1, -1, 1, 1, 1] and pol.gripper_state == 0.0
