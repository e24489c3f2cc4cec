"""The navigator's tiny backbone: random weights, pre-trained on generated squares (``grounding``) and on scene
questions about the simulator's frames (``scene_grounding``), and drawn again while it fails a validation bar.

Whether the tiny vision tower learns to bind a word to a place depends on the draw (docs/alldaywalker.md, "A
sixteenth look": held-out scene accuracy 0.51 to 0.71 across three seeds of one config). ``scene_grounding``'s
``draws`` and ``accept`` guard against a bad one: each draw (new initial weights, new square data, new batch order;
the same questions) is scored on scene questions of a separate validation split (``val`` episodes, neither the
training nor the navigator's evaluation episodes), and drawing stops at the first that reaches ``accept``; else the
best is kept.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)
SCENE_SET = "scene_questions.npz"  # the training scene questions, kept for co-training
GROUNDING_JSON = "grounding.json"
DRAW_SEED_STRIDE = 1000  # draw k initialises the tiny model with seed + k * stride


def scene_accuracy(bundle: Any, items: list[tuple[np.ndarray, str, str, int]], batch_size: int) -> float:
    """Share of the (frame, question, answer, pixels) ``items`` the model answers exactly (greedy)."""
    from agents.vlm import training_example
    from training.vlm.grounding import answer_hits

    hits = answer_hits(bundle, [training_example(bundle, im, q, a) for im, q, a, _ in items], batch_size)
    return float(np.mean(hits)) if hits else float("nan")


def _draw(cfg: Any, out_dir: Path, corpus: list[str], k: int) -> tuple[Any, dict[str, Any]]:
    """Draw ``k`` of the backbone: built into ``out_dir`` and pre-trained; returns (bundle, results)."""
    from agents.vlm.bundle import build_tiny_vlm, load_vlm
    from training.vlm.grounding import grounding_corpus, pretrain_grounding
    from training.vln.scene_grounding import pretrain_scene_grounding, scene_grounding_corpus

    grounding, scene = cfg.grounding_config(), cfg.scene_grounding_config()
    words = ["forward left right stop past: next: none."]
    extra = (grounding_corpus() if grounding else []) + (scene_grounding_corpus() if scene else [])
    path = build_tiny_vlm(out_dir, family=cfg.family, image_size=cfg.image_size, overwrite=True,
                          corpus=words + corpus[:400] + extra, seed=cfg.seed + k * DRAW_SEED_STRIDE, **cfg.tiny)
    bundle = load_vlm(path)
    results: dict[str, Any] = {}
    if grounding is not None:
        results["grounding"] = pretrain_grounding(bundle, dataclasses.replace(grounding, seed=grounding.seed + k))
        log.info("grounding pre-training of the backbone: %s", results["grounding"]["stages"])
    if scene is not None:
        results["scene_grounding"] = pretrain_scene_grounding(bundle, cfg, scene, cache=Path(out_dir) / SCENE_SET,
                                                              draw=k)
    return bundle, results


def build_backbone(cfg: Any, out_dir: Path, corpus: list[str]) -> Path:
    """The VLM directory to start from: ``cfg.vlm_path`` as given, or a tiny random-weight model built into
    ``out_dir`` (a ``VLNTrainConfig``), pre-trained there when ``cfg.grounding`` / ``cfg.scene_grounding`` are set,
    with their held-out results (and every draw's validation accuracy) in ``out_dir/grounding.json``."""
    if cfg.vlm_path is not None:
        return Path(cfg.vlm_path)
    from agents.vlm.bundle import build_tiny_vlm

    out_dir = Path(out_dir)
    scene = cfg.scene_grounding_config()
    if cfg.grounding_config() is None and scene is None:
        words = ["forward left right stop past: next: none."]
        return build_tiny_vlm(out_dir, family=cfg.family, image_size=cfg.image_size, overwrite=True,
                              corpus=words + corpus[:400], seed=cfg.seed, **cfg.tiny)
    guarded = scene is not None and (scene.draws > 1 or scene.accept > 0)
    val: list[Any] = []
    if guarded:
        from training.vln.scene_grounding import make_scene_set

        val = make_scene_set(cfg, "val", scene)
        if not val:
            raise ValueError("no scene questions on the validation episodes: the backbone guard cannot score draws")
    best: tuple[float, int, dict[str, Any], dict[str, Any]] | None = None
    draws: list[dict[str, Any]] = []
    bundle = None
    for k in range(scene.draws if guarded else 1):
        bundle, results = _draw(cfg, out_dir, corpus, k)
        if not guarded:
            best = (float("nan"), k, {}, results)
            break
        acc = scene_accuracy(bundle, val, scene.batch_size)
        draws.append({"draw": k, "val_accuracy": round(acc, 4), "n": len(val)})
        log.info("backbone draw %d: validation scene accuracy %.3f (accept >= %.3f)", k, acc, scene.accept)
        if best is None or acc > best[0]:
            best = (acc, k, {n: t.detach().clone() for n, t in bundle.model.state_dict().items()}, results)
        if acc >= scene.accept:
            break
    assert best is not None and bundle is not None
    acc, k, state, results = best
    if guarded:
        if draws[-1]["draw"] != k:
            bundle.model.load_state_dict(state)
        results["draws"] = {"accept": scene.accept, "chosen": k, "accepted": acc >= scene.accept, "tried": draws}
        if acc < scene.accept:
            log.warning("no backbone draw of %d reached validation scene accuracy %.3f; keeping draw %d (%.3f)",
                        len(draws), scene.accept, k, acc)
    bundle.model.save_pretrained(str(out_dir))
    bundle.processor.save_pretrained(str(out_dir))
    (out_dir / GROUNDING_JSON).write_text(json.dumps(results, indent=1, default=float))
    return out_dir
