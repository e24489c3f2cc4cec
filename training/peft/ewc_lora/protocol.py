"""The continual-learning penalty protocol shared by sequential LoRA, EWC-LoRA and TuKA's DKIL.

A trainer drives any of them the same way::

    pen.before_task(task)                  # e.g. (scene, env); sets routes / masks where relevant
    loss = pen.combine(nav_loss)           # nav_loss weighted + pen.penalty()
    ...
    pen.after_task(model, batches)         # Fisher, anchors, merges
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

LossFn = Callable[[nn.Module, Any], torch.Tensor]
"""``loss_fn(model, batch) -> scalar loss`` used for Fisher estimation."""


def default_loss_fn(model: nn.Module, batch: Any) -> torch.Tensor:
    """``model(**batch).loss`` for a mapping batch (HF models with ``labels``)."""
    if not isinstance(batch, Mapping):
        raise TypeError(f"default_loss_fn needs a mapping batch (with labels); got {type(batch).__name__}: "
                        "pass loss_fn=")
    out = model(**batch)
    loss = getattr(out, "loss", None)
    if loss is None:
        raise ValueError("model output has no .loss: include labels in the batch or pass loss_fn=")
    return loss


@runtime_checkable
class ContinualPenalty(Protocol):
    """What a lifelong trainer calls around each task."""

    def before_task(self, task: Any) -> None: ...

    def penalty(self, model: nn.Module | None = None) -> torch.Tensor: ...

    def combine(self, task_loss: torch.Tensor) -> torch.Tensor: ...

    def after_task(self, model: nn.Module | None = None, batches: Iterable[Any] | None = None, *,
                   loss_fn: LossFn | None = None) -> None: ...


class NoPenalty:
    """Sequential LoRA: keep training the same adapter, no regulariser (the forgetting baseline)."""

    def __init__(self, model: nn.Module | None = None) -> None:
        self.model = model
        self.task: Any = None
        self.tasks_done = 0

    def before_task(self, task: Any) -> None:
        self.task = task

    def penalty(self, model: nn.Module | None = None) -> torch.Tensor:
        return torch.zeros(())

    def combine(self, task_loss: torch.Tensor) -> torch.Tensor:
        return task_loss

    def after_task(self, model: nn.Module | None = None, batches: Iterable[Any] | None = None, *,
                   loss_fn: LossFn | None = None) -> None:
        self.tasks_done += 1

    def state_dict(self) -> dict[str, Any]:
        return {"tasks_done": self.tasks_done}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.tasks_done = int(state["tasks_done"])


def check_model(bound: nn.Module, given: nn.Module | None, who: str) -> None:
    """Methods bind one model at construction; passing another one later is a bug."""
    if given is not None and given is not bound:
        raise ValueError(f"{who} was built for a different model than the one passed")
