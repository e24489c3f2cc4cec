"""The imitation step loop (teacher-forced cross-entropy on the action words), accelerate-ready.

Used by ``allday train vln`` (base navigator, DAgger rounds) and by every lifelong method of the benchmark;
a method adds its regulariser through a ``penalty`` object (``training.peft.ewc_lora.protocol.ContinualPenalty``:
``combine(nav_loss)``; sequential LoRA, EWC-LoRA, DKIL)
and may mask gradients with ``after_backward(model)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tqdm import tqdm

from agents.vln.processor_vln import VLNProcessor
from training.vln.data import Sample

log = logging.getLogger(__name__)


def make_batch(vproc: VLNProcessor, samples: Sequence[Sample], bundle: Any = None) -> dict[str, Any]:
    """Model inputs with labels on the target action words."""
    from PIL import Image

    return vproc.training_inputs([Image.fromarray(s.image) for s in samples], [s.prompt for s in samples],
                                 [s.target for s in samples], bundle)


def model_inputs(model: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` on the model's device, pixel values in its floating dtype."""
    dev = next(model.parameters()).device
    dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
    inputs = {k: (v.to(dev) if hasattr(v, "to") else v) for k, v in batch.items()}
    if "pixel_values" in inputs:
        inputs["pixel_values"] = inputs["pixel_values"].to(dtype)
    return inputs


def batch_loss(model: Any, batch: dict[str, Any]) -> Any:
    return model(**model_inputs(model, batch)).loss


class Imitation:
    """AdamW on the model's trainable parameters; ``run(samples, steps)`` draws shuffled mini-batches."""

    def __init__(self, model: Any, vproc: VLNProcessor, lr: float = 1e-3, weight_decay: float = 0.0,
                 batch_size: int = 8, seed: int = 0, accelerator: Any = None, grad_clip: float = 1.0) -> None:
        import torch

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not lr > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("the model has no trainable parameters")
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay)
        self.model, self.vproc, self.batch_size, self.grad_clip = model, vproc, batch_size, grad_clip
        self.accelerator = accelerator
        if accelerator is not None:
            self.model, self.optimizer = accelerator.prepare(self.model, self.optimizer)
        self.rng = np.random.default_rng(seed)
        self.step = 0

    def run(self, samples: Sequence[Sample], steps: int, penalty: Any = None,
            after_backward: Callable[[Any], None] | None = None, progress: bool = False, desc: str = "imitation",
            on_step: Callable[[int, float], None] | None = None, cotrain: Sequence[Sample] = (),
            cotrain_fraction: float = 0.0) -> list[float]:
        """``steps`` optimiser steps on ``samples``; returns the loss of each step. With ``cotrain`` (other
        supervised samples, e.g. scene questions), ``cotrain_fraction`` of every batch is drawn from them."""
        import torch

        if not samples:
            raise ValueError("no training samples")
        if not 0.0 <= cotrain_fraction < 1.0 or (cotrain_fraction > 0 and not cotrain):
            raise ValueError(f"cotrain_fraction must be in [0, 1) with co-training samples given, got "
                             f"{cotrain_fraction} with {len(cotrain)} samples")
        n_co = min(round(self.batch_size * cotrain_fraction), len(cotrain))
        self.model.train()
        losses: list[float] = []
        bar = tqdm(range(steps), desc=desc, disable=not progress, leave=False)
        for _ in bar:
            idx = self.rng.choice(len(samples), size=min(self.batch_size - n_co, len(samples)), replace=False)
            batch = [samples[i] for i in idx]
            if n_co:
                batch += [cotrain[i] for i in self.rng.choice(len(cotrain), size=n_co, replace=False)]
            loss = batch_loss(self.model, make_batch(self.vproc, batch))
            total = penalty.combine(loss) if penalty is not None else loss
            self.optimizer.zero_grad(set_to_none=True)
            if self.accelerator is not None:
                self.accelerator.backward(total)
            else:
                total.backward()
            if after_backward is not None:
                after_backward(self.model)
            if self.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
            self.optimizer.step()
            self.step += 1
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
            if on_step is not None:
                on_step(self.step, losses[-1])
        self.model.eval()
        return losses


def eval_loss(model: Any, vproc: VLNProcessor, samples: Sequence[Sample], batch_size: int = 16) -> float:
    """Mean teacher-forced loss over ``samples`` (no gradient)."""
    import torch

    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(samples), batch_size):
            chunk = samples[i:i + batch_size]
            total += float(batch_loss(model, make_batch(vproc, chunk))) * len(chunk)
            n += len(chunk)
    return total / max(n, 1)
