"""Offline learning/forgetting matrices of the lifelong benchmark (``training.vln.offline``): teacher-forced token
accuracy and loss on each task's held-out demonstrations, each method scored with its task's own adapter."""

import math

import numpy as np
import pytest

pytest.importorskip("torch")

import training.vln  # noqa: E402,F401 - preloads triton's LLVM before any EGL context
from training.vln.lifelong import LifelongConfig, prepare_data  # noqa: E402


def _cfg(base, **kw) -> LifelongConfig:
    settings = dict(base=base, n_scenes=1, conditions=["normal", "low_light"], n_unseen=0, train_per_task=1,
                    eval_per_task=2, steps_per_task=8, batch_size=4, fisher_batches=1, lora_rank=2, lr=3e-3,
                    offline_samples=12)
    return LifelongConfig(**{**settings, **kw})


@pytest.fixture(scope="module")
def setup(tmp_path_factory, lifelong_setup):
    return lifelong_setup(tmp_path_factory.mktemp("offline"), _cfg)


def test_heldout_demonstrations_come_from_the_held_out_episodes(setup) -> None:
    cfg, tasks, data, _ = setup
    for t in tasks:
        d = data[t.index]
        assert 0 < len(d.heldout) <= cfg.offline_samples
        train_images = {s.image.tobytes() for s in d.samples}
        assert not any(s.image.tobytes() in train_images for s in d.heldout)  # other episodes than training's
        assert all((s.scene, s.env) == (t.scene, t.env) for s in d.heldout)
    night = next(t for t in tasks if t.condition == "low_light")
    day = next(t for t in tasks if t.condition == "normal")
    assert np.mean([s.image.mean() for s in data[night.index].heldout]) < 0.8 * np.mean(
        [s.image.mean() for s in data[day.index].heldout])  # rendered under the task's condition
    off = _cfg(cfg.base, offline_samples=0, eval_per_task=1)
    assert all(not d.heldout for d in prepare_data(off, off.tasks()[0]).values())


@pytest.mark.parametrize("bad", [-1, 2.5, True, "8"])
def test_offline_samples_is_checked(bad, tmp_path, lifelong_base) -> None:
    with pytest.raises(ValueError, match="offline_samples"):
        _cfg(lifelong_base(tmp_path), offline_samples=bad)


def test_answer_metrics_match_the_models_own_loss_and_rise_with_training(setup) -> None:
    import torch

    from agents.vlm.bundle import load_vlm
    from agents.vln.processor_vln import VLNProcessor
    from training.vln.offline import answer_metrics
    from training.vln.trainer import Imitation, batch_loss, make_batch

    cfg, tasks, data, base_dir = setup
    torch.manual_seed(0)
    bundle = load_vlm(base_dir / "vlm")
    vproc = VLNProcessor(bundle.processor, bundle.family, bundle.image_size or cfg.base.image_size,
                         cfg.base.agent_config())
    samples = data[tasks[0].index].heldout[:6]
    before = answer_metrics(bundle.model, vproc, samples, batch_size=len(samples))
    with torch.no_grad():
        own = float(batch_loss(bundle.model.eval(), make_batch(vproc, samples)))
    assert before["loss"] == pytest.approx(own, rel=1e-4)  # the same tokens and shift as the model's loss
    assert 0.0 <= before["token_acc"] <= 1.0
    split = answer_metrics(bundle.model, vproc, samples, batch_size=4)  # batching does not change the figures
    assert split["token_acc"] == pytest.approx(before["token_acc"]) and split["loss"] == pytest.approx(
        before["loss"], rel=1e-4)
    Imitation(bundle.model, vproc, lr=3e-3, batch_size=6).run(samples, 30)
    after = answer_metrics(bundle.model, vproc, samples)
    assert after["loss"] < 0.5 * before["loss"] and after["token_acc"] > before["token_acc"]
    assert after["answer_acc"] > before["answer_acc"]
    # a whole answer counts when every one of its tokens is right, whatever the padding of its batch
    singles = [answer_metrics(bundle.model, vproc, [s])["token_acc"] == 1.0 for s in samples]
    assert after["answer_acc"] == pytest.approx(np.mean(singles)) and 0 < after["answer_acc"] < 1
    with pytest.raises(ValueError, match="at least one"):
        answer_metrics(bundle.model, vproc, [])


