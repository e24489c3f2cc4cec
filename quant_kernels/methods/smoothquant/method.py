"""SmoothQuant: ``s_j = amax_x_j^alpha / amax_w_j^(1-alpha)``, ``x / s`` folded into the previous op, ``W * s``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from quant_kernels import reference as ref
from quant_kernels.methods.base import METHODS, InputTransform, LayerStats, Method, build_quant_linear, rotation_for
from quant_kernels.qlinear import QuantLinear

if TYPE_CHECKING:
    from quant_kernels.api import QuantConfig


class SmoothQuant(Method):
    """Per-channel smoothing shared by the layers reading one input, then RTN."""

    name = "smoothquant"
    wants_input_transform = True

    def input_transform(self, weights: list[torch.Tensor], stats: LayerStats, cfg: QuantConfig) -> InputTransform:
        w_amax = torch.stack([w.detach().abs().amax(0).float() for w in weights]).amax(0)
        return InputTransform(scale=ref.smoothquant_scales(stats.amax, w_amax, cfg.smoothquant_alpha))

    def convert(self, linear: nn.Linear, stats: LayerStats, cfg: QuantConfig, tf: InputTransform) -> QuantLinear:
        rot = rotation_for(linear.in_features, cfg) if cfg.hadamard else None
        return build_quant_linear(linear, cfg, tf, self.name, rotation=rot, hessian=stats.hessian)


METHODS.register("smoothquant")(SmoothQuant())
