"""Grounding pre-training: teach a random-init VLM *where* things are before it learns a task.

A tiny VLM trained from scratch cannot learn to localise a small object directly: on "which side is the
square on?" with an 8 px square in a 64 px image it stays at chance after 1,500 steps (0.52), although a linear
probe on its random vision features answers 0.88 (``benchmarks/vlm_spatial_probe.py``; the curriculum: 0.95). The
language model has to learn, at once, to attend to the object's token and to read that token's position, and
neither has a gradient without the other. Large objects break the tie (their effect survives averaging over
tokens), and what is learnt on them transfers to small ones. Real VLMs get this from their pre-training mix
(PaliGemma: detection and referring expressions); this module gives the tiny backbones a miniature version:
generated images of coloured squares, questions about where a named square is ("which side is the red square
on?", "is the blue square at the top or the bottom?"), in stages of shrinking object size.

The default stages show one square per image. With two equally bright squares the question also needs the
colour word bound to the right square, a second plateau. Measured: after the localisation stages, dimming the
other square only teaches "the brighter one" (brightening it in steps 0.65 / 0.8 / 0.9 / 1.0 gives 0.90 / 0.73 /
0.82 / chance), and colour stages added after localisation stay at chance too. From a fresh model, the ``bind``
preset (:data:`BIND`: the colour of one square -> the colour of the square on a named side -> the side of a named
colour, squares in opposite halves, 24 -> 12 px) crosses it: 0.96-0.97 on 12 px side-of-colour questions for the
probe's tokenizer (``benchmarks/vlm_spatial_probe.py --binding``), 0.78 inside the navigator's backbone.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from agents.core.config import check_ints, check_numbers, config_from_dict

log = logging.getLogger(__name__)

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40), "green": (40, 190, 60), "blue": (50, 80, 230), "yellow": (235, 215, 40),
    "white": (245, 245, 245), "cyan": (40, 210, 220), "magenta": (210, 50, 200), "orange": (245, 140, 30)}
QUESTIONS = {"side": ("which side is the {c} square on?", ("left", "right")),
             "height": ("is the {c} square at the top or the bottom?", ("top", "bottom"))}
COLOUR_Q = "what colour is the square?"
COLOUR_AT_Q = "what colour is the square on the {s}?"
#: ``where``: side / top-bottom of the named square; ``colour``: the colour of the only square; ``colour_at``: two
#: squares in opposite halves, the colour of the one on the named side; ``side_of``: two squares in opposite halves,
#: the side of the named one
TASKS = ("where", "colour", "colour_at", "side_of")
#: objects per image each task needs (``where``: any number)
TASK_OBJECTS = {"colour": 1, "colour_at": 2, "side_of": 2}
#: the default: localisation of one square, largest first
LOCALISE = [[24, 1, 1.0, "where"], [16, 1, 1.0, "where"], [12, 1, 1.0, "where"], [8, 1, 1.0, "where"],
            [6, 1, 1.0, "where"]]
#: binding a colour word to one of two squares, from a fresh model: name the colour of the only square, then the
#: colour of the square on a named side, then the side of a named colour (the navigator's question), shrinking
BIND = [[24, 1, 1.0, "colour"], [24, 2, 1.0, "colour_at"], [24, 2, 1.0, "colour_at"], [24, 2, 1.0, "side_of"],
        [24, 2, 1.0, "side_of"], [24, 2, 1.0, "side_of"], [16, 2, 1.0, "side_of"], [12, 2, 1.0, "side_of"]]
#: named stage lists (``GroundingConfig.stages`` may be one of these names)
PRESETS: dict[str, list[list[Any]]] = {"localise": LOCALISE, "bind": BIND}


def _stage(st: Any) -> tuple[int, int, float, str] | None:
    """A stage entry as (size, objects, distractor brightness, task), or None when it is malformed."""
    if not isinstance(st, (list, tuple)) or len(st) not in (3, 4):
        return None
    size, objects, dim, task = (*st, "where") if len(st) == 3 else st
    if any(not isinstance(v, int) or isinstance(v, bool) for v in (size, objects)) or not isinstance(dim, (int, float)):
        return None
    if size < 1 or not 1 <= objects <= len(COLOURS) or not 0.0 <= dim <= 1.0 or task not in TASKS:
        return None
    if task in TASK_OBJECTS and objects != TASK_OBJECTS[task]:
        return None
    return size, objects, float(dim), task


@dataclass
class GroundingConfig:
    """``stages`` of ``[object size px, squares per image, distractor brightness, task]`` (``task`` one of
    :data:`TASKS`, ``where`` when left out) or a :data:`PRESETS` name; ``steps_per_stage`` steps and
    ``samples_per_stage`` generated images each; AdamW at ``lr``. Default: localisation of one square, largest first
    (:data:`LOCALISE`); ``"bind"`` (:data:`BIND`) teaches which of two squares a colour word names."""

    stages: list[list[Any]] = field(default_factory=lambda: [list(st) for st in LOCALISE])
    steps_per_stage: int = 300
    samples_per_stage: int = 2000
    batch_size: int = 32
    lr: float = 1e-3
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.stages, str):
            if self.stages not in PRESETS:
                raise ValueError(f"GroundingConfig.stages: unknown preset {self.stages!r}; known: {sorted(PRESETS)}")
            self.stages = [list(st) for st in PRESETS[self.stages]]
        check_ints(self, {"steps_per_stage": (0, 10**6), "samples_per_stage": (8, 10**6),
                          "batch_size": (1, 4096), "seed": (0, 2**31 - 1)}, "GroundingConfig.")
        check_numbers(self, {"lr": (1e-8, 1.0)}, "GroundingConfig.")
        if not isinstance(self.stages, list) or not self.stages or any(_stage(st) is None for st in self.stages):
            raise ValueError(f"GroundingConfig.stages must be a non-empty list of [size >= 1, objects in 1.."
                             f"{len(COLOURS)}, distractor brightness in [0, 1], task in {TASKS} (objects per task: "
                             f"{TASK_OBJECTS})], got {self.stages!r}")

    def stage_list(self) -> list[tuple[int, int, float, str]]:
        """The stages as (size, objects, distractor brightness, task)."""
        return [_stage(st) for st in self.stages]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GroundingConfig":
        return config_from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def grounding_corpus() -> list[str]:
    """Every question and answer word (for building a tiny model's tokenizer)."""
    texts = [q.format(c=c) for q, _ in QUESTIONS.values() for c in COLOURS]
    texts += [COLOUR_Q, COLOUR_AT_Q.format(s="left"), COLOUR_AT_Q.format(s="right"), " ".join(COLOURS)]
    return texts + [" ".join(a for _, ans in QUESTIONS.values() for a in ans)]


def _background(rng: np.random.Generator, image_size: int) -> np.ndarray:
    """A dark noisy image (values 0..69) for the squares to be drawn on."""
    return (rng.random((image_size, image_size, 3)) * 70).astype(np.uint8)


def _margin(size: int) -> float:
    """How far (px) an asked square's centre stays from the dividing line, so that no answer is ambiguous."""
    return max(1.0, size / 4)


def _place(rng: np.random.Generator, size: int, image: int, taken: list[tuple[int, int]]) -> tuple[int, int] | None:
    for _ in range(50):
        x, y = (int(v) for v in rng.integers(0, image - size + 1, size=2))
        if all(abs(x - tx) >= size and abs(y - ty) >= size for tx, ty in taken):
            return x, y
    return None


def _colour_set(n: int, size: int, image_size: int, objects: int, rng: np.random.Generator,
                task: str) -> list[tuple[np.ndarray, str, str]]:
    """``colour`` (one square: its colour), ``colour_at`` (two squares in opposite halves: the colour of the one
    on the named side) and ``side_of`` (the same images: the side of the named colour)."""
    names = list(COLOURS)
    out: list[tuple[np.ndarray, str, str]] = []
    while len(out) < n:
        img = _background(rng, image_size)
        colours = rng.choice(len(names), size=objects, replace=False)
        halves = rng.permutation(2)[:objects]
        xs = [int(rng.integers(0, image_size // 2 - size + 1)) + int(h) * image_size // 2 for h in halves]
        if any(abs(x + size / 2 - image_size / 2) < _margin(size) for x in xs):
            continue
        for x, ci in zip(xs, colours):
            y = int(rng.integers(0, image_size - size + 1))
            img[y:y + size, x:x + size] = COLOURS[names[ci]]
        k = int(rng.integers(0, objects))
        side = ("left", "right")[int(halves[k])]
        if task == "colour":
            out.append((img, COLOUR_Q, names[colours[0]]))
        elif task == "colour_at":
            out.append((img, COLOUR_AT_Q.format(s=side), names[colours[k]]))
        else:
            out.append((img, QUESTIONS["side"][0].format(c=names[colours[k]]), side))
    return out


def make_grounding_set(n: int, size: int, image_size: int, objects: int = 2, seed: int = 0,
                       distractor_brightness: float = 1.0, task: str = "where") -> list[tuple[np.ndarray, str, str]]:
    """``n`` (image, question, answer) triples with ``objects`` squares of ``size`` px in distinct colours; the
    squares not asked about are drawn at ``distractor_brightness`` (1 = as bright as the asked one; ``where``
    only). ``task``: see :data:`TASKS`.

    The asked square's centre is never on the dividing line (at least a quarter of its size away), so every
    answer is unambiguous."""
    if not 1 <= size <= image_size // 2:
        raise ValueError(f"object size must be in [1, {image_size // 2}] for {image_size} px images, got {size}")
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    rng = np.random.default_rng(seed)
    if task != "where":
        if objects != TASK_OBJECTS[task]:
            raise ValueError(f"task {task!r} needs {TASK_OBJECTS[task]} object(s), got {objects}")
        return _colour_set(n, size, image_size, objects, rng, task)
    names = list(COLOURS)
    out: list[tuple[np.ndarray, str, str]] = []
    while len(out) < n:
        img = _background(rng, image_size)
        colours = rng.choice(len(names), size=objects, replace=False)
        taken: list[tuple[int, int]] = []
        k = int(rng.integers(0, objects))
        for j, ci in enumerate(colours):
            pos = _place(rng, size, image_size, taken)
            if pos is None:
                break
            taken.append(pos)
            scale = 1.0 if j == k else distractor_brightness
            img[pos[1]:pos[1] + size, pos[0]:pos[0] + size] = np.asarray(COLOURS[names[ci]]) * scale
        if len(taken) < objects:
            continue
        kind = ("side", "height")[int(rng.integers(0, 2))]
        centre = taken[k][0 if kind == "side" else 1] + size / 2
        if abs(centre - image_size / 2) < _margin(size):
            continue
        question, answers = QUESTIONS[kind]
        out.append((img, question.format(c=names[colours[k]]), answers[int(centre > image_size / 2)]))
    return out


def answer_hits(bundle: Any, examples: list[dict[str, Any]], batch_size: int) -> list[bool]:
    """Per example: is the greedy answer an exact match (every answer token the arg-max given the previous ones)?"""
    import torch

    from agents.vlm import IGNORE_INDEX, collate

    model = bundle.model
    model.eval()
    hits: list[bool] = []
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            batch = collate(bundle, examples[i:i + batch_size])
            logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
            labels = batch["labels"]
            pred = logits[:, :-1].argmax(-1)
            tgt = labels[:, 1:]
            mask = tgt != IGNORE_INDEX
            hits += [bool(h) for h in ((pred == tgt) | ~mask).all(1)]
    return hits


def _accuracy(bundle: Any, examples: list[dict[str, Any]], batch_size: int) -> float:
    return sum(answer_hits(bundle, examples, batch_size)) / max(len(examples), 1)


def fit_examples(bundle: Any, opt: Any, examples: list[dict[str, Any]], steps: int, batch_size: int,
                 rng: np.random.Generator, desc: str, progress: bool = True) -> list[float]:
    """``steps`` optimiser steps on random batches of ``training_example``s (all of ``bundle.model``, grad-norm
    clipped at 1); returns the losses. Leaves the model in train mode."""
    import torch

    from agents.vlm import collate

    model = bundle.model
    model.train()
    losses: list[float] = []
    bar = tqdm(range(steps), desc=desc, disable=not progress, leave=False)
    for _ in bar:
        idx = rng.choice(len(examples), size=min(batch_size, len(examples)), replace=False)
        loss = model(**collate(bundle, [examples[i] for i in idx])).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    return losses


def pretrain_grounding(bundle: Any, cfg: GroundingConfig, progress: bool = True) -> dict[str, Any]:
    """Train all of ``bundle.model`` through the stages; returns held-out accuracy per stage (chance 0.5).

    The model is left in eval mode with every parameter trainable."""
    import torch

    from agents.vlm import training_example

    model = bundle.model
    for p in model.parameters():
        p.requires_grad_(True)
    image_size = int(bundle.image_size or 64)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    rng = np.random.default_rng(cfg.seed)
    history = []
    for stage, (size, objects, dim, task) in enumerate(cfg.stage_list()):
        data = make_grounding_set(cfg.samples_per_stage, size, image_size, objects, cfg.seed * 1000 + stage, dim, task)
        held = make_grounding_set(200, size, image_size, objects, cfg.seed * 1000 + 500 + stage, dim, task)
        train_ex = [training_example(bundle, im, q, a) for im, q, a in data]
        held_ex = [training_example(bundle, im, q, a) for im, q, a in held]
        losses = fit_examples(bundle, opt, train_ex, cfg.steps_per_stage, cfg.batch_size, rng,
                              f"grounding {task} {size}px x{objects}", progress)
        acc = _accuracy(bundle, held_ex, cfg.batch_size)
        loss_tail = float(np.mean(losses[-20:])) if losses else math.nan
        history.append({"size": size, "objects": objects, "distractor_brightness": dim, "task": task,
                        "accuracy": round(acc, 3), "loss": round(loss_tail, 4)})
        log.info("grounding stage %d (%s, %d px x %d): held-out accuracy %.3f, loss %.3f", stage, task, size, objects,
                 acc, loss_tail)
    model.eval()
    return {"stages": history, "final_accuracy": history[-1]["accuracy"] if history else math.nan}
