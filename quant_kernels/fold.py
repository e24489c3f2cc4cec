"""Fold per-channel input scales and permutations into the op that produces a linear layer's input.

A fold is kept only if the float model's output on a calibration batch is unchanged (with the consumers still
reading the original input through a temporary hook), so producers with other consumers (a residual branch)
or non-commuting ops in between (GELU for scales) fall back to the run-time transform in ``QuantLinear``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from quant_kernels.calibrate import run_model
from quant_kernels.methods.base import InputTransform

log = logging.getLogger(__name__)

__all__ = ["Folder", "resolve_producer"]

MAX_HOPS = 3


def resolve_producer(name: str, producer_of: dict[str, str | None], modules: dict[str, nn.Module]
                     ) -> tuple[str | None, bool]:
    """The parametrised module feeding ``name`` and whether parameter-free modules sit in between."""
    src = producer_of.get(name)
    via = False
    for _ in range(MAX_HOPS):
        if src is None:
            return None, via
        mod = modules[src]
        if any(True for _ in mod.parameters(recurse=False)):
            return src, via
        if any(True for _ in mod.parameters()):  # a container: not an elementwise op
            return None, via
        via = True
        src = producer_of.get(src)
    return None, via


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    if hasattr(out, "to_tuple"):
        return _flat(out.to_tuple())
    return []


def _is_norm(mod: nn.Module) -> bool:
    w = getattr(mod, "weight", None)
    return isinstance(w, nn.Parameter) and w.dim() == 1 and "norm" in type(mod).__name__.lower()


class Folder:
    """Tries folds one group at a time, keeping the model float-equivalent while it works."""

    def __init__(self, model: nn.Module, batch: Any) -> None:
        self.model = model
        self.batch = batch
        self.modules = dict(model.named_modules())
        self.hooks: list[torch.utils.hooks.RemovableHandle] = []
        with torch.no_grad():
            self.ref = [t.detach().clone() for t in _flat(run_model(model, batch))]

    def _equivalent(self) -> bool:
        with torch.no_grad():
            out = _flat(run_model(self.model, self.batch))
        for r, o in zip(self.ref, out, strict=True):
            tol = 1e-4 * float(r.abs().max()) + 1e-6
            if not torch.allclose(r, o, rtol=0.0, atol=tol):
                return False
        return True

    @torch.no_grad()
    def _apply(self, prod: nn.Module, scale: torch.Tensor | None, perm: torch.Tensor | None, invert: bool) -> None:
        """Make ``prod`` output ``(y / scale)[perm]`` (or undo that with ``invert``)."""
        params = [prod.weight] + ([prod.bias] if getattr(prod, "bias", None) is not None else [])
        for p in params:
            if invert:
                if perm is not None:
                    p.data = p.data[torch.argsort(perm)]
                if scale is not None:
                    p.data = p.data * scale.to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))
            else:
                if scale is not None:
                    p.data = p.data / scale.to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))
                if perm is not None:
                    p.data = p.data[perm]

    def _undo_hook(self, scale: torch.Tensor | None, perm: torch.Tensor | None):
        inv = torch.argsort(perm) if perm is not None else None

        def hook(mod: nn.Module, args: tuple) -> tuple:
            x = args[0]
            if inv is not None:
                x = x.index_select(-1, inv.to(x.device))
            if scale is not None:
                x = x * scale.to(x.device, x.dtype)
            return (x, *args[1:])

        return hook

    def try_fold(self, producer: str, via: bool, consumers: list[str], tf: InputTransform) -> InputTransform:
        """Fold ``tf`` into ``producer`` if exact; returns ``tf`` with ``scale_folded`` / ``perm_folded`` set."""
        prod = self.modules[producer]
        is_linear = isinstance(prod, nn.Linear)
        if not (is_linear or (_is_norm(prod) and not via)):
            return tf
        options = [(tf.scale, tf.perm)]
        if tf.scale is not None and tf.perm is not None:
            options.append((None, tf.perm) if is_linear else (tf.scale, None))
        if not is_linear:
            options = [(s, None) for s, _ in options if s is not None][:1]
        for scale, perm in options:
            if scale is None and perm is None:
                continue
            self._apply(prod, scale, perm, invert=False)
            new = [self.modules[c].register_forward_pre_hook(self._undo_hook(scale, perm)) for c in consumers]
            if self._equivalent():
                self.hooks.extend(new)
                log.debug("folded into %s (scale=%s, perm=%s)", producer, scale is not None, perm is not None)
                return InputTransform(tf.scale, tf.perm, scale is not None, perm is not None)
            for h in new:
                h.remove()
            self._apply(prod, scale, perm, invert=True)
        return tf

    def close(self) -> None:
        """Remove the temporary hooks (the consumers are then converted with the folded transform)."""
        for h in self.hooks:
            h.remove()
        self.hooks.clear()