def test_run_method_scores_each_task_with_its_own_adapter(setup) -> None:
    from training.vln.lifelong import evaluate_base, run_method

    cfg, tasks, data, base_dir = setup
    oracle = run_method("oracle_multi_lora", cfg, base_dir, tasks, [], data)["offline"]
    acc = np.array(oracle["matrices"]["token_acc"], dtype=float)
    loss = np.array(oracle["matrices"]["loss"], dtype=float)
    assert np.isnan(acc[0, 1]) and not np.isnan(acc[1]).any()  # tasks not yet learnt are not scored
    # task 0's own adapter is untouched by task 1: the same figures after task 1 as right after task 0
    assert loss[1, 0] == pytest.approx(loss[0, 0], rel=1e-6) and acc[1, 0] == acc[0, 0]
    assert oracle["forgetting"]["token_acc"] in (0.0, None) and oracle["forgetting"]["loss_rise"] == pytest.approx(
        0.0, abs=1e-5)
    whole = run_method("seq_lora", cfg, base_dir, tasks, [], data)
    # every held-out episode's outcome after the last task, in task order: what a paired comparison needs
    assert [len(s) for s in whole["final_success"]] == [len(data[t.index].eval_episodes) for t in tasks]
    assert [float(np.mean(s)) for s in whole["final_success"]] == pytest.approx(whole["final"]["sr"], abs=1e-12)
    assert whole["unseen_success"] == []
    seq = whole["offline"]
    seq_loss = np.array(seq["matrices"]["loss"], dtype=float)
    assert seq_loss[1, 0] != pytest.approx(seq_loss[0, 0], rel=1e-6)  # one adapter: task 1 moved task 0's figures
    assert seq["avg"]["loss"] == pytest.approx(float(np.mean(seq_loss[1])))
    base = evaluate_base(cfg, base_dir, tasks, data)
    assert all({"token_acc", "loss", "sr", "success"} <= set(base[t.name]) for t in tasks)
    assert all(float(np.mean(base[t.name]["success"])) == pytest.approx(base[t.name]["sr"]) for t in tasks)
    off = run_method("seq_lora", _cfg(cfg.base, offline_samples=0), base_dir, tasks, [], data)
    assert off["offline"] is None


def test_summarise_forgetting() -> None:
    from training.vln.offline import summarise

    acc = np.array([[0.8, np.nan], [0.4, 0.9]])
    loss = np.array([[1.0, np.nan], [1.5, 0.7]])
    s = summarise({"token_acc": acc, "loss": loss})
    assert s["forgetting"]["token_acc"] == pytest.approx(0.5) and "answer_acc" not in s["forgetting"]
    assert s["forgetting"]["loss_rise"] == pytest.approx(0.5)
    assert s["right_after"]["token_acc"] == [0.8, 0.9] and s["final"]["loss"] == [1.5, 0.7]
    assert s["avg"]["token_acc"] == pytest.approx(0.65) and not math.isnan(s["avg"]["loss"])


