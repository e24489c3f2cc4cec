"""Scene grounding: "where is the <object>?" asked about the simulator's own frames, answered from segmentation.

The navigator has to find a named piece of furniture in its 64 px frame before it can steer to it; imitation alone
does not teach that (docs/alldaywalker.md). This stage teaches it directly. Frames come from the shortest-path
follower's rollouts on the navigator's own episodes (the states the navigator will see), the answers from MuJoCo's
segmentation of the same frame: the object's pixel mask gives ``left`` / ``ahead`` / ``right`` (the mask's centroid
in the left, middle or right third of the image) or ``none`` (not in view). Only objects whose label (colour and
name) is unique in the house are asked about; barely visible ones (fewer than ``min_pixels``) are not asked.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.core.config import check_ints, check_numbers, config_from_dict
from agents.core.io import NPZ_READ_ERRORS, load_npz, save_npz
from agents.vln.actions import GOAL_WORDS

log = logging.getLogger(__name__)

QUESTION = "where is the {label}?"
ANSWERS = GOAL_WORDS
#: curricula: large objects and the left/right contrast first, then the middle, then small and out-of-view objects
STAGE_PRESETS: dict[str, list[list[Any]]] = {
    "coarse_to_fine": [[150, "left right"], [150, "left ahead right"], [40, "left ahead right"],
                       [12, "left ahead right none"]],
}


@dataclass
class SceneGroundingConfig:
    """Questions about the frames of ``episodes_per_scene`` follower rollouts per scene (held out: the navigator's
    eval episodes); ``none_fraction`` of the questions ask about an object out of view; objects under ``min_pixels``
    pixels are not asked about.

    Training: ``steps`` of batch ``batch_size`` at ``lr`` per stage. ``stages`` is a curriculum, a list of
    ``[min_pixels, "answers"]`` (only questions about objects of at least that many pixels, with one of those
    answers), or a preset name from ``STAGE_PRESETS``; None is one stage of every question. ``cotrain``: the
    fraction of every imitation batch of the navigator that is scene questions (0: pre-training only).

    Backbone guard (:mod:`training.vln.backbone`): the tiny backbone is drawn again, up to ``draws`` times, while
    its accuracy on the scene questions of the validation episodes is under ``accept``; the best draw is kept.
    ``bind_accept``: a draw whose last square-grounding stage (``grounding``'s held-out accuracy, chance 0.5) ends
    under it is rejected before its scene stages, which saves about half a draw; 0 turns it off. In the nine
    pre-trainings measured, the seven whose last bind stage ended under 0.9 held out at most 0.60 on the scene
    questions, the two above it 0.64 and 0.71 (docs/alldaywalker.md, "A twenty-first look")."""

    steps: int = 1500
    batch_size: int = 32
    lr: float = 1e-3
    episodes_per_scene: int = 60
    min_pixels: int = 12
    none_fraction: float = 0.25
    stages: list[list[Any]] | str | None = None
    cotrain: float = 0.0
    seed: int = 0
    draws: int = 1
    accept: float = 0.0
    bind_accept: float = 0.0

    def __post_init__(self) -> None:
        check_ints(self, {"steps": (0, 10**7), "batch_size": (1, 4096), "episodes_per_scene": (1, 100000),
                          "min_pixels": (1, 10**6), "seed": (0, 2**31 - 1), "draws": (1, 100)},
                   "SceneGroundingConfig.")
        check_numbers(self, {"lr": (1e-9, 10.0), "none_fraction": (0.0, 0.9), "cotrain": (0.0, 0.9),
                             "accept": (0.0, 1.0), "bind_accept": (0.0, 1.0)}, "SceneGroundingConfig.")
        self.stage_list()  # validates the curriculum

    def stage_list(self) -> list[tuple[int, tuple[str, ...]]]:
        """The curriculum as (min_pixels, answers) per stage."""
        stages = self.stages
        if isinstance(stages, str):
            if stages not in STAGE_PRESETS:
                raise ValueError(f"SceneGroundingConfig.stages: unknown preset {stages!r}; known: "
                                 f"{sorted(STAGE_PRESETS)}")
            stages = STAGE_PRESETS[stages]
        if stages is None:
            return [(self.min_pixels, ANSWERS)]
        if not isinstance(stages, list) or not stages:
            raise ValueError(f"SceneGroundingConfig.stages must be a non-empty list, a preset name or null, "
                             f"got {stages!r}")
        out = []
        for st in stages:
            ok = isinstance(st, (list, tuple)) and len(st) == 2 and isinstance(st[0], int) and isinstance(st[1], str)
            answers = tuple(st[1].split()) if ok else ()
            if not ok or st[0] < self.min_pixels or not answers or any(a not in ANSWERS for a in answers):
                raise ValueError(f"SceneGroundingConfig.stages: each stage is [min_pixels >= {self.min_pixels}, "
                                 f"'answers from {' '.join(ANSWERS)}'], got {st!r}")
            out.append((int(st[0]), answers))
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SceneGroundingConfig":
        return config_from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scene_grounding_corpus() -> list[str]:
    """Words the tokenizer must know for these questions."""
    return [QUESTION.format(label="object"), " ".join(ANSWERS)]


def where_answer(mask: np.ndarray | None, min_pixels: int) -> str | None:
    """``left`` / ``ahead`` / ``right`` by the mask's centroid column (thirds of the width), ``none`` for no mask,
    None (do not ask) for a mask smaller than ``min_pixels``."""
    if mask is None or not mask.any():
        return "none"
    if int(mask.sum()) < min_pixels:
        return None
    col = float(np.nonzero(mask)[1].mean()) + 0.5
    third = mask.shape[1] / 3
    return ANSWERS[min(int(col // third), 2)]


def frame_questions(house: Any, masks: dict[int, np.ndarray], goal: int | None, cfg: SceneGroundingConfig,
                    rng: np.random.Generator) -> list[tuple[str, str, int]]:
    """(question, answer, object pixels) about one frame: every visible object with a unique label (the goal
    included) and out-of-view objects (the goal first, if out of view) for about ``none_fraction`` of them."""
    counts = Counter(it.label for it in house.furniture)
    unique = [i for i, it in enumerate(house.furniture) if counts[it.label] == 1]
    asked = {i: where_answer(masks[i], cfg.min_pixels) for i in unique if i in masks}
    asked = {i: a for i, a in asked.items() if a is not None}
    n_none = round(len(asked) * cfg.none_fraction / (1 - cfg.none_fraction)) if asked \
        else int(rng.random() < cfg.none_fraction)
    hidden = [int(i) for i in rng.permutation([i for i in unique if i not in masks])]
    if goal in hidden:
        hidden.remove(goal)
        hidden.insert(0, goal)
    asked.update({i: "none" for i in hidden[:n_none]})
    return [(QUESTION.format(label=house.furniture[i].label), a, int(masks[i].sum()) if i in masks else 0)
            for i, a in sorted(asked.items())]


def scene_set_key(nav_cfg: Any, split: str, cfg: SceneGroundingConfig) -> str:
    """What a question set depends on: the navigator config, the split and the question settings (not training)."""
    import hashlib
    import json

    q = {k: getattr(cfg, k) for k in ("episodes_per_scene", "min_pixels", "none_fraction", "seed")}
    blob = json.dumps([nav_cfg.fingerprint(), split, q], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def make_scene_set(nav_cfg: Any, split: str, cfg: SceneGroundingConfig, progress: bool = False,
                   cache: Path | None = None) -> list[tuple[np.ndarray, str, str, int]]:
    """(frame, question, answer, object pixels) from follower rollouts of ``split`` episodes (``train``: the first
    ``episodes_per_scene`` per scene; ``eval``: the navigator's held-out episodes; ``val``: validation episodes),
    normal lighting. ``cache``: an ``.npz`` reused when it holds the set of the same :func:`scene_set_key`, else
    (re)written."""
    key = scene_set_key(nav_cfg, split, cfg)
    if cache is not None and Path(cache).is_file():
        try:
            with load_npz(cache) as d:
                if str(d["key"]) == key:
                    return [(f, str(q), str(a), int(n)) for f, q, a, n in zip(d["frame"], d["question"], d["answer"],
                                                                              d["pixels"])]
            log.info("scene questions cache %s is for other settings; rebuilding it", cache)
        except NPZ_READ_ERRORS as exc:
            log.warning("unreadable scene questions cache %s (%s); rebuilding it", cache, exc)
    items = _build_scene_set(nav_cfg, split, cfg, progress)
    if cache is not None and items:
        save_npz(cache, key=np.array(key), frame=np.stack([it[0] for it in items]),
                 question=np.array([it[1] for it in items]), answer=np.array([it[2] for it in items]),
                 pixels=np.array([it[3] for it in items], dtype=np.int64))
    return items


def _build_scene_set(nav_cfg: Any, split: str, cfg: SceneGroundingConfig, progress: bool
                     ) -> list[tuple[np.ndarray, str, str, int]]:
    from training.vln.data import collect
    from training.vln.navigator import make_env, make_episodes

    per_scene = cfg.episodes_per_scene if split == "train" else None
    eps, gts = make_episodes(nav_cfg, split, per_scene=per_scene)
    env = make_env(nav_cfg, "normal", eps, gts)
    asker = FrameQuestions(cfg, cfg.seed * 7919 + {"train": 0, "eval": 1}.get(split, 2))
    try:
        samples = collect(env, range(len(eps)), nav_cfg.agent_config(), nav_cfg.image_size, progress=progress,
                          keep_frames=True, on_state=asker, teacher=nav_cfg.teacher)
    finally:
        env.close()
    return asker.items(samples)


class FrameQuestions:
    """An ``on_state`` hook of :func:`training.vln.data.collect` that asks the scene questions of every visited
    state (:func:`frame_questions`); ``items(samples)`` pairs them with the collected samples' frames, which must
    have been kept (``keep_frames``) and are rendered under whatever condition the environment renders."""

    def __init__(self, cfg: SceneGroundingConfig, seed: int) -> None:
        self.cfg, self.rng = cfg, np.random.default_rng(seed)
        self.per_state: list[list[tuple[str, str, int]]] = []

    def __call__(self, env: Any) -> None:
        self.per_state.append(frame_questions(env.house, env.item_masks(), env.goal_item(), self.cfg, self.rng))

    def items(self, samples: list[Any]) -> list[tuple[np.ndarray, str, str, int]]:
        """(frame, question, answer, object pixels) of every question asked."""
        if len(samples) != len(self.per_state) or any(s.frame is None for s in samples):
            raise ValueError(f"{len(samples)} samples (with frames kept) for {len(self.per_state)} visited states")
        return [(s.frame, *qa) for s, qs in zip(samples, self.per_state) for qa in qs]


def cotrain_samples(nav_cfg: Any, cfg: SceneGroundingConfig, progress: bool = False,
                    cache: Path | None = None) -> list[Any]:
    """The training questions as navigator samples (the frame tiled as the navigator's image, the question as the
    prompt, the answer as the target) for co-training with imitation (``cache``: see :func:`make_scene_set`)."""
    return question_samples(make_scene_set(nav_cfg, "train", cfg, progress, cache), nav_cfg)


def question_samples(items: list[tuple[np.ndarray, str, str, int]], nav_cfg: Any) -> list[Any]:
    """(frame, question, answer, pixels) items as navigator samples: the frame tiled as the navigator's image, the
    question as the prompt, the answer as the target."""
    from agents.vln.processor_vln import tile_frames
    from training.vln.data import Sample

    history = nav_cfg.agent_config().num_history
    return [Sample(tile_frames([im], history, nav_cfg.image_size), q, a) for im, q, a, _ in items]


def report(items: list[tuple[np.ndarray, str, str, int]], hits: list[bool]) -> dict[str, Any]:
    """Accuracy overall, per answer and balanced, against each answer's share and the majority answer's."""
    answers = [it[2] for it in items]
    counts = Counter(answers)
    per = {a: round(float(np.mean([h for h, b in zip(hits, answers) if b == a])), 3) for a in ANSWERS if counts[a]}
    return {"n": len(items), "accuracy": round(float(np.mean(hits)) if hits else math.nan, 3),
            "balanced_accuracy": round(float(np.mean(list(per.values()))) if per else math.nan, 3),
            "per_answer": per, "answer_share": {a: round(counts[a] / max(len(answers), 1), 3) for a in ANSWERS},
            "majority": round(max(counts.values()) / len(answers), 3) if answers else math.nan}


def _in_stage(item: tuple[np.ndarray, str, str, int], stage: tuple[int, tuple[str, ...]]) -> bool:
    return item[2] in stage[1] and (item[2] == "none" or item[3] >= stage[0])


def pretrain_scene_grounding(bundle: Any, nav_cfg: Any, cfg: SceneGroundingConfig,
                             progress: bool = True, cache: Path | None = None, draw: int = 0,
                             held_cache: Path | None = None) -> dict[str, Any]:
    """Train all of ``bundle.model`` on the scene questions, stage by stage; returns, per stage and at the end,
    held-out (eval episodes) accuracy per answer against the majority answer's share, and training-set accuracy at
    the end. The model is left in eval mode. ``cache``: where the training questions are kept (co-training reuses
    them, :func:`make_scene_set`); ``held_cache``: the same for the held-out questions (the guard's later draws reuse
    them). ``draw``: the backbone guard's draw; a later one takes its batches in another order."""
    import torch

    from agents.vlm import training_example
    from training.vlm.grounding import answer_hits, fit_examples

    train = make_scene_set(nav_cfg, "train", cfg, progress, cache)
    held = make_scene_set(nav_cfg, "eval", cfg, progress, held_cache)
    if not train or not held:
        raise ValueError(f"no scene-grounding questions ({len(train)} train, {len(held)} held-out): the episodes "
                         "name no visible objects")
    train_ex = [training_example(bundle, im, q, a) for im, q, a, _ in train]
    held_ex = [training_example(bundle, im, q, a) for im, q, a, _ in held]
    for p in bundle.model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(bundle.model.parameters(), lr=cfg.lr, weight_decay=0.0)
    rng = np.random.default_rng(cfg.seed if draw == 0 else [cfg.seed, draw])
    stages, losses = [], []
    for k, stage in enumerate(cfg.stage_list()):
        idx = [i for i, it in enumerate(train) if _in_stage(it, stage)]
        hidx = [i for i, it in enumerate(held) if _in_stage(it, stage)]
        if not idx or not hidx:
            raise ValueError(f"scene-grounding stage {k} {stage} has no questions ({len(idx)} train, {len(hidx)} "
                             "held-out)")
        losses = fit_examples(bundle, opt, [train_ex[i] for i in idx], cfg.steps, cfg.batch_size, rng,
                              f"scene grounding {k} ({len(idx)} questions)", progress)
        rep = report([held[i] for i in hidx], answer_hits(bundle, [held_ex[i] for i in hidx], cfg.batch_size))
        stages.append({"min_pixels": stage[0], "answers": " ".join(stage[1]), "held_out": rep,
                       "loss_start": round(float(np.mean(losses[:5])), 4) if losses else math.nan,
                       "loss": round(float(np.mean(losses[-5:])), 4) if losses else math.nan})
        log.info("scene grounding stage %d %s: held-out %s", k, stage, rep)
    sub = rng.permutation(len(train))[:len(held)]
    res = {"stages": stages,
           "held_out": report(held, answer_hits(bundle, held_ex, cfg.batch_size)),
           "train": report([train[i] for i in sub], answer_hits(bundle, [train_ex[i] for i in sub], cfg.batch_size)),
           "loss_start": stages[0]["loss_start"], "loss": stages[-1]["loss"]}
    bundle.model.eval()
    log.info("scene grounding: held-out %s", res["held_out"])
    return res
