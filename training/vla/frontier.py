"""The forgetting frontier of a VLA fine-tune: VQA accuracy against open-loop action error, measured at checkpoints
along the fine-tune (:class:`FrontierProbe`, a :func:`training.vla.trainer.train_loop` callback).

One end point of one run says little when methods learn their actions at different rates (a codec that has
learnt less has also forgotten less). The frontier compares them where they act equally well: at matched
open-loop action error, which retains more VQA. Action error is codec-independent: every codec's generation
is decoded to the same K x 4 chunk (cm, gripper) and compared with the demonstration's own chunk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from training.vla.samples import Sample

log = logging.getLogger(__name__)


def _decode_target(codec: Any, target: str | tuple[int, ...]) -> np.ndarray:
    """The chunk a training target encodes (text targets for text codecs, token ids for token codecs)."""
    if isinstance(target, str):
        return codec.decode(target, ())
    return codec.decode("", tuple(target))


def score_chunk(codec: Any, target: str | tuple[int, ...], text: str, token_ids: Sequence[int]
                ) -> tuple[float, float, bool, bool]:
    """One generation against its target: (displacement error cm, demonstrated displacement cm, malformed,
    final gripper state right). Malformed output counts as no motion and a wrong gripper."""
    from agents.vla.action_language import MalformedActionError

    want = _decode_target(codec, target)
    try:
        got = codec.decode(text, tuple(token_ids))
    except MalformedActionError:
        got = None
    want_disp = want[:, :3].sum(axis=0)
    got_disp = np.zeros(3) if got is None else got[:, :3].sum(axis=0)
    grip = got is not None and round(float(got[-1, 3])) == round(float(want[-1, 3]))
    return float(np.linalg.norm(got_disp - want_disp)), float(np.linalg.norm(want_disp)), got is None, bool(grip)


def action_error(bundle: Any, codec: Any, samples: Sequence[Sample], max_new_tokens: int = 96,
                 batch_size: int = 16) -> dict[str, float]:
    """Greedy open-loop action predictions on ``samples`` (kind ``action``), decoded by ``codec``.

    Per sample the error is the distance (cm) between the predicted and the demonstrated chunk's net displacement
    (sum of the xyz deltas); a malformed generation counts as no motion (the executor would not move). Returns
    ``{"disp_err_cm": mean error, "rel_err": total error / total demonstrated displacement, "malformed": rate,
    "gripper_acc": the chunk's final gripper state right (malformed: wrong), "n", "example": the first generation's
    text}``.
    """
    from training.vla.evaluate import greedy_generations

    acts = [s for s in samples if s.kind == "action"]
    if not acts:
        raise ValueError("action_error needs samples of kind 'action'")
    gens = greedy_generations(bundle, [s.image for s in acts], [s.prompt for s in acts], max_new_tokens, batch_size)
    scores = [score_chunk(codec, s.target, g.text, g.token_ids) for g, s in zip(gens, acts, strict=True)]
    # the first batch-leading generation with any text
    example = next((g.text[:120] for g in gens[::batch_size] if g.text[:120]), "")
    errs, norms, bad, grip = (np.array([sc[k] for sc in scores], dtype=float) for k in range(4))
    return {"disp_err_cm": float(errs.mean()), "rel_err": float(errs.sum() / max(norms.sum(), 1e-9)),
            "malformed": float(bad.mean()), "gripper_acc": float(grip.mean()), "n": len(acts), "example": example}


@dataclass
class FrontierProbe:
    """A training-loop callback: every ``every`` steps (and at step 0 through :meth:`measure`), VQA accuracy on
    ``vqa_items`` and :func:`action_error` on ``action_samples``; points accumulate in ``points``."""

    bundle: Any
    codec: Any
    vqa_items: Sequence[Any]
    action_samples: Sequence[Sample]
    every: int
    max_new_tokens: int = 96
    points: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"every must be a positive int, got {self.every!r}")
        if not self.vqa_items or not any(s.kind == "action" for s in self.action_samples):
            raise ValueError("FrontierProbe needs VQA items and action samples")

    def measure(self, model: Any, step: int) -> dict[str, Any]:
        """Measure ``model`` (the bundle's model, possibly wrapped by the loop) now and record the point."""
        from training.vla.evaluate import vqa_accuracy

        t0 = time.perf_counter()
        held = self.bundle.model
        self.bundle.model = model
        try:
            vqa = vqa_accuracy(self.bundle, list(self.vqa_items))
            act = action_error(self.bundle, self.codec, self.action_samples, self.max_new_tokens)
        finally:
            self.bundle.model = held
        point = {"step": step, "vqa": vqa["accuracy"], "vqa_in_vocabulary": vqa["in_vocabulary"],
                 "vqa_by_kind": vqa["by_kind"], **act, "seconds": time.perf_counter() - t0}
        self.points.append(point)
        log.info("step %d: VQA %.3f, action error %.2f cm (rel %.2f), malformed %.2f", step, point["vqa"],
                 point["disp_err_cm"], point["rel_err"], point["malformed"])
        return point

    def __call__(self, model: Any, step: int) -> None:
        if step % self.every == 0:
            self.measure(model, step)
