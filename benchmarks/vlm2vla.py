"""VLM2VLA at small scale: do language actions + LoRA keep a VLM's VQA skill while it learns to act?

1. Build a tiny random-weight PaliGemma and give it a VQA skill: full training on a generated VQA set about
   robosuite tabletop scenes (colours, counts, left/right, which cube is on top; ground truth from the simulator),
   with a held-out split of scenes (``training.vla.vqa_scenes``).
2. Fine-tune three copies with LoRA (r 16, alpha 32, all linear layers of the language model) on the same scripted
   robosuite Lift demonstrations, relabelled into language: VLM2VLA (actions as text), VLM2VLA-AT (the same text
   with digits mapped to the 10 least-likely tokens) and an OpenVLA-style binned-token policy.
3. Report per method: held-out VQA accuracy retained (% of the pre-trained model), closed-loop success in
   robosuite Lift (held-out seeds), malformed-output rate, seconds per action; the two language codecs are rolled
   out twice, with free generation (the paper's protocol) and with grammar-constrained decoding
   (``VLAPolicyConfig(constrained=True)``). ``--ft-steps/--ft-lr/--ft-schedule`` override the fine-tuning settings;
   ``--lora-targets all-linear`` adapts the vision tower and projector too; ``--camera``, ``--demos``,
   ``--demo-noise`` (DART), ``--replan``, ``--replan-samples`` and ``--verifier`` change the data and the closed
   loop (``docs/vlm2vla.md``); ``--disjoint-episodes`` gives each draw (seed) a block of held-out episodes of its own
   and ``--reuse-from`` rolls an earlier run's models out again without training (``vlm2vla_rollout.py``). The
   options shared with ``vlm2vla_frontier.py`` live in ``vlm2vla_options.py``.

``--quick`` (< 1 minute with warm caches) uses a smaller model, a few demos and 2 rollouts per method; the last
stdout line is one JSON object with ``retention`` and ``success`` per method. The full mode writes
``docs/vlm2vla.md`` (table) and ``docs/vlm2vla.png`` (plot) and prints the same JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# sibling modules (benchmarks/ is this script's folder)
from vlm2vla_options import (  # noqa: E402
    LORA_TARGETS,
    add_finetune_args,
    add_pretraining_args,
    recorded,
    settings,
)
from vlm2vla_report import write_report  # noqa: E402
from vlm2vla_rollout import TRAINING_FIGURES, add_rollout_args, adopt, earlier_run, episode_seeds  # noqa: E402

log = logging.getLogger("vlm2vla")

METHODS = {"VLM2VLA": "language", "VLM2VLA-AT": "action_tokens", "binned (OpenVLA-style)": "binned"}
SMALL_MODEL = dict(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128,
                   vision_hidden_size=32, vision_layers=1, vision_heads=2, vision_intermediate_size=64,
                   bpe_vocab_size=500)
FULL_MODEL = dict(hidden_size=128, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=384,
                  vision_hidden_size=96, vision_layers=3, vision_heads=4, vision_intermediate_size=192,
                  bpe_vocab_size=700)
MODES: dict[str, dict[str, Any]] = {
    "quick": dict(image=32, model=SMALL_MODEL, scenes=60, demos=2, pre_steps=80, pre_lr=5e-3, ft_steps=12,
                  ft_lr=2e-3, ft_schedule="linear", ft_warmup=0, batch=8, episodes=2, max_steps=30, camera="agentview"),
    # fine-tuning: 1000 steps (~27 epochs of the 600 samples), lr 3e-3, 30 warm-up steps then cosine decay; 300
    # linear steps (the earlier setting: --ft-steps 300 --ft-schedule linear) leave the chunks unparseable
    "full": dict(image=64, model=FULL_MODEL, scenes=600, demos=30, pre_steps=1200, pre_lr=2e-3, ft_steps=1000,
                 ft_lr=3e-3, ft_schedule="cosine", ft_warmup=30, batch=16, episodes=50, max_steps=40,
                 camera="agentview"),
}


def _stage(name: str, t0: float) -> None:
    log.info("%s done (%.1f s elapsed)", name, time.perf_counter() - t0)


def vqa_sets(cache: Path, m: dict[str, Any], seed: int, progress: bool) -> tuple[list[Any], list[Any], list[Any]]:
    """``(items, train, test)`` of the generated VQA set; with ``m["spatial"]`` the spatial-prior questions are in
    the items and the training split, never in the test split (retention is measured on the general kinds)."""
    from training.vla.vqa_scenes import cached_vqa, general_only, split_vqa

    items = cached_vqa(cache, m["scenes"], m["image"], seed, progress, spatial=bool(m.get("spatial")),
                       spatial_camera=spatial_camera(m))
    train, test = split_vqa(items, 0.25)
    return items, train, general_only(test)


def pretrain_corpus(lang: list[Any], items: list[Any], m: dict[str, Any]) -> list[str]:
    """The tiny tokenizer's training corpus: the demonstrations' prompts and targets, every question and answer
    word (and the grounding texts when that pre-training runs)."""
    from training.vla.samples import sample_corpus
    from training.vla.vqa_scenes import ANSWER_WORDS, SPATIAL_KINDS

    corpus = (sample_corpus(lang) + sorted({it.question for it in items}) + list(ANSWER_WORDS)
              + sorted({it.answer for it in items if it.kind in SPATIAL_KINDS}))
    if m.get("grounding"):
        from training.vlm import grounding_corpus

        corpus += grounding_corpus()
    return corpus


def pretrain_vqa(out: Path, corpus: list[str], train: list[Any], m: dict[str, Any], seed: int, progress: bool) -> Path:
    """Build the tiny base and train all its weights on the VQA training split; returns the checkpoint dir."""
    from agents.vlm import build_tiny_vlm, load_vlm
    from training.vla.samples import Sample
    from training.vla.train import fit
    from training.vla.trainer import LoopSettings

    base = build_tiny_vlm(out / "base", image_size=m["image"], corpus=corpus, seed=seed, overwrite=True,
                          **m["model"])
    bundle = load_vlm(base)
    if m.get("grounding"):
        from training.vlm import GroundingConfig, pretrain_grounding

        stages = [[max(1, s * m["image"] // 64), n, b, t] for s, n, b, t in GroundingConfig().stage_list()]
        g = pretrain_grounding(bundle, GroundingConfig(stages=stages, seed=seed), progress=progress)
        log.info("grounding pre-training: %s", g["stages"])
    for p in bundle.model.parameters():
        p.requires_grad_(True)
    at = None
    if m.get("spatial") == "action_tokens":  # the crossover control: the offsets' digits are AT's rare tokens
        from agents.vla import make_codec

        at = make_codec("action_tokens", bundle.tokenizer)
    samples = [Sample(it.image, it.question, at.encode_text(it.answer) if at and it.kind == "where" else it.answer,
                      "vqa") for it in train]
    s = LoopSettings(out_dir=str(out / "pretrain"), lr=m["pre_lr"], batch_size=m["batch"], grad_accum=1,
                     max_steps=m["pre_steps"], warmup_steps=min(50, m["pre_steps"] // 10), schedule="linear",
                     save_every=10**9, seed=seed, device="cpu", num_threads=1)
    res = fit(bundle, samples, s, progress=progress)
    log.info("VQA pre-training: loss %.3f -> %.3f in %.0f s", res["first_loss"], res["last_loss"], res["seconds"])
    from agents.core.io import atomic_dir, write_text

    path = out / "pretrained"
    with atomic_dir(path) as tmp:  # a run killed while saving leaves no half model for --reuse-pretrained
        bundle.model.save_pretrained(tmp)
        bundle.processor.save_pretrained(tmp)
        write_text(tmp / PRETRAIN_KEY, json.dumps(pretrain_key(m, seed), sort_keys=True))
    return path


def spatial_camera(m: dict[str, Any]) -> str | None:
    """The camera of the spatial-prior questions other than agentview (``--spatial-view policy``), else None."""
    if m.get("spatial") and m.get("spatial_view") == "policy" and m["camera"] != "agentview":
        return str(m["camera"])
    return None


PRETRAIN_KEY = "allday_pretrain_key.json"


def pretrain_key(m: dict[str, Any], seed: int) -> dict[str, Any]:
    """What a pre-trained model depends on: ``--reuse-pretrained`` reuses one only when these match (``demos``: the
    tokenizer is trained on the demonstrations' text too; the camera changes no text)."""
    keys = ("image", "model", "scenes", "pre_steps", "pre_lr", "batch", "spatial", "grounding", "demos")
    key = {"seed": seed, **{k: m.get(k) for k in keys}}
    if m.get("noise"):  # DART demonstrations have other text; absent when 0, as in keys written before the option
        key["noise"] = m["noise"]
    camera = spatial_camera(m)
    if camera:  # spatial questions seen through the policy's camera; absent otherwise, as before
        key["spatial_camera"] = camera
    return json.loads(json.dumps(key, sort_keys=True, default=str))


def reusable_pretrained(path: Path, m: dict[str, Any], seed: int) -> bool:
    """Whether ``path`` holds a model pre-trained with these settings; ``ValueError`` when it holds one of others
    (a rerun with another seed or prior must not count as its own draw)."""
    from agents.core.config import differing_keys
    from agents.core.io import read_json_object

    if not (path / "config.json").is_file():
        return False
    try:
        saved = read_json_object(path / PRETRAIN_KEY)
    except (OSError, ValueError):
        log.warning("%s has no readable %s (older run): pre-training again", path, PRETRAIN_KEY)
        return False
    want = pretrain_key(m, seed)
    if saved != want:
        diff = differing_keys(saved, want)
        raise ValueError(f"{path} was pre-trained with other settings ({', '.join(diff)}); drop --reuse-pretrained "
                         "or give the settings it was pre-trained with")
    return True


def finetune(method: str, pretrained: Path, lang: list[Any], m: dict[str, Any], out: Path, seed: int,
             progress: bool, callback_for: Any = None, resume: bool = False) -> tuple[Any, Any, dict[str, Any]]:
    """LoRA fine-tune of a copy of the pre-trained model with one action codec. ``callback_for(bundle, codec)``
    may return a training-loop callback (``train_loop``'s ``callback``), e.g. a frontier probe; ``resume``
    continues from the newest checkpoint in ``<out>/ft_<codec>`` (a finished one: no step left to train)."""
    import torch

    from agents.vla import make_codec
    from agents.vlm import load_vlm
    from training.vla.samples import build_samples
    from training.vla.train import add_lora, fit
    from training.vla.trainer import LoopSettings

    bundle = load_vlm(pretrained)
    torch.manual_seed(seed)
    add_lora(bundle, r=16, alpha=32, targets=LORA_TARGETS[m.get("lora_targets") or "lm"])
    codec = make_codec(METHODS[method], bundle.tokenizer)
    samples = build_samples(lang, codec, aux=True, replan=bool(m.get("replan") or m.get("replan_samples")))
    s = LoopSettings(out_dir=str(out / f"ft_{METHODS[method]}"), lr=m["ft_lr"], batch_size=m["batch"], grad_accum=1,
                     max_steps=m["ft_steps"], schedule=m["ft_schedule"], warmup_steps=m["ft_warmup"],
                     save_every=10**9, seed=seed, device="cpu", num_threads=1)
    res = fit(bundle, samples, s, progress=progress, resume=resume,
              callback=None if callback_for is None else callback_for(bundle, codec))
    log.info("%s: %d samples, loss %s -> %s in %.0f s (resumed from %s)", method, len(samples), res["first_loss"],
             res["last_loss"], res["seconds"], res["resumed_from"])
    return bundle, codec, {"samples": len(samples), "first_loss": res["first_loss"], "last_loss": res["last_loss"],
                           "train_s": res["seconds"]}


def preload_ml_stack() -> None:
    """Load triton's native library (pulled in by transformers/torch) before MuJoCo creates an EGL context:
    importing it afterwards segfaults the process on this machine."""
    import importlib.util

    if importlib.util.find_spec("triton") is not None:
        import triton  # noqa: F401
    import peft  # noqa: F401
    from transformers import AutoModelForImageTextToText  # noqa: F401


def run(mode: str, out: Path, cache: Path, seed: int, progress: bool, reuse: bool = False,
        methods: list[str] | None = None, m: dict[str, Any] | None = None,
        earlier: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pre-train, fine-tune each of ``methods`` (default: all of :data:`METHODS`) and roll out; the blind
    replay of the mean demonstration is always measured on the same seeds. ``m``: the run's settings (default:
    the mode's, :data:`MODES`); ``earlier``: method -> training figures of a run whose fine-tunes were adopted
    into ``out`` (``vlm2vla_rollout.adopt``): they are resumed at their last step instead of trained."""
    import torch

    preload_ml_stack()
    from agents.vla import VLAPolicy, VLAPolicyConfig, make_codec
    from sim.manip import ManipTask
    from training.vla.blind import language_replay_rollout, mean_trajectory, replay_rollout
    from training.vla.data.robosuite_source import record_robosuite
    from training.vla.evaluate import majority_baseline, rollout, skill_retained, spatial_accuracy, vqa_accuracy
    from training.vla.relabel import ScriptedRelabeller

    torch.set_num_threads(1)
    m = MODES[mode] if m is None else m
    if m.get("verifier") == "sim_state":
        import sim.manip.verifier  # noqa: F401 - registers the privileged "sim_state" verifier
    t0 = time.perf_counter()
    items, train, test = vqa_sets(cache, m, seed, progress)
    demos = record_robosuite("lift", m["demos"], m["image"], seed=seed, cache_dir=cache, progress=progress,
                             camera=m["camera"], noise_m=float(m.get("noise") or 0.0))
    lang = ScriptedRelabeller().relabel_all(demos)
    _stage("data", t0)
    pretrained = out / "pretrained"
    if not (reuse and reusable_pretrained(pretrained, m, seed)):
        pretrained = pretrain_vqa(out, pretrain_corpus(lang, items, m), train, m, seed, progress)
    from agents.vlm import load_vlm

    pre_bundle = load_vlm(pretrained)
    pre = vqa_accuracy(pre_bundle, test)
    majority = majority_baseline(train, test)
    log.info("pre-trained VQA: %s (majority baseline %.3f)", pre, majority)
    spatial = None
    if m.get("spatial") == "language":  # did the spatial prior take? held-out where/way questions (in the spatial
        # view; the action_tokens control's answers are rare tokens, which spatial_accuracy does not read)
        from training.vla.vqa_scenes import SPATIAL_KINDS, split_vqa

        held = [it for it in split_vqa(items, 0.25)[1] if it.kind in SPATIAL_KINDS]
        spatial = spatial_accuracy(pre_bundle, held, train)
        log.info("pre-trained spatial prior: %s", spatial)
    _stage("pre-training", t0)
    results: dict[str, Any] = {"mode": mode, "seed": seed, "settings": recorded(m),
                               "vqa_pretrained": pre, "vqa_majority_baseline": majority,
                               "vqa_test_questions": len(test), "demos": len(demos), "methods": {}}
    if spatial is not None:
        results["spatial_pretrained"] = spatial
    task = ManipTask(task="lift", image_size=m["image"], camera=m["camera"])
    seeds = episode_seeds(m, seed)
    results["episode_seeds"] = [seeds[0], seeds[-1]]
    try:
        results["blind_replay"] = replay_rollout(mean_trajectory(demos), task, seeds, m["max_steps"], progress)
        log.info("blind replay of the mean demonstration: %s", results["blind_replay"])
        # one executor setting for the policies and the ceiling; token budgets ~1.5x the longest demonstrated
        # target (subtasks 25, motion 7, chunk 72 tokens)
        policy_cfg = VLAPolicyConfig(max_step_m=0.03, max_tries=3, seed=seed, max_new_tokens_subtasks=40,
                                     max_new_tokens_motion=12, max_new_tokens_actions=96,
                                     replan_steps=int(m.get("replan") or 0),
                                     verifier=m.get("verifier") or "always_advance")
        results["language_replay"] = language_replay_rollout(
            lang, make_codec("language"), task, policy_cfg.max_step_m, policy_cfg.gripper_steps, m["max_steps"],
            progress)
        log.info("demonstrations' own action language replayed: %s", results["language_replay"])
        for method in METHODS if methods is None else methods:
            bundle, codec, tr = finetune(method, pretrained, lang, m, out, seed, progress, resume=earlier is not None)
            acc = vqa_accuracy(bundle, test)
            if earlier is not None:  # the adopted fine-tune's own figures; its VQA answers must come out the same
                tr = {k: earlier[method][k] for k in TRAINING_FIGURES} | {"reused": True}
                if acc["accuracy"] != earlier[method]["vqa_accuracy"]:
                    log.warning("%s: VQA accuracy %.4f differs from the earlier run's %.4f", method,
                                acc["accuracy"], earlier[method]["vqa_accuracy"])
            policy = VLAPolicy(bundle, dataclasses.replace(policy_cfg, codec=METHODS[method]), codec=codec)
            ro = rollout(policy, task, seeds, m["max_steps"], progress)
            results["methods"][method] = {
                **tr, "vqa": acc, **ro,
                # undefined (NaN) when the pre-trained model answers nothing right (can happen in --quick)
                "retention": acc["accuracy"] / pre["accuracy"] if pre["accuracy"] > 0 else float("nan"),
                "skill_retained": skill_retained(acc["accuracy"], pre["accuracy"], majority)}
            if codec.hierarchical:  # the same fine-tune with grammar-constrained decoding (agents.vla.constrained)
                ccfg = dataclasses.replace(policy.config, constrained=True)
                results["methods"][method]["constrained"] = rollout(
                    VLAPolicy(bundle, ccfg, codec=codec), task, seeds, m["max_steps"], progress)
            (out / "results_partial.json").write_text(json.dumps(results, indent=1, default=float))
            log.info("%s: %s", method, json.dumps({k: v for k, v in results["methods"][method].items()
                                                    if k != "vqa"}, default=float))
            _stage(method, t0)
    finally:
        task.close()
    results["seconds"] = time.perf_counter() - t0
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny settings, < 1 minute with warm caches")
    p.add_argument("--out", default="runs/bench_vlm2vla", help="working directory (models, checkpoints)")
    p.add_argument("--cache", default="runs/vla_cache", help="demonstration / VQA cache directory")
    p.add_argument("--docs", default=str(ROOT / "docs"), help="where the full mode writes vlm2vla.md/.png")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reuse-pretrained", action="store_true",
                   help="reuse <out>/<mode>/pretrained from an earlier run instead of pre-training again")
    p.add_argument("--grounding", action="store_true",
                   help="grounding pre-training (training.vlm.grounding) before the VQA pre-training")
    add_finetune_args(p)
    add_pretraining_args(p)
    add_rollout_args(p)
    p.add_argument("--methods", default=None,
                   help=f"comma-separated subset of {', '.join(METHODS)} ('' for the blind reference only; "
                        "default: all)")
    p.add_argument("--progress", action="store_true", help="show progress bars")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    mode = "quick" if args.quick else "full"
    out = Path(args.out) / mode
    m = settings(p, args, MODES[mode])
    methods = None if args.methods is None else [x.strip() for x in args.methods.split(",") if x.strip()]
    unknown = sorted(set(methods or []) - set(METHODS))
    if unknown:
        p.error(f"unknown methods {unknown}; choose from {list(METHODS)}")
    earlier = None
    try:
        episode_seeds(m, args.seed)
        if args.reuse_from:
            codecs = {k: METHODS[k] for k in (methods if methods is not None else METHODS)}
            earlier = earlier_run(Path(args.reuse_from), mode, m, args.seed, list(codecs))
            adopt(Path(args.reuse_from), out, mode, codecs, m["ft_steps"])
        if args.reuse_pretrained or args.reuse_from:
            reusable_pretrained(out / "pretrained", m, args.seed)
    except ValueError as exc:
        p.error(str(exc))
    res = run(mode, out, Path(args.cache), args.seed, args.progress, bool(args.reuse_pretrained or args.reuse_from),
              methods, m, earlier)
    (out / "results.json").write_text(json.dumps(res, indent=1, default=float))
    if mode == "full" and methods is None:
        write_report(res, Path(args.docs))
    elif mode == "full":
        log.warning("a subset of methods ran: %s not rewritten; the results are in %s", args.docs,
                    out / "results.json")
    def num(v: float, nd: int = 4) -> float | None:
        return None if v != v else round(float(v), nd)  # NaN -> null (strict JSON)

    summary = {
        "mode": mode, "vqa_pretrained": round(res["vqa_pretrained"]["accuracy"], 4),
        "retention": {k: num(v["retention"]) for k, v in res["methods"].items()},
        "skill_retained": {k: num(v["skill_retained"]) for k, v in res["methods"].items()},
        "success": {k: v["success"] for k, v in res["methods"].items()},
        "malformed_rate": {k: num(v["malformed_rate"]) for k, v in res["methods"].items()},
        "success_constrained": {k: v["constrained"]["success"] for k, v in res["methods"].items()
                                if "constrained" in v},
        "malformed_rate_constrained": {k: num(v["constrained"]["malformed_rate"]) for k, v in res["methods"].items()
                                       if "constrained" in v},
        "sec_per_action_constrained": {k: num(v["constrained"]["sec_per_action"]) for k, v in res["methods"].items()
                                       if "constrained" in v},
        "sec_per_action": {k: num(v["sec_per_action"]) for k, v in res["methods"].items()},
        "sec_per_generation": {k: num(v["sec_per_generation"]) for k, v in res["methods"].items()},
        "blind_replay_success": res["blind_replay"]["success"],
        "language_replay_success": res["language_replay"]["success"],
        "seconds": round(res["seconds"], 1)}
    if "spatial_pretrained" in res:
        summary["spatial_pretrained"] = {k: num(v, 3) for k, v in res["spatial_pretrained"].items()}
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
