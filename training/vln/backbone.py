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

from agents.core.io import write_text

log = logging.getLogger(__name__)
SCENE_SET = "scene_questions.npz"  # the training scene questions, kept for co-training
HELD_SET = "scene_questions_eval.npz"  # the held-out ones, kept while the guard draws again
GROUNDING_JSON = "grounding.json"
DRAWS_JSON = "draws.json"  # the guard's scores so far, written after every draw (a killed build keeps them)
DRAW_SEED_STRIDE = 1000  # draw k initialises the tiny model with seed + k * stride


def scene_accuracy(bundle: Any, items: list[tuple[np.ndarray, str, str, int]], batch_size: int) -> float:
    """Share of the (frame, question, answer, pixels) ``items`` the model answers exactly (greedy)."""
    from agents.vlm import training_example
    from training.vlm.grounding import answer_hits

    hits = answer_hits(bundle, [training_example(bundle, im, q, a) for im, q, a, _ in items], batch_size)
    return float(np.mean(hits)) if hits else float("nan")


BASE_WORDS = ["forward left right stop past: next: none."]  # action words every navigator's tokenizer must know


def _tiny(cfg: Any, out_dir: Path, corpus: list[str], k: int) -> Path:
    """Draw ``k``'s random-weight tiny VLM, its tokenizer trained on the words it will see, written to ``out_dir``."""
    from agents.vlm.bundle import build_tiny_vlm
    from training.vlm.grounding import grounding_corpus
    from training.vln.scene_grounding import scene_grounding_corpus

    extra = (grounding_corpus() if cfg.grounding_config() else []) + \
        (scene_grounding_corpus() if cfg.scene_grounding_config() else [])
    return build_tiny_vlm(out_dir, family=cfg.family, image_size=cfg.image_size, overwrite=True,
                          corpus=BASE_WORDS + corpus[:400] + extra, seed=cfg.seed + k * DRAW_SEED_STRIDE, **cfg.tiny)


def _draw(cfg: Any, out_dir: Path, corpus: list[str], k: int, held_cache: Path | None = None,
          bind_accept: float = 0.0) -> tuple[Any, dict[str, Any]]:
    """Draw ``k`` of the backbone: built into ``out_dir`` and pre-trained; returns (bundle, results).
    ``held_cache``: where the held-out scene questions are kept between draws. A draw whose last square-grounding
    stage ends under ``bind_accept`` stops there, with ``results["rejected"] = "bind"``."""
    from agents.vlm.bundle import load_vlm
    from training.vlm.grounding import pretrain_grounding
    from training.vln.scene_grounding import pretrain_scene_grounding

    grounding, scene = cfg.grounding_config(), cfg.scene_grounding_config()
    bundle = load_vlm(_tiny(cfg, out_dir, corpus, k))
    results: dict[str, Any] = {}
    if grounding is not None:
        results["grounding"] = pretrain_grounding(bundle, dataclasses.replace(grounding, seed=grounding.seed + k))
        log.info("grounding pre-training of the backbone: %s", results["grounding"]["stages"])
        if results["grounding"]["final_accuracy"] < bind_accept:
            log.info("backbone draw %d rejected before its scene stages: last bind stage %.3f < %.3f", k,
                     results["grounding"]["final_accuracy"], bind_accept)
            return bundle, {**results, "rejected": "bind"}
    if scene is not None:
        results["scene_grounding"] = pretrain_scene_grounding(bundle, cfg, scene, cache=Path(out_dir) / SCENE_SET,
                                                              draw=k, held_cache=held_cache)
    return bundle, results


def _guarded_draws(cfg: Any, out_dir: Path, corpus: list[str], scene: Any) -> tuple[Any, dict[str, Any]]:
    """Draw until one reaches ``scene.accept`` on the validation questions or ``scene.draws`` are spent; returns
    the bundle holding the best draw's weights and that draw's results, with every draw's score under ``draws``."""
    from training.vln.scene_grounding import make_scene_set

    val = make_scene_set(cfg, "val", scene)
    if not val:
        raise ValueError("no scene questions on the validation episodes: the backbone guard cannot score draws")
    best_acc, best_k, best_state, best_results = -1.0, -1, {}, {}
    tried: list[dict[str, Any]] = []
    for k in range(scene.draws):
        # the last draw is never cut short while no draw has been scored: the guard always keeps a full one
        bind_accept = scene.bind_accept if (k < scene.draws - 1 or best_k >= 0) else 0.0
        bundle, results = _draw(cfg, out_dir, corpus, k, held_cache=out_dir / HELD_SET, bind_accept=bind_accept)
        grounding = results.get("grounding", {})
        entry = {"draw": k, "val_accuracy": None, "n": len(val), "bind_accuracy": grounding.get("final_accuracy"),
                 "bind_stages": [st["accuracy"] for st in grounding.get("stages", [])]}
        if results.get("rejected"):
            entry["rejected"] = results["rejected"]
        else:  # each scene stage's held-out accuracy and final loss: what an earlier cut-off would be set from
            stages = results.get("scene_grounding", {}).get("stages", [])
            entry["scene_stages"] = [st.get("held_out", {}).get("accuracy") for st in stages]
            entry["scene_losses"] = [st.get("loss") for st in stages]
            acc = scene_accuracy(bundle, val, scene.batch_size)
            entry["val_accuracy"] = round(acc, 4)
        tried.append(entry)
        write_text(out_dir / DRAWS_JSON, json.dumps({"accept": scene.accept, "tried": tried}, indent=1))
        if "rejected" in entry:
            continue
        log.info("backbone draw %d: validation scene accuracy %.3f (accept >= %.3f)", k, acc, scene.accept)
        if acc > best_acc:
            best_acc, best_k, best_results = acc, k, results
            best_state = {n: t.detach().clone() for n, t in bundle.model.state_dict().items()}
        if acc >= scene.accept:
            break
    if best_k != tried[-1]["draw"]:  # the bundle holds the last draw tried (perhaps one rejected early)
        bundle.model.load_state_dict(best_state)
    if best_acc < scene.accept:
        log.warning("no backbone draw of %d reached validation scene accuracy %.3f; keeping draw %d (%.3f)",
                    len(tried), scene.accept, best_k, best_acc)
    best_results["draws"] = {"accept": scene.accept, "bind_accept": scene.bind_accept, "chosen": best_k,
                             "accepted": best_acc >= scene.accept, "tried": tried}
    return bundle, best_results


def build_backbone(cfg: Any, out_dir: Path, corpus: list[str]) -> Path:
    """The VLM directory to start from: ``cfg.vlm_path`` as given, or a tiny random-weight model built into
    ``out_dir`` (a ``VLNTrainConfig``), pre-trained there when ``cfg.grounding`` / ``cfg.scene_grounding`` are set,
    with their held-out results (and every draw's validation accuracy) in ``out_dir/grounding.json``."""
    if cfg.vlm_path is not None:
        return Path(cfg.vlm_path)
    out_dir = Path(out_dir)
    scene = cfg.scene_grounding_config()
    if cfg.grounding_config() is None and scene is None:
        return _tiny(cfg, out_dir, corpus, 0)
    if scene is not None and (scene.draws > 1 or scene.accept > 0):
        bundle, results = _guarded_draws(cfg, out_dir, corpus, scene)
    else:
        bundle, results = _draw(cfg, out_dir, corpus, 0)
    bundle.model.save_pretrained(str(out_dir))
    bundle.processor.save_pretrained(str(out_dir))
    (out_dir / GROUNDING_JSON).write_text(json.dumps(results, indent=1, default=float))
    return out_dir
