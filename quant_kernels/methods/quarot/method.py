"""QuaRot-style baseline: ``x @ R`` at run time and ``W @ R`` offline, then RTN on both (spreads outliers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from quant_kernels.methods.base import METHODS, InputTransform, LayerStats, Method, build_quant_linear, rotation_for
from quant_kernels.qlinear import QuantLinear

if TYPE_CHECKING:
    from quant_kernels.api import QuantConfig


class QuaRot(Method):
    """Random block-Hadamard feature rotation (orthonormal, so ``x W^T = (x R)(W R)^T``) + RTN."""

    name = "quarot"

    def convert(self, linear: nn.Linear, stats: LayerStats, cfg: QuantConfig, tf: InputTransform) -> QuantLinear:
        rotation = rotation_for(linear.in_features, cfg)
        return build_quant_linear(linear, cfg, tf, self.name, rotation=rotation, hessian=stats.hessian)


METHODS.register("quarot")(QuaRot())
