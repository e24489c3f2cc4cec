"""Torch custom ops that stand for quantized weight matmuls while exporting; the ONNX exporter maps them to
``DequantizeLinear`` (QDQ) or ``com.microsoft::MatMulNBits``. Their eager bodies compute the same thing, so an
exported ``QuantLinear`` equals its reference forward."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from quant_kernels import reference as ref

if TYPE_CHECKING:
    from quant_kernels.qlinear import QuantLinear

__all__ = ["attach_export_buffers", "detach_export_buffers", "export_matmul", "nbits_layout"]


@torch.library.custom_op("quant_kernels::dq_weight", mutates_args=())
def dq_weight(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, block: int) -> torch.Tensor:
    """``(codes - zero) * scale``: per row (``block == 0``, 1-D scale) or per ``block`` columns (2-D scale)."""
    if block == 0:
        return (codes.float() - zero.float().unsqueeze(1)) * scale.unsqueeze(1)
    s = scale.repeat_interleave(block, dim=1)
    z = zero.float().repeat_interleave(block, dim=1)
    return (codes.float() - z) * s


@dq_weight.register_fake
def _(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, block: int) -> torch.Tensor:
    return torch.empty(codes.shape, dtype=torch.float32, device=codes.device)


@torch.library.custom_op("quant_kernels::matmul_nbits", mutates_args=())
def matmul_nbits(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, k: int, n: int,
                 block: int) -> torch.Tensor:
    """``x @ deq(B)`` for the MatMulNBits layout (4-bit, unsigned codes, packed zero points)."""
    nb = packed.shape[1]
    codes = ref.unpack_int4(packed).reshape(n, nb * block)[:, :k].float()
    zp = ref.unpack_int4(zeros.reshape(n, -1))[:, :nb].float()
    w = (codes - zp.repeat_interleave(block, 1)[:, :k]) * scales.reshape(n, nb).repeat_interleave(block, 1)[:, :k]
    return x @ w.T


@matmul_nbits.register_fake
def _(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, k: int, n: int,
      block: int) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], n)


def nbits_layout(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, spec: ref.QuantSpec,
                 block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MatMulNBits inputs ``(B uint8 [N, nb, block/2], scales [N*nb], zero_points uint8 [N*ceil(nb/2)])``.

    Symmetric codes ``q in [-7, 7]`` become ``q + 8`` with zero point 8; per-channel scales repeat per block;
    K is padded to a whole block with the zero point (contributes 0).
    """
    if spec.bits > 4:
        raise ValueError(f"MatMulNBits export supports wbits <= 4, got {spec.bits} (use mode='qdq')")
    if block < 16 or block & (block - 1):
        raise ValueError(f"MatMulNBits block_size must be a power of two >= 16, got {block}")
    n, k = codes.shape
    if spec.granularity == "per_group":
        if spec.group_size != block:
            raise ValueError(f"weights use group_size={spec.group_size}; export with block_size={spec.group_size}")
    nb = -(-k // block)
    offset = 0 if not spec.symmetric else 8
    u = codes.to(torch.int32) + offset
    zp = (zero.reshape(n, -1).to(torch.int32) + offset)
    sc = scale.reshape(n, -1).float()
    if spec.granularity != "per_group":
        zp, sc = zp.expand(n, nb), sc.expand(n, nb)
    pad = nb * block - k
    if pad:
        u = torch.cat((u, zp[:, -1:].expand(n, pad)), dim=1)
    packed = ref.pack_int4(u).reshape(n, nb, block // 2)
    zpp = torch.cat((zp, zp.new_zeros(n, nb % 2)), dim=1) if nb % 2 else zp
    return packed, sc.contiguous().reshape(-1), ref.pack_int4(zpp).reshape(-1)


def _layer_tensors(q: QuantLinear, which: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, ref.QuantSpec]:
    if which == "main":
        assert q.wspec is not None
        return q.qweight, q.w_scale, q.w_zero, q.wspec
    return q.res_qweight, q.res_scale, q.res_zero, q.res_spec


def attach_export_buffers(q: QuantLinear, mode: str, block: int) -> None:
    """Register the ONNX-layout buffers (``onnx_<which>_*``) on ``q`` and set ``q.export_mode``."""
    if q.wspec is None:
        q.export_mode = None
        return
    for which in ("main", "res") if q.meta.res_rank else ("main",):
        codes, scale, zero, spec = _layer_tensors(q, which)
        if mode == "qdq":
            gs = spec.group_size if spec.granularity == "per_group" else 0
            sc = scale.reshape(-1) if gs == 0 else scale
            zp = zero.reshape(-1) if gs == 0 else zero
            q.register_buffer(f"onnx_{which}_codes", codes.clone())
            q.register_buffer(f"onnx_{which}_scale", sc.float().clone())
            q.register_buffer(f"onnx_{which}_zero", zp.to(codes.dtype).clone())
            setattr(q, f"_onnx_{which}_block", gs)
        else:
            packed, sc, zp = nbits_layout(codes, scale, zero, spec, block)
            q.register_buffer(f"onnx_{which}_codes", packed)
            q.register_buffer(f"onnx_{which}_scale", sc)
            q.register_buffer(f"onnx_{which}_zero", zp)
            setattr(q, f"_onnx_{which}_block", block)
    q.export_mode = mode


def detach_export_buffers(q: QuantLinear) -> None:
    """Undo :func:`attach_export_buffers`."""
    for which in ("main", "res"):
        for part in ("codes", "scale", "zero"):
            name = f"onnx_{which}_{part}"
            if name in q._buffers:
                del q._buffers[name]
    q.export_mode = None


def export_matmul(q: QuantLinear, x: torch.Tensor, which: str) -> torch.Tensor:
    """The weight matmul of ``q`` through the export custom op of ``q.export_mode``."""
    codes = getattr(q, f"onnx_{which}_codes")
    scale = getattr(q, f"onnx_{which}_scale")
    zero = getattr(q, f"onnx_{which}_zero")
    block = getattr(q, f"_onnx_{which}_block")
    if q.export_mode == "qdq":
        return x @ dq_weight(codes, scale, zero, block).T
    n = codes.shape[0]
    k = q.in_features if which == "main" else q.meta.res_rank
    return matmul_nbits(x, codes, scale, zero, k, n, block)
