"""SERQ (code form): ``X~ = X / s`` with ``s_j = max|X_j|^alpha`` (flattening), channels sorted by ``s``
(descending), ``R = Q(W~[:, :r])``, ``W_main = W~`` with its first ``r`` columns replaced by ``W~[:, :r] - deq(R)``.

Forward: ``xq = Q_a(X~[:, order])``, ``Y = xq deq(Q(W_main))^T + xq[:, :r] deq(R)^T``: the residual GEMM reuses the
already quantized activations (no intermediate re-quantization). ``1/s`` and the permutation are folded into
the previous op when the calibration check shows it is exact, otherwise applied at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from quant_kernels import reference as ref
from quant_kernels.methods.base import (
    METHODS,
    InputTransform,
    LayerStats,
    Method,
    build_quant_linear,
    default_serq_rank,
    transformed_weight,
)
from quant_kernels.qlinear import QuantLinear

if TYPE_CHECKING:
    from quant_kernels.api import QuantConfig


def serq_rank(in_features: int, cfg: QuantConfig) -> int:
    """The salient rank ``r`` of a layer: ``cfg.serq_rank`` (capped at ``in_features``) or the scaled default."""
    return min(in_features, cfg.serq_rank) if cfg.serq_rank else default_serq_rank(in_features)


class SERQ(Method):
    """Saliency-aware low-rank error reconstruction with a single residual matrix."""

    name = "serq"
    wants_input_transform = True

    def input_transform(self, weights: list[torch.Tensor], stats: LayerStats, cfg: QuantConfig) -> InputTransform:
        scale = ref.smoothquant_scales(stats.amax, None, cfg.serq_alpha)
        order = torch.argsort(scale, descending=True, stable=True)
        return InputTransform(scale=scale, perm=order)

    def convert(self, linear: nn.Linear, stats: LayerStats, cfg: QuantConfig, tf: InputTransform) -> QuantLinear:
        r = serq_rank(linear.in_features, cfg)
        w = transformed_weight(linear.weight, tf)  # flattened and sorted: salient columns first
        q = build_quant_linear(linear, cfg, tf, self.name, res_rank=r, hessian=stats.hessian, quantize_weight=False)
        q.set_residual(w[:, :r])
        main = w.clone()
        main[:, :r] = w[:, :r] - q.dequantized_residual()
        q.set_weight(main)
        return q


METHODS.register("serq")(SERQ())
