"""Scene grounding on the simulator's frames: answers follow the segmentation masks, the question mix is what the
config asks for, the stage trains and reports against the majority answer, and bad configs are clear errors."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import training.vln  # noqa: E402,F401 - preloads triton's LLVM before any EGL context
from training.vln import scene_grounding as sg  # noqa: E402
from training.vln.config import VLNTrainConfig  # noqa: E402

TINY = dict(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=128, vision_hidden_size=32,
            vision_layers=1, vision_heads=2, vision_intermediate_size=64, bpe_vocab_size=400)
BASE = dict(image_size=32, tiny=TINY, n_scenes=1, episodes_per_scene=1, eval_per_scene=1, min_distance=1.5,
            max_distance=4.0, max_steps=12, steps=4, batch_size=4, dagger_rounds=0, eval_conditions=["normal"],
            num_threads=1, agent={"num_history": 0, "num_future_steps": 3})


def _mask(cols: slice, rows: slice = slice(20, 30)) -> np.ndarray:
    m = np.zeros((64, 64), bool)
    m[rows, cols] = True
    return m


def test_where_answer_by_centroid_third() -> None:
    assert sg.where_answer(_mask(slice(0, 10)), 12) == "left"
    assert sg.where_answer(_mask(slice(27, 37)), 12) == "ahead"
    assert sg.where_answer(_mask(slice(54, 64)), 12) == "right"
    assert sg.where_answer(None, 12) == "none" and sg.where_answer(np.zeros((64, 64), bool), 12) == "none"
    assert sg.where_answer(_mask(slice(0, 1), slice(0, 5)), 12) is None  # 5 px: too small to ask about
    # a mask spanning the left and middle thirds is where most of it is
    assert sg.where_answer(_mask(slice(0, 30)), 12) == "left"


def _house(labels: list[str]) -> SimpleNamespace:
    return SimpleNamespace(furniture=[SimpleNamespace(label=lab) for lab in labels])


def test_frame_questions_skip_ambiguous_labels_and_add_out_of_view_ones() -> None:
    house = _house(["red sofa", "red sofa", "blue bed", "green desk", "white sink", "black lamp", "grey shelf"])
    masks = {0: _mask(slice(0, 10)), 2: _mask(slice(54, 64)), 3: _mask(slice(27, 37))}
    cfg = sg.SceneGroundingConfig(none_fraction=0.5)
    qs = sg.frame_questions(house, masks, goal=4, cfg=cfg, rng=np.random.default_rng(0))
    qa = {q: a for q, a, _ in qs}
    assert {q: px for q, _, px in qs}["where is the blue bed?"] == 100  # the object's pixels travel with it
    assert "where is the red sofa?" not in qa  # two red sofas: the question has no single answer
    assert qa["where is the blue bed?"] == "right" and qa["where is the green desk?"] == "ahead"
    assert qa["where is the white sink?"] == "none"  # the goal is always asked, here out of view
    # 2 objects in view at none_fraction 0.5 -> 2 out-of-view questions (the goal's and one more)
    assert sum(a == "none" for a in qa.values()) == 2 and len(qa) == 4
    none0 = sg.frame_questions(house, masks, goal=None, cfg=sg.SceneGroundingConfig(none_fraction=0.0),
                            rng=np.random.default_rng(0))
    assert all(a != "none" for _, a, _ in none0)


@pytest.mark.parametrize("kw,field", [({"steps": -1}, "steps"), ({"none_fraction": 0.95}, "none_fraction"),
                                      ({"min_pixels": 0}, "min_pixels"), ({"lrr": 1.0}, "lrr"),
                                      ({"stages": [[5, "left right"]]}, "stages"),
                                      ({"stages": [[20, "up down"]]}, "stages"), ({"stages": []}, "stages"),
                                      ({"stages": "fine_to_coarse"}, "unknown preset"), ({"draws": 0}, "draws"),
                                      ({"accept": 1.5}, "accept")])
def test_config_validation(kw, field) -> None:
    with pytest.raises((ValueError, TypeError), match=field):
        sg.SceneGroundingConfig.from_dict(kw)
    with pytest.raises((ValueError, TypeError), match=field):
        VLNTrainConfig(**{**BASE, "scene_grounding": kw})
    with pytest.raises(ValueError, match="scene_grounding"):
        VLNTrainConfig(**{**BASE, "scene_grounding": [1]})


def test_stage_presets() -> None:
    for name in sg.STAGE_PRESETS:
        stages = sg.SceneGroundingConfig(stages=name).stage_list()
        assert stages[-1] == (12, sg.ANSWERS)  # every curriculum ends on every question
    assert sg.SceneGroundingConfig().stage_list() == [(12, sg.ANSWERS)]


@pytest.fixture(scope="module")
def nav_cfg():
    return VLNTrainConfig(**{**BASE, "image_size": 64, "episodes_per_scene": 2, "eval_per_scene": 1,
                             "same_room": True, "min_distance": 1.0,
                             "scene_grounding": {"steps": 30, "batch_size": 8, "episodes_per_scene": 2,
                                                 "stages": [[12, "left right"], [12, "left ahead right none"]]}})


def test_scene_set_asks_about_the_goal_with_answers_from_the_frame(nav_cfg) -> None:
    scfg = nav_cfg.scene_grounding_config()
    items = sg.make_scene_set(nav_cfg, "train", scfg)
    assert items and all(a in sg.ANSWERS for _, _, a, _ in items)
    assert {a for _, _, a, _ in items} - {"none"}, "no object was ever in view"
    assert all((px == 0) == (a == "none") and (a == "none" or px >= scfg.min_pixels) for _, _, a, px in items)
    assert all(f.shape == (64, 64, 3) and f.dtype == np.uint8 for f, _, _, _ in items)
    assert len({id(f) for f, _, _, _ in items}) < len(items)  # several questions per frame
    held = sg.make_scene_set(nav_cfg, "eval", scfg)
    assert held and held[0][0].tobytes() != items[0][0].tobytes()


def test_scene_set_cache_is_reused_only_for_the_same_settings(nav_cfg, tmp_path, monkeypatch) -> None:
    import dataclasses

    scfg = nav_cfg.scene_grounding_config()
    cache = tmp_path / "q.npz"
    items = sg.make_scene_set(nav_cfg, "train", scfg, cache=cache)
    assert cache.is_file()

    def no_rebuild(*a, **k):
        raise AssertionError("rebuilt")

    monkeypatch.setattr(sg, "_build_scene_set", no_rebuild)
    again = sg.make_scene_set(nav_cfg, "train", scfg, cache=cache)
    assert [(q, a, n) for _, q, a, n in again] == [(q, a, n) for _, q, a, n in items]
    assert all(np.array_equal(f, g) for (f, *_), (g, *_) in zip(again, items))
    # other question settings, the other split or a corrupt file: the cache is not used
    for cfg, split in ((dataclasses.replace(scfg, none_fraction=0.5), "train"), (scfg, "eval")):
        with pytest.raises(AssertionError, match="rebuilt"):
            sg.make_scene_set(nav_cfg, split, cfg, cache=cache)
    # training settings do not change the questions: the cache stays valid
    sg.make_scene_set(nav_cfg, "train", dataclasses.replace(scfg, steps=7, cotrain=0.3), cache=cache)
    cache.write_bytes(b"not an npz")
    with pytest.raises(AssertionError, match="rebuilt"):
        sg.make_scene_set(nav_cfg, "train", scfg, cache=cache)


def test_backbone_scene_grounding_trains_and_reports(nav_cfg, tmp_path) -> None:
    import json

    from training.vln.navigator import build_backbone

    build_backbone(nav_cfg, tmp_path / "b", ["go to the red sofa"])
    res = json.loads((tmp_path / "b" / "grounding.json").read_text())["scene_grounding"]
    for split in ("held_out", "train"):
        r = res[split]
        assert r["n"] > 0 and 0.0 <= r["accuracy"] <= 1.0
        assert sum(r["answer_share"].values()) == pytest.approx(1.0, abs=0.01)
        assert r["majority"] == pytest.approx(max(r["answer_share"].values()), abs=0.002)
        shares = {a: s for a, s in r["answer_share"].items() if s > 0}
        # overall accuracy is the share-weighted mean of the per-answer accuracies
        assert r["accuracy"] == pytest.approx(sum(shares[a] * r["per_answer"][a] for a in shares), abs=0.01)
    assert res["loss"] < res["loss_start"] - 1.0  # 60 steps on ~30 questions: the loss must fall
    first, last = res["stages"]
    assert first["answers"] == "left right" and last["answers"] == "left ahead right none"
    assert {a for a, share in first["held_out"]["answer_share"].items() if share > 0} <= {"left", "right"}
    assert last["held_out"]["n"] == res["held_out"]["n"]


def _guarded(nav_cfg: VLNTrainConfig, draws: int, accept: float) -> VLNTrainConfig:
    return VLNTrainConfig(**{**nav_cfg.to_dict(), "scene_grounding": {**nav_cfg.scene_grounding, "draws": draws,
                                                                      "accept": accept}})


def test_backbone_guard_keeps_the_best_draw_on_validation_episodes(nav_cfg, tmp_path) -> None:
    """An unreachable bar: every draw is tried, each scored on the validation episodes' questions (not the training
    or evaluation ones), and the saved backbone is the best draw, not the last."""
    import json

    from agents.vlm.bundle import load_vlm
    from training.vln.backbone import build_backbone, scene_accuracy

    cfg = _guarded(nav_cfg, 3, 1.0)
    val = sg.make_scene_set(cfg, "val", cfg.scene_grounding_config())
    held = sg.make_scene_set(cfg, "eval", cfg.scene_grounding_config())
    assert val and {f.tobytes() for f, *_ in val}.isdisjoint({f.tobytes() for f, *_ in held})
    build_backbone(cfg, tmp_path / "b", ["go to the red sofa"])
    d = json.loads((tmp_path / "b" / "grounding.json").read_text())["draws"]
    accs = [t["val_accuracy"] for t in d["tried"]]
    assert json.loads((tmp_path / "b" / "draws.json").read_text()) == {"accept": 1.0, "tried": d["tried"]}
    assert [t["draw"] for t in d["tried"]] == list(range(len(accs))) and all(t["n"] == len(val) for t in d["tried"])
    assert len(accs) == 3 or accs[-1] >= 1.0  # drawing stops only at the bar
    assert len(set(accs)) > 1  # draws differ (new weights, squares and batch order)
    stages = cfg.scene_grounding_config().stage_list()
    for t in d["tried"]:  # every scored draw records its scene stages (held-out accuracy, final loss)
        assert len(t["scene_stages"]) == len(t["scene_losses"]) == len(stages)
        assert all(0.0 <= a <= 1.0 for a in t["scene_stages"]) and all(x >= 0.0 for x in t["scene_losses"])
    chosen = d["tried"][d["chosen"]]
    saved_stages = json.loads((tmp_path / "b" / "grounding.json").read_text())["scene_grounding"]["stages"]
    assert chosen["scene_stages"] == [st["held_out"]["accuracy"] for st in saved_stages]
    assert d["chosen"] == int(np.argmax(accs)) and d["accepted"] == (max(accs) >= 1.0)
    saved = scene_accuracy(load_vlm(tmp_path / "b"), val, 8)
    assert saved == pytest.approx(max(accs), abs=1e-4)


def test_backbone_guard_stops_at_the_first_accepted_draw_which_is_the_unguarded_backbone(nav_cfg, tmp_path) -> None:
    """A bar every draw passes: one draw, identical to the backbone built without the guard (old configs and
    cached navigators keep their weights)."""
    import json

    from agents.vlm.bundle import load_vlm
    from training.vln.backbone import build_backbone

    build_backbone(_guarded(nav_cfg, 3, 0.0), tmp_path / "g", ["go to the red sofa"])
    d = json.loads((tmp_path / "g" / "grounding.json").read_text())["draws"]
    assert len(d["tried"]) == 1 and d["chosen"] == 0 and d["accepted"]
    build_backbone(nav_cfg, tmp_path / "p", ["go to the red sofa"])
    assert "draws" not in json.loads((tmp_path / "p" / "grounding.json").read_text())
    a, b = load_vlm(tmp_path / "g").model.state_dict(), load_vlm(tmp_path / "p").model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_backbone_guard_rejects_a_draw_whose_bind_stages_fail_before_its_scene_stages(nav_cfg, tmp_path,
                                                                                      monkeypatch) -> None:
    """``bind_accept`` above what 2 square steps reach: draws 0 and 1 stop after their square stages (no scene
    stages, no validation score), and the last draw, with none scored yet, runs in full and is kept."""
    import json

    from training.vln import backbone

    scene_runs = []
    real = sg.pretrain_scene_grounding
    monkeypatch.setattr(sg, "pretrain_scene_grounding", lambda *a, **k: scene_runs.append(k["draw"]) or real(*a, **k))
    squares = {"stages": [[24, 2, 1.0, "side_of"]], "steps_per_stage": 2, "samples_per_stage": 16, "batch_size": 8}
    cfg = VLNTrainConfig(**{**nav_cfg.to_dict(), "grounding": squares,
                            "scene_grounding": {**nav_cfg.scene_grounding, "draws": 3, "accept": 1.0,
                                                "bind_accept": 1.0}})
    backbone.build_backbone(cfg, tmp_path / "b", ["go to the red sofa"])
    d = json.loads((tmp_path / "b" / "grounding.json").read_text())["draws"]
    assert [t.get("rejected") for t in d["tried"]] == ["bind", "bind", None] and scene_runs == [2]
    assert [t["val_accuracy"] is None for t in d["tried"]] == [True, True, False]
    assert all(0.0 <= t["bind_accuracy"] < 1.0 for t in d["tried"]) and d["chosen"] == 2 and d["bind_accept"] == 1.0
    assert all(t["bind_stages"] == [t["bind_accuracy"]] for t in d["tried"])  # one square stage, its accuracy
    assert json.loads((tmp_path / "b" / "draws.json").read_text())["tried"] == d["tried"]
    with pytest.raises(ValueError, match="bind_accept"):
        VLNTrainConfig(**{**cfg.to_dict(), "scene_grounding": {**cfg.scene_grounding, "bind_accept": 1.5}})


def test_cotraining_mixes_scene_questions_into_imitation_batches(tmp_path) -> None:
    """One imitation sample and one scene question, batch 2 at cotrain 0.5: the question is learnt alongside; at
    cotrain 0 it is never seen and its loss does not fall."""
    from agents.vlm.bundle import load_vlm
    from agents.vln.processor_vln import VLNProcessor
    from training.vln.data import Sample
    from training.vln.navigator import build_backbone
    from training.vln.trainer import Imitation, eval_loss

    cfg = VLNTrainConfig(**BASE)
    path = build_backbone(cfg, tmp_path / "b", ["go forward", "where is the red sofa? left"])
    rng = np.random.default_rng(0)
    nav = [Sample(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), "go to the sofa next:", "forward forward")]
    scene = [Sample(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), "where is the red sofa?", "left")]
    after = {}
    for frac in (0.0, 0.5):
        torch.manual_seed(0)
        bundle = load_vlm(path)
        for p in bundle.model.parameters():
            p.requires_grad_(True)
        vproc = VLNProcessor(bundle.processor, bundle.family, cfg.image_size, cfg.agent_config())
        before = eval_loss(bundle.model, vproc, scene)
        Imitation(bundle.model, vproc, lr=3e-3, batch_size=2).run(nav, 25, cotrain=scene, cotrain_fraction=frac)
        after[frac] = eval_loss(bundle.model, vproc, scene) / before
    assert after[0.5] < 0.5 and after[0.5] < after[0.0] - 0.3
    with pytest.raises(ValueError, match="cotrain_fraction"):
        Imitation(bundle.model, vproc, batch_size=2).run(nav, 1, cotrain=[], cotrain_fraction=0.5)


def test_navigator_samples_from_scene_questions(nav_cfg) -> None:
    cfg = VLNTrainConfig(**{**nav_cfg.to_dict(), "agent": {"num_history": 1, "num_future_steps": 3}})
    samples = sg.cotrain_samples(cfg, cfg.scene_grounding_config())
    assert samples and all(s.image.shape == (64, 64, 3) for s in samples)
    assert all(s.prompt.startswith("where is the ") and s.target in sg.ANSWERS for s in samples)


def test_goal_prefix_targets_say_where_the_goal_is(nav_cfg) -> None:
    """collect() with goal_prefix: every target starts with the goal object's place in that very frame."""
    from agents.vln.actions import parse_actions, split_goal
    from training.vln.data import collect
    from training.vln.navigator import make_env, make_episodes

    cfg = VLNTrainConfig(**{**nav_cfg.to_dict(), "agent": {"num_history": 0, "num_future_steps": 3,
                                                           "goal_prefix": True}})
    eps, gts = make_episodes(cfg, "train")
    env = make_env(cfg, "normal", eps, gts)
    seen: list[str] = []
    try:
        samples = collect(env, range(len(eps)), cfg.agent_config(), cfg.image_size, on_state=lambda e: seen.append(
            sg.where_answer(e.item_masks().get(e.goal_item()), 1)))
    finally:
        env.close()
    goals = [split_goal(s.target) for s in samples]
    assert all(g is not None and parse_actions(rest) for g, rest in goals)
    assert [g for g, _ in goals] == seen
    assert {"left", "ahead", "right"} & set(seen), "the goal object was never in view"
