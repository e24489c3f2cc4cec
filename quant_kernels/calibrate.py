"""Calibration: per-channel statistics of every target linear's input and which module produced that input."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from quant_kernels.methods.base import LayerStats

log = logging.getLogger(__name__)

__all__ = ["CalibrationResult", "calibrate", "run_model"]


def run_model(model: nn.Module, inp: Any) -> Any:
    """Call ``model`` on one calibration item: a mapping -> ``model(**inp)``, a tuple/list -> ``model(*inp)``."""
    if isinstance(inp, Mapping):
        return model(**inp)
    if isinstance(inp, (tuple, list)):
        return model(*inp)
    return model(inp)


@dataclass
class CalibrationResult:
    """Statistics per target name and, per module name, the name of the module whose output it consumed."""

    stats: dict[str, LayerStats]
    producer_of: dict[str, str | None] = field(default_factory=dict)


class _Acc:
    def __init__(self, n: int, hessian: bool = False) -> None:
        self.hessian = torch.zeros(n, n, dtype=torch.float64) if hessian else None
        self.amax = torch.zeros(n)
        self.abssum = torch.zeros(n, dtype=torch.float64)
        self.tokens = 0
        self.min_tokens = 10**12
        self.min_ndim = 10**6


@torch.no_grad()
def calibrate(model: nn.Module, targets: dict[str, nn.Linear], calib_inputs: Iterable[Any],
              hessian: bool = False) -> CalibrationResult:
    """Run ``calib_inputs`` through ``model`` (eval mode) recording input statistics of ``targets`` (and, with
    ``hessian``, each input's ``X^T X`` in float64 for GPTQ).

    Producers are found by tensor identity: a module's input "comes from" the innermost module that returned that
    exact tensor during the same forward; inconsistent answers across batches give ``None``.
    """
    accs = {name: _Acc(m.in_features, hessian) for name, m in targets.items()}
    produced: dict[int, tuple[str, torch.Tensor]] = {}
    seen: dict[str, set[str | None]] = {}
    handles = []

    def pre_hook(name: str):
        def hook(mod: nn.Module, args: tuple) -> None:
            x = args[0] if args else None
            if not isinstance(x, torch.Tensor):
                return
            src = produced.get(id(x))
            seen.setdefault(name, set()).add(src[0] if src is not None and src[1] is x else None)
            if name in accs:
                a = accs[name]
                xf = x.detach().float().reshape(-1, x.shape[-1])
                a.amax = torch.maximum(a.amax, xf.abs().amax(0).cpu())
                a.abssum += xf.abs().sum(0).double().cpu()
                if a.hessian is not None:
                    xd = xf.double().cpu()
                    a.hessian += xd.T @ xd
                a.tokens += xf.shape[0]
                a.min_tokens = min(a.min_tokens, x.shape[-2] if x.dim() >= 2 else 1)
                a.min_ndim = min(a.min_ndim, x.dim())

        return hook

    def fwd_hook(name: str):
        def hook(mod: nn.Module, args: tuple, out: Any) -> None:
            if isinstance(out, torch.Tensor) and id(out) not in produced:  # innermost module wins
                produced[id(out)] = (name, out)

        return hook

    for name, mod in model.named_modules():
        if name == "":
            continue
        handles.append(mod.register_forward_pre_hook(pre_hook(name)))
        handles.append(mod.register_forward_hook(fwd_hook(name)))
    was_training = model.training
    model.eval()
    n_batches = 0
    try:
        for inp in calib_inputs:
            produced.clear()
            run_model(model, inp)
            n_batches += 1
    finally:
        for h in handles:
            h.remove()
        produced.clear()
        model.train(was_training)
    if n_batches == 0:
        raise ValueError("calib_inputs is empty: quantize_ needs at least one calibration batch")
    missing = [n for n, a in accs.items() if a.tokens == 0]
    if missing:
        raise ValueError(f"calibration never reached these target layers: {missing[:5]}")
    stats = {
        n: LayerStats(a.amax, (a.abssum / a.tokens).float(), a.tokens, a.min_tokens, a.min_ndim, a.hessian)
        for n, a in accs.items()
    }
    producer_of = {n: next(iter(s)) if len(s) == 1 else None for n, s in seen.items()}
    log.info("calibrated %d layers on %d batches", len(stats), n_batches)
    return CalibrationResult(stats, producer_of)
