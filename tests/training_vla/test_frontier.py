"""The forgetting-frontier probe: the open-loop action score against known chunks, and a probe inside the training
loop that measures at the right steps without changing what is trained."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.vla import make_codec
from agents.vlm import load_vlm
from tests.training_vla.conftest import lift_like_episode
from training.vla.frontier import FrontierProbe, action_error, score_chunk
from training.vla.relabel import ScriptedRelabeller
from training.vla.samples import build_samples
from training.vla.train import add_lora, fit
from training.vla.trainer import LoopSettings
from training.vla.vqa_scenes import VQAItem

CHUNK = np.array([[1.0, 2.0, -0.5, 1.0], [0.5, 0.0, 0.0, 0.0]])


def test_score_of_text_chunks() -> None:
    codec = make_codec("language")
    target = codec.encode(CHUNK)
    assert score_chunk(codec, target, target, ()) == (0.0, pytest.approx(np.linalg.norm([1.5, 2.0, -0.5])), False,
                                                      True)
    moved = CHUNK.copy()
    moved[0, 0] += 1.0  # one more cm along x, gripper still closing at the end
    err, norm, bad, grip = score_chunk(codec, target, codec.encode(moved), ())
    assert err == pytest.approx(1.0) and not bad and grip
    opened = CHUNK.copy()
    opened[-1, 3] = 1.0
    assert score_chunk(codec, target, codec.encode(opened), ())[3] is False
    err, norm, bad, grip = score_chunk(codec, target, "[[1.0, oops", ())
    assert bad and not grip and err == pytest.approx(norm)  # malformed = no motion


def test_score_of_token_chunks(bundle) -> None:
    codec = make_codec("binned", bundle.tokenizer)
    ids = tuple(codec.encode(CHUNK[:1]))
    err, norm, bad, grip = score_chunk(codec, ids, "", ids)
    assert err == 0.0 and norm > 2.0 and not bad and grip
    err, _, bad, _ = score_chunk(codec, ids, "", ids[:3])  # an element needs 4 tokens
    assert bad and err == pytest.approx(norm)


def _vqa(n: int = 4) -> list[VQAItem]:
    rng = np.random.default_rng(0)
    return [VQAItem(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8), "what colour is the table?",
                    "red", "table", i) for i in range(n)]


def test_probe_measures_along_the_fine_tune_without_changing_it(tiny_base, tmp_path) -> None:
    lang = ScriptedRelabeller().relabel_all([lift_like_episode(0), lift_like_episode(1)])

    def run(with_probe: bool):
        torch.manual_seed(0)
        b = add_lora(load_vlm(tiny_base), r=16, alpha=32)
        codec = make_codec("language", b.tokenizer)
        samples = build_samples(lang, codec, aux=False)
        probe = FrontierProbe(b, codec, _vqa(), samples, every=2, max_new_tokens=24) if with_probe else None
        if probe is not None:
            probe.measure(b.model, 0)
        s = LoopSettings(out_dir=str(tmp_path / f"p{int(with_probe)}"), lr=3e-3, batch_size=4, grad_accum=1,
                         max_steps=4, save_every=100, device="cpu", num_threads=1)
        res = fit(b, samples, s, progress=False, callback=probe)
        return res["losses"], probe, b, codec, samples

    plain, _, _, _, _ = run(False)
    losses, probe, b, codec, samples = run(True)
    assert losses == plain  # measuring (greedy generation, eval mode and back) changes nothing in training
    assert [p["step"] for p in probe.points] == [0, 2, 4]
    n_actions = sum(s.kind == "action" for s in samples)
    for p in probe.points:
        assert 0.0 <= p["vqa"] <= 1.0 and 0.0 <= p["malformed"] <= 1.0 and p["n"] == n_actions
        assert p["rel_err"] >= 0.0 and np.isfinite(p["disp_err_cm"])
    # the last point is the trained model's own score
    again = action_error(b, codec, samples, max_new_tokens=24)
    assert again["disp_err_cm"] == pytest.approx(probe.points[-1]["disp_err_cm"])
    with pytest.raises(ValueError, match="every"):
        FrontierProbe(b, codec, _vqa(), samples, every=0)
    with pytest.raises(ValueError, match="action"):
        action_error(b, codec, [s for s in samples if s.kind != "action"])


def _bench():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import vlm2vla_frontier

    return vlm2vla_frontier


def _points(errs, rets):
    return [{"step": 100 * i, "rel_err": e, "retention": r, "vqa": r / 2, "disp_err_cm": e, "malformed": 0.0,
             "gripper_acc": 1.0} for i, (e, r) in enumerate(zip(errs, rets, strict=True))]


def test_retention_at_matched_action_error() -> None:
    bench = _bench()
    pts = _points([1.0, 0.6, 0.2], [1.0, 0.5, 0.3])
    assert bench.retention_at(pts, 0.4) == pytest.approx(0.4)  # halfway between the probes at 0.6 and 0.2
    assert bench.retention_at(pts, 1.0) == 1.0 and bench.retention_at(pts, 0.1) is None


def test_frontier_runs_merge_into_one_report(tmp_path) -> None:
    import json

    bench = _bench()
    run = {"mode": "full", "seed": 0, "pretrained": "p", "vqa_pretrained": 0.6, "vqa_questions": 600,
           "held_out_demos": 16, "every": 100, "settings": {"ft_steps": 200, "batch": 16, "ft_lr": 1e-3,
                                                             "ft_schedule": "cosine"}}
    paths = []
    for i, (name, pts) in enumerate((("VLM2VLA", _points([1.0, 0.3], [1.0, 0.8])),
                                     ("VLM2VLA-AT", _points([1.0, 0.5], [1.0, 0.4])))):
        paths.append(str(tmp_path / f"r{i}.json"))
        (tmp_path / f"r{i}.json").write_text(json.dumps({**run, "methods": {name: {"points": pts}}, "seconds": 60.0}))
    res = bench.merge(paths)
    assert set(res["methods"]) == {"VLM2VLA", "VLM2VLA-AT"}
    res["vqa_majority_baseline"] = 0.4
    res["methods"]["VLM2VLA"]["points"][1]["skill_retained"] = -0.25  # runs since the skill score record it
    md = bench.report(res, tmp_path / "docs")
    assert "| VLM2VLA | 100 | 80 % | -25 % |" in md and "| VLM2VLA-AT | 100 | 40 % | - |" in md
    assert "majority-answer baseline (0.400)" in md
    # both reach 0.5: VLM2VLA keeps 1.0 + (0.5/0.7)(0.8 - 1.0) there, AT its 40 %
    assert "| VLM2VLA | 86 % |" in md and "| VLM2VLA-AT | 40 % |" in md
    assert (tmp_path / "docs" / "vlm2vla_frontier.png").is_file()
    (tmp_path / "r1.json").write_text(json.dumps({**run, "every": 50, "methods": {}, "seconds": 1.0}))
    with pytest.raises(ValueError, match="every"):
        bench.merge(paths)
    # runs that each pre-trained their own copy: the same weights (fingerprint) merge, whatever the path
    for i, fp in enumerate(("abc", "abc")):
        (tmp_path / f"r{i}.json").write_text(json.dumps({**run, "pretrained": f"p{i}", "pretrained_fingerprint": fp,
                                                         "methods": {f"m{i}": {"points": []}}, "seconds": 1.0}))
    assert set(bench.merge(paths)["methods"]) == {"m0", "m1"}
    (tmp_path / "r1.json").write_text(json.dumps({**run, "pretrained": "p0", "pretrained_fingerprint": "abd",
                                                  "methods": {}, "seconds": 1.0}))
    with pytest.raises(ValueError, match="pretrained_fingerprint"):
        bench.merge(paths)


def test_reuse_pretrained_checks_what_the_model_was_pre_trained_with(tmp_path):
    """``vlm2vla.py --reuse-pretrained`` reuses a model only for the seed and settings it was pre-trained with."""
    import json

    bench = _bench().base_bench
    m = dict(bench.MODES["quick"])
    path = tmp_path / "pretrained"
    assert not bench.reusable_pretrained(path, m, seed=0)  # nothing there
    path.mkdir()
    (path / "config.json").write_text("{}")
    assert not bench.reusable_pretrained(path, m, seed=0)  # an older run without a key: pre-train again
    (path / bench.PRETRAIN_KEY).write_text(json.dumps(bench.pretrain_key(m, 0)))
    assert bench.reusable_pretrained(path, m, seed=0)
    with pytest.raises(ValueError, match=r"other settings \(seed\)"):
        bench.reusable_pretrained(path, m, seed=1)  # would count one pre-training as two draws
    with pytest.raises(ValueError, match="spatial"):
        bench.reusable_pretrained(path, {**m, "spatial": "language"}, seed=0)


@pytest.mark.parametrize("argv, why", [(["--demos", "0"], "--demos must be >= 1, got 0"),
                                       (["--camera", "wristcam"], "argument --camera: invalid choice: 'wristcam'"),
                                       (["--demo-noise", "0.2"], "--demo-noise must be in [0, 0.05] m, got 0.2"),
                                       (["--replan", "-1"], "--replan must be >= 0, got -1"),
                                       (["--verifier", "oracle"], "argument --verifier: invalid choice: 'oracle'"),
                                       (["--lora-targets", "vision"],
                                        "argument --lora-targets: invalid choice: 'vision'")])
def test_vlm2vla_rejects_bad_data_options(argv, why, capsys):
    """``--demos`` below 1, a camera robosuite's Lift scene does not have, DART noise out of range and a negative
    re-plan period are usage errors, before any work; the frontier benchmark refuses its shared options alike."""
    bench = _bench()
    quick = {k: dict(v) if isinstance(v, dict) else v for k, v in bench.base_bench.MODES["quick"].items()}
    with pytest.raises(SystemExit) as exc:
        bench.base_bench.main(["--quick", *argv])
    assert exc.value.code == 2 and why in capsys.readouterr().err
    assert bench.base_bench.MODES["quick"] == quick  # a refused call leaves nothing behind
    if argv[0] in ("--demos", "--camera", "--demo-noise", "--lora-targets"):
        with pytest.raises(SystemExit) as exc:
            bench.main(["--quick", *argv])
        assert exc.value.code == 2 and why in capsys.readouterr().err


def test_run_settings_are_a_copy_of_the_mode_with_the_options_on_top():
    import argparse

    bench = _bench().base_bench
    import vlm2vla_options as options  # benchmarks/ is on the path once _bench() ran

    p = argparse.ArgumentParser()
    options.add_finetune_args(p)
    options.add_pretraining_args(p)
    p.add_argument("--grounding", action="store_true")
    mode = dict(bench.MODES["full"])
    got = options.settings(p, p.parse_args(["--demos", "150", "--camera", "robot0_eye_in_hand", "--lora-targets",
                                            "all-linear", "--demo-noise", "0.01", "--spatial-prior"]), mode)
    assert (got["demos"], got["camera"], got["lora_targets"], got["noise"], got["spatial"]) == (
        150, "robot0_eye_in_hand", "all-linear", 0.01, "language")
    assert got["ft_steps"] == mode["ft_steps"] and "grounding" not in got  # options not given keep the mode's
    assert mode == bench.MODES["full"] and bench.MODES["full"]["demos"] == 30 and "lora_targets" not in mode
    assert options.settings(p, p.parse_args(["--grounding"]), mode)["grounding"] is True
    with pytest.raises(SystemExit):
        options.settings(p, p.parse_args(["--ft-lr", "0"]), mode)
    patched = options.settings(p, p.parse_args(["--patch-size", "8"]), mode)
    assert patched["model"]["patch_size"] == 8 and "patch_size" not in bench.MODES["full"]["model"]
    assert bench.pretrain_key(patched, 0) != bench.pretrain_key(mode, 0)  # another model: pre-trained apart
    with pytest.raises(SystemExit):
        options.settings(p, p.parse_args(["--patch-size", "12"]), mode)  # 64 px is not a multiple of 12
    wrist = options.settings(p, p.parse_args(["--spatial-prior", "--spatial-view", "policy", "--camera",
                                              "robot0_eye_in_hand"]), mode)
    assert bench.spatial_camera(wrist) == "robot0_eye_in_hand" and bench.spatial_camera(got) is None
    assert bench.pretrain_key(wrist, 0)["spatial_camera"] == "robot0_eye_in_hand"
    assert "spatial_camera" not in bench.pretrain_key({**wrist, "spatial_view": "agentview"}, 0)
    with pytest.raises(SystemExit):
        options.settings(p, p.parse_args(["--spatial-view", "policy"]), mode)  # no spatial questions to move
    with pytest.raises(SystemExit):  # agentview already is the spatial questions' camera
        options.settings(p, p.parse_args(["--spatial-prior", "--spatial-view", "policy"]), mode)
    assert options.settings(p, p.parse_args(["--patch-size", "16"]), mode)["model"] is mode["model"]  # the default
    assert options.recorded(patched)["patch_size"] == 8 and "patch_size" not in options.recorded(mode)


def test_frontier_refuses_a_pretrained_model_of_other_settings(tmp_path, capsys):
    """``vlm2vla_frontier.py --pretrained DIR`` checks the model's pre-training key like ``--reuse-pretrained``."""
    import json

    bench = _bench()
    path = tmp_path / "pretrained"
    path.mkdir()
    (path / "config.json").write_text("{}")
    key = bench.base_bench.pretrain_key(bench.base_bench.MODES["quick"], 0)
    (path / bench.base_bench.PRETRAIN_KEY).write_text(json.dumps(key))
    with pytest.raises(SystemExit) as exc:
        bench.main(["--quick", "--pretrained", str(path), "--patch-size", "8", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2 and "model" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        bench.main(["--quick", "--pretrained", str(tmp_path / "none"), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2 and "not a model directory" in capsys.readouterr().err


def test_reuse_pretrained_needs_the_same_demonstrations(tmp_path):
    """The tiny tokenizer is trained on the demonstrations' text: another ``--demos`` may not reuse the model."""
    import json

    bench = _bench().base_bench
    m = dict(bench.MODES["quick"])
    path = tmp_path / "pretrained"
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / bench.PRETRAIN_KEY).write_text(json.dumps(bench.pretrain_key(m, 0)))
    assert bench.reusable_pretrained(path, {**m, "camera": "robot0_eye_in_hand"}, seed=0)
    with pytest.raises(ValueError, match="demos"):
        bench.reusable_pretrained(path, {**m, "demos": m["demos"] + 1}, seed=0)
    # DART demonstrations have other text too; re-planning changes no pre-training
    assert bench.reusable_pretrained(path, {**m, "noise": 0.0, "replan": 2}, seed=0)
    with pytest.raises(ValueError, match="noise"):
        bench.reusable_pretrained(path, {**m, "noise": 0.01}, seed=0)


@pytest.mark.parametrize("targets, vision", [(None, False), ("lm", False), ("all-linear", True)])
def test_vlm2vla_lora_targets_reach_the_fine_tune(tiny_base, tmp_path, targets, vision):
    """``--lora-targets all-linear`` adapts the vision tower and the projector as well; the default (the paper's)
    only the language model, and the vision weights come out of the fine-tune unchanged."""
    bench = _bench().base_bench
    m = {**bench.MODES["quick"], "ft_steps": 2, "batch": 4}
    if targets is not None:
        m["lora_targets"] = targets
    lang = ScriptedRelabeller().relabel_all([lift_like_episode(0)])
    before = {n: p.detach().clone() for n, p in load_vlm(tiny_base).model.named_parameters()}
    bundle, _, info = bench.finetune("VLM2VLA", tiny_base, lang, m, tmp_path, seed=0, progress=False)
    adapted = {n for n, p in bundle.model.named_parameters() if "lora_" in n}
    assert info["samples"] > 0 and adapted
    assert any("vision_tower" in n for n in adapted) is vision
    assert any("multi_modal_projector" in n for n in adapted) is vision
    assert any("language_model" in n for n in adapted)
    merged = bundle.model.merge_and_unload() if hasattr(bundle.model, "merge_and_unload") else bundle.model
    after = dict(merged.named_parameters())
    changed = [n for n in before if "vision_tower" in n and n in after and not torch.equal(before[n], after[n])]
    assert bool(changed) is vision


def test_frontier_records_the_demonstrations_through_the_options(tmp_path, monkeypatch):
    """The frontier run records its training demonstrations through ``--camera`` with ``--demo-noise`` and its
    held-out ones through the same camera, clean."""
    import training.vla.data.robosuite_source as source

    bench = _bench()
    calls = []

    class Stop(Exception):
        pass

    def record(task, n, image, seed, cache_dir, progress, camera="agentview", noise_m=0.0):
        calls.append((n, camera, noise_m, seed))
        if len(calls) == 2:
            raise Stop
        return []

    monkeypatch.setattr(source, "record_robosuite", record)
    monkeypatch.setattr(bench.base_bench, "vqa_sets", lambda *a: ([], [], []))
    m = {**bench.base_bench.MODES["quick"], "camera": "robot0_eye_in_hand", "noise": 0.01}
    with pytest.raises(Stop):
        bench.run("quick", tmp_path, tmp_path, 3, 4, 1, None, ["VLM2VLA"], 0, False, m=m)
    assert calls == [(m["demos"], "robot0_eye_in_hand", 0.01, 3),
                     (1, "robot0_eye_in_hand", 0.0, bench.HELD_OUT_SEED + 3)]
