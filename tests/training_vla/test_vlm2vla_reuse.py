"""``benchmarks/vlm2vla.py --disjoint-episodes`` and ``--reuse-from``: each draw's held-out episodes in a block of its
own, and an earlier run's models rolled out again exactly as they were trained."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from tests.training_vla.conftest import lift_like_episode
from training.vla.relabel import ScriptedRelabeller


def _modules():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import vlm2vla
    import vlm2vla_rollout

    return vlm2vla, vlm2vla_rollout


def test_disjoint_episodes_give_every_draw_its_own_block():
    bench, ro = _modules()
    m = dict(bench.MODES["full"], demos=150)
    assert ro.episode_seeds(m, 3) == list(range(10_003, 10_053))  # the default: neighbouring draws overlap
    assert set(ro.episode_seeds(m, 3)) & set(ro.episode_seeds(m, 4))
    blocks = [set(ro.episode_seeds({**m, "disjoint_episodes": True}, s)) for s in range(7)]
    assert all(len(b) == m["episodes"] for b in blocks)
    assert len(set().union(*blocks)) == 7 * m["episodes"]  # pairwise disjoint
    assert min(min(b) for b in blocks) >= 20_000 and not set().union(*blocks) & set(range(10_000, 10_100))
    with pytest.raises(ValueError, match="meet the demonstrations' seeds"):
        ro.episode_seeds({**m, "demos": 4000}, 0)  # the expert may need up to 3 * demos seeds


def _earlier(tmp_path: Path, tiny_base: Path, m: dict, seed: int = 0):
    """A finished quick run of VLM2VLA in ``tmp_path / 'src'``: pre-trained model, fine-tune, results.json."""
    bench, _ = _modules()
    from vlm2vla_options import recorded

    root = tmp_path / "src" / "quick"
    shutil.copytree(tiny_base, root / "pretrained")
    lang = ScriptedRelabeller().relabel_all([lift_like_episode(0)])
    bundle, _, tr = bench.finetune("VLM2VLA", root / "pretrained", lang, m, root, seed=seed, progress=False)
    res = {"seed": seed, "settings": recorded(m), "methods": {"VLM2VLA": {**tr, "vqa": {"accuracy": 0.5}}}}
    (root / "results.json").write_text(json.dumps(res))
    return bundle, lang


def test_reuse_from_rolls_out_the_same_fine_tune_without_training(tiny_base, tmp_path):
    bench, ro = _modules()
    m = {**bench.MODES["quick"], "ft_steps": 2, "batch": 4}
    trained, lang = _earlier(tmp_path, tiny_base, m)
    src, dst = tmp_path / "src", tmp_path / "dst" / "quick"
    later = {**m, "disjoint_episodes": True, "episodes": 3}  # rollout settings may differ
    earlier = ro.earlier_run(src, "quick", later, 0, ["VLM2VLA"])
    assert earlier["VLM2VLA"]["vqa_accuracy"] == 0.5 and earlier["VLM2VLA"]["samples"] > 0
    ro.adopt(src, dst, "quick", {"VLM2VLA": "language"}, m["ft_steps"])
    assert (dst / "pretrained" / "config.json").is_file()
    again, _, tr = bench.finetune("VLM2VLA", dst / "pretrained", lang, later, dst, seed=0, progress=False, resume=True)
    assert tr["first_loss"] is None  # resumed at its last step: nothing trained
    mine, theirs = dict(again.model.named_parameters()), dict(trained.model.named_parameters())
    assert mine.keys() == theirs.keys() and any("lora_B" in k for k in mine)
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)  # lora_B starts at zero: equal only if restored
    assert (src / "quick" / "ft_language" / "checkpoints" / "step_2").is_dir()  # the earlier run is left as it was


def test_reuse_from_refuses_what_would_not_be_the_same_models(tiny_base, tmp_path):
    bench, ro = _modules()
    m = {**bench.MODES["quick"], "ft_steps": 2, "batch": 4}
    _earlier(tmp_path, tiny_base, m)
    src = tmp_path / "src"
    with pytest.raises(ValueError, match="seed 0, not 1"):
        ro.earlier_run(src, "quick", m, 1, ["VLM2VLA"])
    with pytest.raises(ValueError, match=r"other settings \(ft_lr\)"):
        ro.earlier_run(src, "quick", {**m, "ft_lr": 1e-4}, 0, ["VLM2VLA"])
    with pytest.raises(ValueError, match="no fine-tune of VLM2VLA-AT"):
        ro.earlier_run(src, "quick", m, 0, ["VLM2VLA-AT"])
    with pytest.raises(ValueError, match="no finished quick run"):
        ro.earlier_run(tmp_path / "nothing", "quick", m, 0, ["VLM2VLA"])
    with pytest.raises(ValueError, match="no finished fine-tune of 3 steps"):
        ro.adopt(src, tmp_path / "dst" / "quick", "quick", {"VLM2VLA": "language"}, 3)
    with pytest.raises(ValueError, match="another run's --out"):
        ro.adopt(src, src / "quick", "quick", {"VLM2VLA": "language"}, 2)


def test_vlm2vla_cli_refuses_a_reuse_it_cannot_honour(tmp_path, capsys):
    bench, _ = _modules()
    base = ["--quick", "--out", str(tmp_path / "o"), "--cache", str(tmp_path / "c")]
    with pytest.raises(SystemExit):
        bench.main([*base, "--reuse-from", str(tmp_path / "none")])
    assert "holds no finished quick run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main([*base, "--demos", "4000"])  # held-out seeds 10000.. among the demonstrations' 0..11999
    assert "meet the demonstrations' seeds" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_benchmark_rolls_an_earlier_run_out_on_its_own_episodes(tmp_path, capsys):
    """End to end (robosuite, ~1 min): a quick run, then the same models on the draw's disjoint block of
    episodes; the VQA answers (and so the retention) come out as before, the rollouts are on seeds 20000 up."""
    bench, _ = _modules()
    first = ["--quick", "--methods", "VLM2VLA", "--cache", str(tmp_path / "c")]
    assert bench.main([*first, "--out", str(tmp_path / "a")]) == 0
    assert bench.main([*first, "--out", str(tmp_path / "b"), "--reuse-from", str(tmp_path / "a"),
                       "--disjoint-episodes"]) == 0
    a = json.loads((tmp_path / "a" / "quick" / "results.json").read_text())
    b = json.loads((tmp_path / "b" / "quick" / "results.json").read_text())
    assert a["episode_seeds"] == [10_000, 10_001] and b["episode_seeds"] == [20_000, 20_001]
    assert b["settings"]["disjoint_episodes"] is True and "disjoint_episodes" not in a["settings"]
    la, lb = a["methods"]["VLM2VLA"], b["methods"]["VLM2VLA"]
    assert lb["reused"] is True and "reused" not in la
    assert lb["vqa"] == la["vqa"] and lb["last_loss"] == la["last_loss"]
    assert not (tmp_path / "b" / "quick" / "pretrain").exists()  # nothing pre-trained again
