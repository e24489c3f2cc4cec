"""EWC-LoRA (the seed method): EWC on the full-size update ``delta W = s B A`` of a shared peft LoRA adapter.

Per task t: train with ``L_t + (lambda / 2) sum F_cum * delta W^2`` (``delta W`` built explicitly from B and A in
``penalty``), then estimate the empirical Fisher of ``delta W``, ``F_t = E[(dL/d delta W)^2]``, accumulate
``F_cum <- gamma F_cum + F_t``, merge ``W <- W + delta W`` and reset B to 0 and A to Kaiming. Because the update is
merged after each task, ``delta W = W - W*_{t-1}`` is exactly the EWC displacement.

The Fisher goes "through the low-rank form" without building ``delta W`` in the forward pass: for an adapted
linear layer ``y = (W + delta W) x``, ``dL/d delta W = sum_tokens (dL/dy)^T x``, read by forward/tensor hooks on
peft's LoRA layers. Modes: ``"batch"`` (the released code: ``(grad of the batch-mean loss)^2 * |b| / N``,
accumulated over batches) and ``"sample"`` (``mean_i (grad of sample i's loss)^2``; assumes the batch loss is
the mean of per-sample losses). Fisher in fp32 whatever the model dtype.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from peft.tuners.lora.layer import Linear as LoraLinear
from torch import nn

from training.peft.ewc_lora.protocol import LossFn, check_model, default_loss_fn

log = logging.getLogger(__name__)

FISHER_MODES = ("batch", "sample")


@dataclass
class EWCLoRAConfig:
    """lambda (code: 1e7), gamma (1.0), Fisher mode and the number of Fisher batches (None = all)."""

    lam: float = 1e7
    gamma: float = 1.0
    fisher_mode: str = "batch"
    max_batches: int | None = None
    merge_after_task: bool = True

    def __post_init__(self) -> None:
        if not math.isfinite(self.lam) or self.lam < 0:
            raise ValueError(f"EWCLoRAConfig.lam must be finite and >= 0, got {self.lam}")
        if not math.isfinite(self.gamma) or self.gamma < 0:
            raise ValueError(f"EWCLoRAConfig.gamma must be finite and >= 0, got {self.gamma}")
        if self.fisher_mode not in FISHER_MODES:
            raise ValueError(f"EWCLoRAConfig.fisher_mode must be one of {FISHER_MODES}, got {self.fisher_mode!r}")
        if self.max_batches is not None and (not isinstance(self.max_batches, int) or self.max_batches < 1):
            raise ValueError(f"EWCLoRAConfig.max_batches must be None or a positive int, got {self.max_batches}")


def lora_layers(model: nn.Module, adapter_name: str = "default") -> dict[str, LoraLinear]:
    """The vanilla peft LoRA ``Linear`` layers holding ``adapter_name`` (custom subclasses such as TuKA excluded)."""
    out = {n: m for n, m in model.named_modules()
           if type(m) is LoraLinear and adapter_name in m.lora_A}
    if not out:
        raise ValueError(f"model has no vanilla peft LoRA Linear layers for adapter {adapter_name!r}")
    for n, m in out.items():
        if m.fan_in_fan_out:
            raise ValueError(f"{n}: fan_in_fan_out LoRA layers are not supported by EWC-LoRA")
    return out


def lora_delta(layer: LoraLinear, adapter_name: str = "default") -> torch.Tensor:
    """``scaling * B A`` (out x in, fp32), differentiable w.r.t. A and B."""
    a = layer.lora_A[adapter_name].weight.float()
    b = layer.lora_B[adapter_name].weight.float()
    return (b @ a) * layer.scaling[adapter_name]


def estimate_delta_fisher(model: nn.Module, layers: Mapping[str, LoraLinear], batches: Iterable[Any],
                          loss_fn: LossFn = default_loss_fn, mode: str = "batch",
                          max_batches: int | None = None, adapter_name: str = "default") -> dict[str, torch.Tensor]:
    """Diagonal empirical Fisher of each layer's full-size update ``delta W`` (out x in, fp32), via hooks."""
    if mode not in FISHER_MODES:
        raise ValueError(f"fisher mode must be one of {FISHER_MODES}, got {mode!r}")
    grads: dict[str, torch.Tensor] = {}
    handles = []

    def make_hook(name: str):
        def fwd_hook(_mod: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> None:
            if not out.requires_grad:
                return
            x = args[0].detach().float()

            def grad_hook(g: torch.Tensor) -> None:
                g = g.detach().float()
                if mode == "batch":
                    contrib = torch.einsum("...o,...i->oi", g, x)
                else:  # per-sample (batch-major); sum over all non-batch, non-feature dims
                    contrib = torch.einsum("bto,bti->boi", g.reshape(g.shape[0], -1, g.shape[-1]),
                                           x.reshape(x.shape[0], -1, x.shape[-1]))
                grads[name] = grads[name] + contrib if name in grads else contrib

            out.register_hook(grad_hook)
        return fwd_hook

    for name, layer in layers.items():
        handles.append(layer.register_forward_hook(make_hook(name)))
    params = [p for layer in layers.values() for p in (layer.lora_A[adapter_name].weight,
                                                       layer.lora_B[adapter_name].weight)]
    fisher = {n: torch.zeros(lay.out_features, lay.in_features) for n, lay in layers.items()}
    was_training = model.training
    model.eval()
    n_samples = 0
    n_batches = 0
    try:
        with torch.enable_grad():
            for batch in batches:
                if max_batches is not None and n_batches >= max_batches:
                    break
                grads.clear()
                loss = loss_fn(model, batch)
                torch.autograd.grad(loss, params, allow_unused=True)
                bsz = None
                for n in layers:
                    if n not in grads:
                        continue
                    g = grads[n].to(fisher[n].device)
                    if mode == "batch":
                        bsz = bsz or _batch_size(batch)
                        fisher[n] += g**2 * bsz
                    else:
                        bsz = g.shape[0]
                        fisher[n] += ((g * bsz) ** 2).sum(0)  # per-sample grad = B * component of the mean loss
                n_samples += bsz or _batch_size(batch)
                n_batches += 1
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    if n_batches == 0:
        raise ValueError("estimate_delta_fisher: no batches")
    return {n: f / n_samples for n, f in fisher.items()}


def _batch_size(batch: Any) -> int:
    if isinstance(batch, Mapping):
        batch = next((v for v in batch.values() if isinstance(v, torch.Tensor)), None)
    elif isinstance(batch, (tuple, list)):
        batch = batch[0]
    if not isinstance(batch, torch.Tensor) or batch.dim() == 0:
        raise ValueError("cannot infer the batch size: the first tensor of the batch must be batch-major")
    return int(batch.shape[0])


class EWCLoRA:
    """EWC-LoRA penalty object (same task interface as ``DKIL``) for a peft LoRA model."""

    def __init__(self, model: nn.Module, config: EWCLoRAConfig | None = None, adapter_name: str = "default") -> None:
        self.model = model
        self.config = config or EWCLoRAConfig()
        self.adapter_name = adapter_name
        self.layers = lora_layers(model, adapter_name)
        self.fisher: dict[str, torch.Tensor] = {}
        self.task: Any = None
        self.tasks_done = 0
        self.last_penalty = 0.0

    def before_task(self, task: Any) -> None:
        self.task = task

    def penalty(self, model: nn.Module | None = None) -> torch.Tensor:
        """``(lambda / 2) sum_layers sum F_cum * delta W^2`` (zero before the first task ends)."""
        check_model(self.model, model, "EWCLoRA")
        total = torch.zeros(())
        for name, layer in self.layers.items():
            f = self.fisher.get(name)
            if f is not None:
                d = lora_delta(layer, self.adapter_name)
                total = total.to(d.device) + (f.to(d.device) * d**2).sum()
        out = 0.5 * self.config.lam * total
        self.last_penalty = float(out.detach())
        return out

    def combine(self, task_loss: torch.Tensor) -> torch.Tensor:
        return task_loss + self.penalty().to(task_loss.dtype)

    def after_task(self, model: nn.Module | None = None, batches: Iterable[Any] | None = None, *,
                   loss_fn: LossFn | None = None, fisher: Mapping[str, torch.Tensor] | None = None) -> None:
        """Estimate ``F_t`` (from ``batches`` or a given ``fisher``), ``F_cum <- gamma F_cum + F_t``, then merge
        ``delta W`` into the base weights and reset the LoRA factors (rebuild the optimiser afterwards)."""
        check_model(self.model, model, "EWCLoRA")
        if fisher is None:
            if batches is None:
                raise ValueError("EWCLoRA.after_task needs Fisher batches (or a precomputed fisher=)")
            fisher = estimate_delta_fisher(self.model, self.layers, batches, loss_fn or default_loss_fn,
                                           self.config.fisher_mode, self.config.max_batches, self.adapter_name)
        for name in self.layers:
            if name not in fisher:
                raise ValueError(f"fisher lacks layer {name}")
            f_new = fisher[name].detach().float()
            old = self.fisher.get(name)
            self.fisher[name] = f_new.clone() if old is None else self.config.gamma * old + f_new
        if self.config.merge_after_task:
            self.merge_and_reset()
        self.tasks_done += 1
        log.info("EWC-LoRA: task %s done (%d so far)", self.task, self.tasks_done)

    @torch.no_grad()
    def merge_and_reset(self) -> None:
        """``W <- W + delta W`` (in fp32, one rounding), then B <- 0 and A <- Kaiming (peft's LoRA init)."""
        for layer in self.layers.values():
            w = layer.get_base_layer().weight
            w.copy_((w.float() + lora_delta(layer, self.adapter_name).to(w.device)).to(w.dtype))
            layer.reset_lora_parameters(self.adapter_name, True)

    def state_dict(self) -> dict[str, Any]:
        return {"fisher": dict(self.fisher), "tasks_done": self.tasks_done}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            fisher = {k: v.float() for k, v in state["fisher"].items()}
            tasks_done = int(state["tasks_done"])
        except (KeyError, AttributeError, TypeError) as exc:
            raise ValueError(f"corrupt EWC-LoRA state: {exc!r}") from exc
        for k, f in fisher.items():
            layer = self.layers.get(k)
            if layer is None or tuple(f.shape) != (layer.out_features, layer.in_features):
                raise ValueError(f"EWC-LoRA state does not match the model at {k}")
        self.fisher, self.tasks_done = fisher, tasks_done
