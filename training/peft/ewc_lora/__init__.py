"""EWC-LoRA (seed method) and sequential LoRA, with the continual-penalty protocol shared with TuKA's DKIL.

See ``shared/methods/ewc-lora.md``. Public API (stable names):

- ``EWCLoRAConfig(lam=1e7, gamma=1.0, fisher_mode="batch"|"sample", max_batches=None, merge_after_task=True)``
- ``EWCLoRA(peft_lora_model, config)``: ``before_task(task)``, ``penalty() -> Tensor``, ``combine(loss)``,
  ``after_task(model, fisher_batches, loss_fn=None)`` (Fisher of the full-size delta W, accumulate, merge, reset),
  ``state_dict()``/``load_state_dict()``
- ``estimate_delta_fisher(model, layers, batches, loss_fn, mode)``: Fisher of delta W through the LoRA layers' hooks
- ``lora_layers(model)``, ``lora_delta(layer)``
- ``NoPenalty(model)``: sequential LoRA (same interface, zero penalty)
- ``ContinualPenalty`` (protocol), ``default_loss_fn(model, batch) = model(**batch).loss``
"""

from __future__ import annotations

from training.peft.ewc_lora.ewc import (
    EWCLoRA,
    EWCLoRAConfig,
    estimate_delta_fisher,
    lora_delta,
    lora_layers,
)
from training.peft.ewc_lora.protocol import ContinualPenalty, LossFn, NoPenalty, default_loss_fn

__all__ = [
    "ContinualPenalty",
    "EWCLoRA",
    "EWCLoRAConfig",
    "LossFn",
    "NoPenalty",
    "default_loss_fn",
    "estimate_delta_fisher",
    "lora_delta",
    "lora_layers",
]
