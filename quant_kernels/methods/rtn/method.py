"""RTN baseline: the reference quantizers applied directly, optionally after a Hadamard rotation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from quant_kernels.methods.base import METHODS, InputTransform, LayerStats, Method, build_quant_linear, rotation_for
from quant_kernels.qlinear import QuantLinear

if TYPE_CHECKING:
    from quant_kernels.api import QuantConfig


class RTN(Method):
    """Round-to-nearest: ``W`` per output channel (or group), ``x`` per token (or group)."""

    name = "rtn"

    def convert(self, linear: nn.Linear, stats: LayerStats, cfg: QuantConfig, tf: InputTransform) -> QuantLinear:
        rot = rotation_for(linear.in_features, cfg) if cfg.hadamard else None
        return build_quant_linear(linear, cfg, tf, self.name, rotation=rot, hessian=stats.hessian)


METHODS.register("rtn")(RTN())
