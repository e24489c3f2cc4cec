"""Evaluation of VLA fine-tunes: VQA accuracy (exact match of the first answer word) and closed-loop robosuite
rollouts of a :class:`agents.vla.VLAPolicy` (success, malformed-output rate, seconds per action)."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
from tqdm import tqdm

from training.vla.vqa_scenes import VQAItem

log = logging.getLogger(__name__)


def _first_word(text: str) -> str:
    words = text.strip().lower().replace(".", " ").replace(",", " ").replace("?", " ").split()
    return words[0] if words else ""


def greedy_generations(bundle: Any, images: list[Any], prompts: list[str], max_new_tokens: int,
                       batch_size: int = 32, progress: bool = False, desc: str = "generate") -> list[Any]:
    """Greedy :class:`agents.vlm.Generation` per (image, prompt), in batches, with the model in eval mode (its
    training mode is restored afterwards, also on an error)."""
    from agents.vlm import GenerationSettings, generate

    was_training = bundle.model.training
    bundle.model.eval()
    settings = GenerationSettings(max_new_tokens=max_new_tokens)
    gens: list[Any] = []
    try:
        for i in tqdm(range(0, len(prompts), batch_size), desc=desc, disable=not progress, leave=False):
            gens += generate(bundle, images[i:i + batch_size], prompts[i:i + batch_size], settings)
    finally:
        if was_training:
            bundle.model.train()
    return gens


def vqa_accuracy(bundle: Any, items: list[VQAItem], batch_size: int = 32, progress: bool = False) -> dict[str, Any]:
    """Greedy answers to ``items``; accuracy = first answer word equals the ground truth. Returns ``{"accuracy",
    "by_kind": {kind: accuracy}, "n", "in_vocabulary"}``; ``in_vocabulary`` is the fraction of answers whose first
    word is one of the items' answers at all (a model can lose the answer format, not only the facts)."""
    if not items:
        raise ValueError("no VQA items to evaluate")
    gens = greedy_generations(bundle, [it.image for it in items], [it.question for it in items], 4, batch_size,
                              progress, desc="vqa eval")
    words = [_first_word(g.text) for g in gens]
    answers = {it.answer for it in items}
    correct = [w == it.answer for w, it in zip(words, items, strict=True)]
    valid = [w in answers for w in words]
    by_kind: dict[str, list[bool]] = {}
    for ok, it in zip(correct, items, strict=True):
        by_kind.setdefault(it.kind, []).append(ok)
    return {"accuracy": float(np.mean(correct)), "n": len(items), "in_vocabulary": float(np.mean(valid)),
            "by_kind": {k: float(np.mean(v)) for k, v in sorted(by_kind.items())}}


def _offset(text: str) -> np.ndarray | None:
    """The first ``[dx, dy, dz]`` of a ``where`` answer, or None when there is none."""
    import re

    m = re.search(r"\[\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\]", text)
    return None if m is None else np.array([float(g) for g in m.groups()])


def spatial_accuracy(bundle: Any, items: list[VQAItem], train: list[VQAItem] | None = None,
                     batch_size: int = 32) -> dict[str, Any]:
    """Greedy answers to the spatial-prior questions (``where``: an offset in cm, ``way``: a motion phrase). Returns
    ``where_err_cm`` (median horizontal error of the parsed offsets; an unparsed answer counts as the prior's),
    ``where_parsed``, ``way_accuracy`` (exact phrase) and, with ``train``, ``where_prior_cm``: the error of always
    answering the training offsets' mean (what a model that does not look at the image can reach)."""
    where = [it for it in items if it.kind == "where"]
    way = [it for it in items if it.kind == "way"]
    if not where and not way:
        raise ValueError("no spatial (where / way) VQA items to evaluate")
    truth = lambda its: np.stack([_offset(it.answer) for it in its])  # noqa: E731
    prior = truth([it for it in (train or where) if it.kind == "where"]).mean(0) if where else np.zeros(3)
    asked = where + way
    texts = [g.text for g in greedy_generations(bundle, [it.image for it in asked], [it.question for it in asked], 24,
                                                batch_size)]
    res: dict[str, Any] = {"n_where": len(where), "n_way": len(way)}
    if where:
        got = [_offset(t) for t in texts[:len(where)]]
        want = truth(where)
        pred = np.stack([prior if g is None else g for g in got])
        res["where_err_cm"] = float(np.median(np.linalg.norm((pred - want)[:, :2], axis=1)))
        res["where_parsed"] = float(np.mean([g is not None for g in got]))
        if train is not None:
            res["where_prior_cm"] = float(np.median(np.linalg.norm((want - prior)[:, :2], axis=1)))
    if way:
        res["way_accuracy"] = float(np.mean([t.strip() == it.answer for t, it in zip(texts[len(where):], way,
                                                                                    strict=True)]))
    return res


