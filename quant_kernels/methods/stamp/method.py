"""STaMP: ``Y = L^T (Q_mixed(L X R) deq(Q_w(W R))^T) + b``; ``L`` a Haar DWT (1-D / 2-D), DCT or WHT.

The first ``k`` rows of ``L X`` (low frequencies, most energy) are quantized at ``stamp_high_bits`` and the rest
at ``abits``; the weight quantizer is RTN (per channel / group); ``R`` is an optional Hadamard rotation
(``hadamard=True``). The error bound of Theorem 1 is :func:`quant_kernels.reference.stamp_error_bound`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from torch import nn

from quant_kernels.methods.base import METHODS, InputTransform, LayerStats, Method, build_quant_linear, rotation_for
from quant_kernels.qlinear import QuantLinear

if TYPE_CHECKING:
    from quant_kernels.api import QuantConfig

log = logging.getLogger(__name__)


class STaMP(Method):
    """Sequence transform + mixed-precision activations, stacked on RTN weights and optional rotation."""

    name = "stamp"

    def convert(self, linear: nn.Linear, stats: LayerStats, cfg: QuantConfig, tf: InputTransform) -> QuantLinear:
        rot = rotation_for(linear.in_features, cfg) if cfg.hadamard else None
        if stats.n_tokens and stats.min_ndim < 3:
            # inputs without a token axis ([batch, features], e.g. a pooler): nothing to transform along
            log.info("stamp: layer input has no token axis; per-token RTN activations for this layer")
            return build_quant_linear(linear, cfg, tf, self.name, rotation=rot, hessian=stats.hessian)
        stamp = {
            "transform": cfg.stamp_transform,
            "levels": cfg.stamp_levels,
            "k": cfg.stamp_k,
            "high_bits": cfg.stamp_high_bits,
            "grid_hw": cfg.stamp_grid,
            "pad": cfg.stamp_pad,
        }
        return build_quant_linear(linear, cfg, tf, self.name, rotation=rot, stamp=stamp, hessian=stats.hessian)


METHODS.register("stamp")(STaMP())
