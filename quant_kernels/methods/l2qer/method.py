"""L2QER-style two-factor baseline: ``Y = xq deq(Q(W))^T + Q_a(xq B^T) A^T``.

``E = W - deq(Q(W))`` is approximated activation-aware: ``E diag(s) = U S V^T`` with ``s_j = mean|x_j|``, ``A = U_k
S_k`` and ``B = V_k^T diag(s)^-1``, both stored 8-bit (fake-quantized per row). The intermediate ``xq B^T`` is
re-quantized to the activation bits, the step SERQ avoids. The default rank matches SERQ's parameter budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from quant_kernels import reference as ref
from quant_kernels.methods.base import METHODS, InputTransform, LayerStats, Method, build_quant_linear
from quant_kernels.methods.serq.method import serq_rank
from quant_kernels.qlinear import QuantLinear

if TYPE_CHECKING:
    from quant_kernels.api import QuantConfig

FACTOR_SPEC = ref.QuantSpec(8, True, "per_channel")


def lowrank_rank(linear: nn.Linear, cfg: QuantConfig) -> int:
    """``cfg.lowrank_rank`` or the rank with the same parameter count as SERQ's ``out x r`` residual."""
    if cfg.lowrank_rank:
        return min(cfg.lowrank_rank, linear.in_features, linear.out_features)
    o, i = linear.out_features, linear.in_features
    return max(1, round(serq_rank(i, cfg) * o / (o + i)))


class L2QER(Method):
    """Low-rank (two-factor) quantization error reconstruction, activation-scaled."""

    name = "l2qer"

    def convert(self, linear: nn.Linear, stats: LayerStats, cfg: QuantConfig, tf: InputTransform) -> QuantLinear:
        k = lowrank_rank(linear, cfg)
        q = build_quant_linear(linear, cfg, tf, self.name, lowrank_rank=k, hessian=stats.hessian)
        err = linear.weight.detach().float() - q.dequantized_weight()
        s = stats.absmean.float().clamp_min(1e-6)
        u, sv, vh = torch.linalg.svd((err * s).double(), full_matrices=False)
        a = (u[:, :k] * sv[:k]).float()
        b = (vh[:k] / s.double()).float()
        q.lr_a.copy_(ref.fake_quant(a.T.contiguous(), FACTOR_SPEC).T)
        q.lr_b.copy_(ref.fake_quant(b, FACTOR_SPEC))
        return q


METHODS.register("l2qer")(L2QER())
