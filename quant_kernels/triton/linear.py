"""Run a :class:`~quant_kernels.qlinear.QuantLinear` (any method's output) through the Triton kernels.

``qlinear_forward(layer, x)`` follows ``QuantLinear.forward`` step by step, replacing the activation fake-quant +
float matmul by: per-token quantize (or fused STaMP transform + mixed-precision quantize) -> int GEMM (int4/int8
weights, int32 accumulation, SERQ residual on the same codes) -> inverse sequence transform -> bias. The
activation codes are bit-identical to the layer's own quantizer, so the outputs differ from ``layer(x)`` only by
float32 summation order. Supported: symmetric per-channel weights and per-token activations with bits <= 8
(W16/A16, per-group quantizers and the L2QER two-factor path raise ValueError naming the field).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from quant_kernels.qlinear import FLOAT_BITS, QuantLinear
from quant_kernels.reference import inverse_sequence_transform, pad_tokens
from quant_kernels.triton.gemm import PackedWeight, int_gemm, pack_weight
from quant_kernels.triton.quant import quantize_dynamic
from quant_kernels.triton.stamp import stamp_quantize

__all__ = ["PackedLayer", "check_layer", "pack_layer", "qlinear_forward"]


@dataclass(frozen=True)
class PackedLayer:
    """The GEMM operands of one ``QuantLinear`` (pack once, reuse every forward)."""

    weight: PackedWeight
    residual: PackedWeight | None


def check_layer(layer: QuantLinear) -> None:
    """``ValueError``/``TypeError`` naming the setting when the int GEMM cannot run ``layer`` (host-side only)."""
    if not isinstance(layer, QuantLinear):
        raise TypeError(f"layer must be a QuantLinear, got {type(layer).__name__}")
    m = layer.meta
    if layer.wspec is None or m.wbits > 8:
        raise ValueError(f"wbits must be <= 8 for the int GEMM, got {m.wbits}")
    if layer.aspec is None or m.abits > 8:
        raise ValueError(f"abits must be <= 8 for the int GEMM, got {m.abits}")
    if m.w_group_size is not None or not m.w_symmetric:
        raise ValueError(f"the Triton GEMM needs symmetric per-channel weights (w_group_size=None, w_symmetric=True), "
                         f"got w_group_size={m.w_group_size}, w_symmetric={m.w_symmetric}")
    if m.a_group_size is not None:
        raise ValueError(f"the Triton path quantizes activations per token (a_group_size=None), got {m.a_group_size}")
    if m.lowrank_rank:
        raise ValueError("the two-factor low-rank (L2QER) path is not implemented in Triton (lowrank_rank > 0)")
    if layer.stamp is not None and layer.stamp.high_bits > 8:
        raise ValueError(f"stamp high_bits must be <= 8 for the int GEMM, got {layer.stamp.high_bits}")


def pack_layer(layer: QuantLinear) -> PackedLayer:
    """Pack ``layer``'s integer weight (and SERQ residual) codes for :func:`~quant_kernels.triton.gemm.int_gemm`."""
    check_layer(layer)
    m = layer.meta
    w = pack_weight(layer.qweight.to(torch.int32), layer.w_scale.reshape(-1), layer.wspec)
    res = None
    if m.res_rank:
        res = pack_weight(layer.res_qweight.to(torch.int32), layer.res_scale.reshape(-1), layer.res_spec)
    return PackedLayer(w, res)


@torch.no_grad()
def qlinear_forward(layer: QuantLinear, x: torch.Tensor, packed: PackedLayer | None = None) -> torch.Tensor:
    """``layer(x)`` computed with the Triton kernels (see the module docstring); returns ``x.dtype``."""
    if packed is not None:  # the kernels below skip the code checks that wait for the GPU: check the layer's bits
        check_layer(layer)
    p = packed if packed is not None else pack_layer(layer)
    in_dtype = x.dtype
    x = layer.prepare_input(x)
    aspec = layer.aspec
    assert aspec is not None
    st = layer.stamp
    if st is None:
        xq, xs, xz = quantize_dynamic(x, aspec)
        y = int_gemm(xq, xs, xz, aspec, p.weight, p.residual, check_codes=False)  # check_layer: bits <= 8
    else:
        x, n_tokens = pad_tokens(x, st.transform, st.levels, st.pad)
        n = x.shape[-2]
        if st.k > n:
            raise ValueError(f"stamp_k={st.k} exceeds the number of tokens ({n})")
        high = min(st.high_bits, FLOAT_BITS)
        q, s, z = stamp_quantize(x, st.k, high, aspec.bits, aspec.symmetric, transform=st.transform,
                                 levels=st.levels, grid_hw=st.grid_hw)
        bits = torch.full((n,), aspec.bits, dtype=torch.int32, device=x.device)
        bits[: st.k] = high
        bits = bits.expand(*x.shape[:-2], n).reshape(-1)
        y = int_gemm(q, s, z, aspec, p.weight, p.residual, x_bits=bits, check_codes=False)
        y = inverse_sequence_transform(y, st.transform, st.levels, st.grid_hw)[..., :n_tokens, :]
    if layer.bias is not None:
        y = y + layer.bias
    return y.to(in_dtype)