def test_tuka_is_also_scored_with_its_own_experts_without_routing(setup, monkeypatch) -> None:
    import copy
    import dataclasses

    from training.vln import lifelong
    from training.vln.routing import ROUTING_KEYS

    cfg, tasks, data, base_dir = setup
    # the first task once more, as an "unseen pair" of its own (a copy of its data): its own experts composed must
    # score what its oracle row does; its routed evaluation is made to route wrong, so that the seen and unseen
    # routing parts differ
    u = dataclasses.replace(tasks[0], index=99)
    u_data = copy.copy(data[tasks[0].index])
    real, composed = lifelong.evaluate_task, []

    def recording(method, cfg_, d, expected_route=None, oracle=False):
        out = real(method, cfg_, d, expected_route, oracle=oracle)
        if d is u_data and oracle:
            composed.append(out)
        elif d is u_data:
            out = {**out, **{key: 0.0 for key in ROUTING_KEYS}}
        return out

    monkeypatch.setattr(lifelong, "evaluate_task", recording)
    r = lifelong.run_method("tuka_dkil", cfg, base_dir, tasks, [u], {**data, u.index: u_data})
    o = r["oracle_route"]
    assert set(o["final"]) == {"sr", "spl", "osr"} and all(len(v) == len(tasks) for v in o["final"].values())
    assert o["avg"]["sr"] == pytest.approx(float(np.mean(o["final"]["sr"])))
    assert len(composed) == 1 and o["unseen"]["sr"] == composed[0]["sr"] and o["unseen_success"] == [
        composed[0]["success"]]
    assert o["unseen"]["sr"] == o["final"]["sr"][0] and o["unseen"]["spl"] == pytest.approx(o["final"]["spl"][0])
    assert r["offline"]["matrices"]["token_acc"][1][0] is not None
    for key in ROUTING_KEYS:  # all tasks = 2 seen + 1 unseen, per task
        assert r[f"{key}_unseen"] == 0.0 and r[f"{key}_seen"] > 0
        assert r[key] == pytest.approx((2 * r[f"{key}_seen"] + r[f"{key}_unseen"]) / 3)
    free = r["diagnostics"]["pair_freedom"]  # night's env row starts as a copy of normal's: no room in the core
    assert len(free) == len(tasks) == 2 and free[0] == 1.0 and free[1] < 1e-3
    seq = lifelong.run_method("seq_lora", cfg, base_dir, tasks, [], data)
    assert seq["oracle_route"] is None and seq["diagnostics"] == {}


def test_tukas_oracle_policy_activates_the_tasks_experts_and_does_not_route(tmp_path, lifelong_base) -> None:
    from agents.vlm.bundle import load_vlm
    from training.peft.tucker import get_active
    from training.vln.lifelong import Task
    from training.vln.methods import METHODS
    from training.vln.navigator import build_backbone

    base = lifelong_base(tmp_path)
    bundle = load_vlm(build_backbone(base, tmp_path / "b", ["go to the sofa"]))
    method = METHODS.get("tuka_dkil")(bundle, base.agent_config(), {"lora_rank": 2, "tuka_ranks": (2, 2, 2, 2)})
    a, b = Task(0, 0, "normal", 0), Task(1, 1, "low_light", 1)
    for t in (a, b):
        method.start_task(t)
    policy = method.oracle_policy(a)
    assert policy.router is None and get_active(method.model) == (0, 0)
    method.oracle_policy(b)
    assert get_active(method.model) == (1, 1)
    assert method.policy(a).router is method.router  # the benchmark's closed-loop SR still routes


def test_routing_memory_routes_on_frames_spread_over_the_task(setup) -> None:
    import dataclasses

    import torch

    from agents.vlm.bundle import load_vlm
    from agents.vln.modeling_vln import AlldayWalkerPolicy
    from training.vln.methods import METHODS
    from training.vln.routing import routing_features

    cfg, tasks, data, base_dir = setup
    mem = dataclasses.replace(cfg, routing_memory=3)
    assert mem.settings()["routing_memory"] == 3 and cfg.settings()["routing_memory"] == 0
    method = METHODS.get("tuka_dkil")(load_vlm(base_dir / "vlm"), mem.agent_config(), mem.settings())
    assert method.router.scene.memory == 3 and method.router.env.memory == 3
    samples = data[tasks[0].index].samples
    frames = [s.frame for s in samples if s.frame is not None]
    assert len(frames) > 3
    spread = routing_features(method.bundle, method.agent_cfg, samples, memory=3)
    first = routing_features(method.bundle, method.agent_cfg, samples)
    own = AlldayWalkerPolicy(method.bundle, method.agent_cfg).features([frames[0], frames[-1]])
    assert spread.shape[0] == 3 and first.shape[0] == min(64, len(frames))
    assert torch.allclose(spread[0], own[0], atol=1e-5) and torch.allclose(spread[-1], own[1], atol=1e-5)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="routing_memory"):
            _cfg(cfg.base, routing_memory=bad)