def majority_baseline(train: list[VQAItem], test: list[VQAItem]) -> float:
    """Accuracy of answering each question kind with its most frequent training answer (the blind baseline)."""
    from collections import Counter

    best = {k: Counter(it.answer for it in train if it.kind == k).most_common(1)[0][0]
            for k in {it.kind for it in train}}
    return float(np.mean([best.get(it.kind) == it.answer for it in test]))


def skill_retained(accuracy: float, pretrained: float, majority: float) -> float:
    """Share of the pre-trained model's VQA skill *above the blind baseline* that a fine-tuned model keeps:
    ``(accuracy - majority) / (pretrained - majority)``, where ``majority`` is :func:`majority_baseline` (answering
    each question kind with its most frequent training answer). 1 = all kept; 0 = no better than that constant
    answer; negative = worse than it (the answer format itself was lost). Plain retention (``accuracy /
    pretrained``) credits a model that answers constants with ``majority / pretrained`` (0.7 for the tiny
    benchmark models), this score does not. NaN when the pre-trained model does not beat the baseline."""
    for name, v in (("accuracy", accuracy), ("pretrained", pretrained), ("majority", majority)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be an accuracy in [0, 1], got {v}")
    if pretrained <= majority:
        return float("nan")
    return (accuracy - majority) / (pretrained - majority)


def rollout(policy: Any, task: Any, seeds: list[int], max_steps: int = 60, progress: bool = False) -> dict[str, Any]:
    """Closed-loop episodes of ``policy`` in ``task`` (a :class:`sim.manip.ManipTask`), one per seed.

    An episode ends at success, when the policy says done, after ``max_steps`` control steps, or when the policy
    gives up on malformed output (:class:`agents.vla.VLAGenerationError`, counted in ``gave_up``).
    Returns success rate, malformed-output rate, seconds per action (policy time, resampling included, per executed
    control step; NaN when none was executed), seconds per generation attempt and per well-formed cycle, the
    policy's mid-chunk re-plans (``replans``) and verifier retries (``subtask_retries``), and the seeds whose
    episode succeeded (``succeeded``: paired comparisons on the same seeds).
    """
    from agents.vla import VLAGenerationError

    policy.reset_stats()
    succeeded, gave_up, steps_total, policy_s = [], 0, 0, 0.0
    for seed in tqdm(seeds, desc="rollouts", disable=not progress, leave=False):
        obs = task.reset(seed)
        policy.reset()
        for _ in range(max_steps):
            t0 = time.perf_counter()
            try:
                a = policy.act(obs)
            except VLAGenerationError as exc:
                gave_up += 1
                log.debug("seed %d: policy gave up: %s", seed, exc)
                break
            finally:
                policy_s += time.perf_counter() - t0
            if a.done:
                break
            steps_total += 1
            obs = task.step(a.delta, a.gripper)
            if obs["success"]:
                succeeded.append(int(seed))
                break
    st = policy.stats.as_dict()
    return {"episodes": len(seeds), "success": len(succeeded) / len(seeds), "succeeded": succeeded, "gave_up": gave_up,
            "malformed_rate": st["malformed_rate"], "generations": st["generations"], "steps": steps_total,
            "sec_per_action": policy_s / steps_total if steps_total else float("nan"),
            "sec_per_generation": policy_s / st["generations"] if st["generations"] else float("nan"),
            "policy_s": policy_s, "replans": st.get("replans", 0),
            "subtask_retries": st.get("subtask_retries", 0),
            "sec_per_cycle": float(np.median(policy.stats.generation_s)) if policy.stats.generation_s else float("nan")}
