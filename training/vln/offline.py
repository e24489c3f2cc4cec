"""Offline learning and forgetting of the lifelong sequence: teacher-forced answers on held-out demonstrations.

Closed-loop SR over a few dozen episodes per task moves by about 0.06 from noise alone at this scale
(``docs/alldaywalker.md``). The same held-out episodes, driven by the teacher, give several hundred labelled model
calls per task; the navigator's token accuracy and loss on their answers (the goal's place and the next actions) are
deterministic for given weights, so the matrix ACC[k, t] after each task k shows what an adapter learnt and what it
lost without the noise of rollouts. Each method is scored with its task's own adapter or experts (the oracle id,
as the released TuKA code evaluates); routing is measured by the closed-loop SR.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from training.vln.data import Sample
from training.vln.trainer import make_batch, model_inputs

#: the offline metrics, each a (T x T) matrix after every task
OFFLINE_KEYS = ("token_acc", "answer_acc", "loss")


def answer_metrics(model: Any, vproc: Any, samples: Sequence[Sample], batch_size: int = 16) -> dict[str, float]:
    """Teacher-forced ``loss`` (mean per answer token), ``token_acc`` (share of answer tokens that are the model's
    argmax) and ``answer_acc`` (share of samples whose every answer token is: the whole answer, goal place and
    actions, as greedy decoding would write it) of ``model`` on ``samples``; answer = the labelled tokens, with EOS."""
    import torch
    import torch.nn.functional as F

    if not samples:
        raise ValueError("answer_metrics needs at least one sample")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    was_training = model.training
    model.eval()
    nll, right, n, exact = 0.0, 0, 0, 0
    try:
        with torch.no_grad():
            for i in range(0, len(samples), batch_size):
                inputs = model_inputs(model, make_batch(vproc, samples[i:i + batch_size]))
                labels = inputs.pop("labels")
                logits = model(**inputs).logits[:, -labels.shape[1]:].float()
                pred, gold = logits[:, :-1], labels[:, 1:]  # position i predicts token i + 1
                keep = gold != -100
                nll += float(F.cross_entropy(pred[keep], gold[keep], reduction="sum"))
                hit = (pred.argmax(-1) == gold) | ~keep
                right += int(hit[keep].sum())
                exact += int(hit.all(-1).sum())
                n += int(keep.sum())
    finally:
        model.train(was_training)
    if n == 0:
        raise ValueError("the samples carry no labelled answer tokens")
    return {"loss": nll / n, "token_acc": right / n, "answer_acc": exact / len(samples)}


def subsample(samples: Sequence[Sample], limit: int, seed: int = 0) -> list[Sample]:
    """At most ``limit`` of ``samples``, a fixed random subset in their original order."""
    if len(samples) <= limit:
        return list(samples)
    keep = np.sort(np.random.default_rng(seed).choice(len(samples), size=limit, replace=False))
    return [samples[i] for i in keep]


def offline_matrices(n_tasks: int) -> dict[str, np.ndarray]:
    """Empty (NaN) matrices X[k, t] for every offline metric."""
    return {k: np.full((n_tasks, n_tasks), np.nan) for k in OFFLINE_KEYS}


def summarise(mats: dict[str, np.ndarray]) -> dict[str, Any]:
    """The offline part of a method's report: matrices, the accuracy right after each task and at the end, the
    final means, the relative forgetting of each accuracy (``lifelong.forgetting``) and the mean rise of the loss from
    right after each task to the end (its absolute forgetting, negated)."""
    from training.vln.lifelong import forgetting

    T = mats["loss"].shape[0]
    drop = forgetting(mats["loss"])["absolute"]
    lost = {k: forgetting(v)["relative"] for k, v in mats.items() if k != "loss"}
    return {
        "matrices": {k: v.tolist() for k, v in mats.items()},
        "right_after": {k: np.diag(v).tolist() for k, v in mats.items()},
        "final": {k: v[T - 1].tolist() for k, v in mats.items()},
        "avg": {k: float(np.mean(v[T - 1])) for k, v in mats.items()},
        "forgetting": {**lost, "loss_rise": None if drop is None else 0.0 - drop},  # 0.0 - : no "-0.000" cells
    }
