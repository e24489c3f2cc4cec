"""Integer GEMM ``y = deQ(xq) @ deQ(wq).T (+ SERQ residual) + bias`` with int32 accumulation.

Activations: per-token codes (any bits <= 8, symmetric or asymmetric, or STaMP's per-row mixed bits) stored as
int8 with a per-row offset (asymmetric codes ``q`` become ``q - 2**(b-1)``; the offset goes into an effective zero
point). Weights: symmetric per-channel (per output row) int8 or int4; int4 is packed two per byte like ONNX
``MatMulNBits`` (``reference.pack_int4(q + 8)``: unsigned nibble, low nibble = even k). SERQ residual: a second
symmetric per-channel weight ``R [N, r]`` that multiplies the first ``r`` (most salient, already permuted)
activation channels of the *same* codes, so no re-quantization: ``y = xs * (ws * (Xq Wq^T) + rs * (Xq[:, :r] Rq^T))``.

Integer accumulation is exact (``int_gemm_acc`` equals the torch int64 product); the float epilogue differs from
``reference.dequantize(...) @ reference.dequantize(...).T`` only by float32 rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from quant_kernels.reference import QuantSpec, pack_int4, unpack_int4
from quant_kernels.triton._common import check_device, next_pow2

__all__ = ["GemmTiles", "PackedWeight", "default_tiles", "int_gemm", "int_gemm_acc", "pack_weight"]


@dataclass(frozen=True)
class GemmTiles:
    """Launch shape of the int GEMM: output tile ``block_m x block_n``, K step ``block_k``, warps, pipeline stages.

    Blocks are powers of two; ``block_m``/``block_n`` >= 16 and ``block_k`` >= 32 (int8 ``tl.dot`` needs K >= 32
    on NVIDIA GPUs). ``interleave`` (default): one dot per K step on contiguous tiles, int4 nibbles re-interleaved
    in registers. ``interleave=False``: two dots over the even and odd K halves with strided activation loads
    (4-44x slower on an H200 from 512 tokens up, kept for comparison), which needs ``block_k`` >= 64.
    ``num_stages`` is ignored by the CPU interpreter.
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 128
    num_warps: int = 4
    num_stages: int = 3
    interleave: bool = True

    def __post_init__(self) -> None:
        for name, lo in (("block_m", 16), ("block_n", 16), ("block_k", 32), ("num_warps", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or v < lo or v & (v - 1):
                raise ValueError(f"GemmTiles.{name} must be a power of two >= {lo}, got {v!r}")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"GemmTiles.num_stages must be an int >= 1, got {self.num_stages!r}")
        if not isinstance(self.interleave, bool):
            raise ValueError(f"GemmTiles.interleave must be a bool, got {self.interleave!r}")
        if not self.interleave and self.block_k < 64:
            raise ValueError(f"GemmTiles.block_k must be >= 64 with interleave=False (each half-step dot needs "
                             f"K >= 32), got {self.block_k}")

    @property
    def label(self) -> str:
        """Short name, e.g. ``128x128x128w4s3i`` (``i``: interleave, ``h``: even/odd halves)."""
        return (f"{self.block_m}x{self.block_n}x{self.block_k}w{self.num_warps}s{self.num_stages}"
                f"{'i' if self.interleave else 'h'}")


def default_tiles(m: int, n: int, k: int, packed: bool = False) -> GemmTiles:
    """The tiles :func:`int_gemm` uses when given none.

    The choices from 1024 tokens on come from the H200 sweep in docs/quantization_kernels.md; below that the
    sweep was host-bound and could not rank tilings. Few tokens: a small ``block_m``. Many: 128x128x128 with 4
    warps for int8 weights; int4 (``packed``) weights pay for unpacking in registers and do best with 8 warps,
    and a 256-row tile from 1024 tokens on.
    """
    if m <= 64:
        return GemmTiles(max(16, next_pow2(m)), 64 if n > 32 else 32, 128 if k >= 128 else 64)
    if not packed:
        return GemmTiles(128, 128, 128, num_warps=4, num_stages=3)
    return GemmTiles(256 if m >= 1024 else 128, 128, 128, num_warps=8, num_stages=3)


@dataclass(frozen=True)
class PackedWeight:
    """A symmetric per-channel quantized weight ready for :func:`int_gemm`.

    ``data``: int8 ``[N, K]`` (bits > 4) or packed uint8 ``[N, K/2]`` (bits <= 4); ``scale``: float32 ``[N]``;
    ``colsum``: int32 ``[N]`` (sum of codes per row, for asymmetric activations); ``in_features``: K.
    """

    data: torch.Tensor
    scale: torch.Tensor
    colsum: torch.Tensor
    bits: int
    in_features: int

    @property
    def packed(self) -> bool:
        """True when ``data`` holds two int4 codes per byte."""
        return self.bits <= 4

    @property
    def out_features(self) -> int:
        """N."""
        return int(self.data.shape[0])

    def codes(self) -> torch.Tensor:
        """int32 codes ``[N, K]``."""
        return unpack_int4(self.data) - 8 if self.packed else self.data.to(torch.int32)


def pack_weight(wq: torch.Tensor, w_scale: torch.Tensor, w_spec: QuantSpec) -> PackedWeight:
    """Pack reference codes ``wq [N, K]`` (from ``reference.quantize`` with a symmetric per_channel spec)."""
    if not isinstance(w_spec, QuantSpec):
        raise TypeError(f"w_spec must be a QuantSpec, got {type(w_spec).__name__}")
    if not w_spec.symmetric or w_spec.granularity != "per_channel":
        raise ValueError(f"w_spec must be symmetric per_channel, got symmetric={w_spec.symmetric}, "
                         f"granularity={w_spec.granularity!r}")
    if w_spec.bits > 8:
        raise ValueError(f"weight bits must be <= 8 for the int8 GEMM, got {w_spec.bits}")
    if wq.dim() != 2:
        raise ValueError(f"wq must be [out, in], got shape {tuple(wq.shape)}")
    n, k = wq.shape
    scale = w_scale.detach().float().reshape(-1)
    if scale.numel() != n:
        raise ValueError(f"w_scale must hold one scale per output row ({n}), got shape {tuple(w_scale.shape)}")
    codes = wq.to(torch.int32)
    if w_spec.bits <= 4:
        if k % 2:
            raise ValueError(f"int4 weights need an even in_features, got {k}")
        data = pack_int4(codes + 8)  # unsigned nibble q + 8, low nibble = even k (MatMulNBits layout)
    else:
        data = codes.to(torch.int8).contiguous()
    return PackedWeight(data, scale.contiguous(), codes.sum(dim=1).to(torch.int32).contiguous(), w_spec.bits, int(k))


@triton.jit
def _load_w_tile(w_ptr, offs_n, k0, K, stride_w, PACKED: tl.constexpr, BLOCK_K: tl.constexpr):
    """Weight tile for k in [k0, k0+BLOCK_K): returns (even-k part, odd-k part) as int8 [BLOCK_N, BLOCK_K/2] each."""
    j = tl.arange(0, BLOCK_K // 2)
    nmask = offs_n[:, None] >= 0
    if PACKED:
        m = nmask & ((k0 + 2 * j) < K)[None, :]
        p = tl.load(w_ptr + offs_n.to(tl.int64)[:, None] * stride_w + k0 // 2 + j[None, :], mask=m, other=0x88)
        even = (p & 15).to(tl.int8) - 8
        odd = (p >> 4).to(tl.int8) - 8
    else:
        row = w_ptr + offs_n.to(tl.int64)[:, None] * stride_w
        even = tl.load(row + k0 + 2 * j[None, :], mask=nmask & ((k0 + 2 * j) < K)[None, :], other=0)
        odd = tl.load(row + k0 + 2 * j[None, :] + 1, mask=nmask & ((k0 + 2 * j + 1) < K)[None, :], other=0)
    return even, odd


@triton.jit
def _int_dot(x_ptr, w_ptr, offs_m, offs_n, M, K, stride_x, stride_w, PACKED: tl.constexpr, INTERLEAVE: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """int32 ``X[offs_m, :K] @ W[offs_n, :K]^T`` over K in BLOCK_K steps.

    ``INTERLEAVE``: contiguous K tiles and one dot per step (int4 nibbles re-interleaved in registers); otherwise
    two dots per step over the even and odd K halves.
    """
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    xrow = x_ptr + offs_m.to(tl.int64)[:, None] * stride_x
    mm = (offs_m < M)[:, None]
    if INTERLEAVE:
        kk = tl.arange(0, BLOCK_K)
        j = tl.arange(0, BLOCK_K // 2)
        wrow = w_ptr + offs_n.to(tl.int64)[:, None] * stride_w
        for k0 in range(0, K, BLOCK_K):
            x = tl.load(xrow + k0 + kk[None, :], mask=mm & ((k0 + kk) < K)[None, :], other=0)
            if PACKED:  # K is even for packed weights, so a byte is in range when its even k is
                p = tl.load(wrow + k0 // 2 + j[None, :], mask=((k0 + 2 * j) < K)[None, :], other=0x88)
                w = tl.interleave((p & 15).to(tl.int8) - 8, (p >> 4).to(tl.int8) - 8)
            else:
                w = tl.load(wrow + k0 + kk[None, :], mask=((k0 + kk) < K)[None, :], other=0)
            acc = tl.dot(x, tl.trans(w), acc, out_dtype=tl.int32)
    else:
        j = tl.arange(0, BLOCK_K // 2)
        for k0 in range(0, K, BLOCK_K):
            xe = tl.load(xrow + k0 + 2 * j[None, :], mask=mm & ((k0 + 2 * j) < K)[None, :], other=0)
            xo = tl.load(xrow + k0 + 2 * j[None, :] + 1, mask=mm & ((k0 + 2 * j + 1) < K)[None, :], other=0)
            we, wo = _load_w_tile(w_ptr, offs_n, k0, K, stride_w, PACKED, BLOCK_K)
            acc = tl.dot(xe, tl.trans(we), acc, out_dtype=tl.int32)
            acc = tl.dot(xo, tl.trans(wo), acc, out_dtype=tl.int32)
    return acc


@triton.jit
def _int_gemm_kernel(
    x_ptr, xs_ptr, xz_ptr, w_ptr, ws_ptr, wsum_ptr, r_ptr, rs_ptr, rsum_ptr, bias_ptr, out_ptr, racc_ptr,
    M, N, K, RK, stride_x, stride_w, stride_r, stride_o,
    W_PACKED: tl.constexpr, R_PACKED: tl.constexpr, HAS_RES: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACC_ONLY: tl.constexpr, INTERLEAVE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n_raw = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n_raw < N
    offs_n = tl.where(nmask, offs_n_raw, 0)  # clamp rows so weight loads stay in bounds
    mmask = offs_m < M
    xz = tl.load(xz_ptr + offs_m, mask=mmask, other=0)
    acc = _int_dot(x_ptr, w_ptr, offs_m, offs_n, M, K, stride_x, stride_w, W_PACKED, INTERLEAVE,
                   BLOCK_M, BLOCK_N, BLOCK_K)
    wsum = tl.load(wsum_ptr + offs_n, mask=nmask, other=0)
    acc = acc - xz[:, None] * wsum[None, :]
    omask = mmask[:, None] & nmask[None, :]
    offs_o = offs_m.to(tl.int64)[:, None] * stride_o + offs_n_raw[None, :]
    if HAS_RES:
        racc = _int_dot(x_ptr, r_ptr, offs_m, offs_n, M, RK, stride_x, stride_r, R_PACKED, INTERLEAVE,
                        BLOCK_M, BLOCK_N, BLOCK_K)
        rsum = tl.load(rsum_ptr + offs_n, mask=nmask, other=0)
        racc = racc - xz[:, None] * rsum[None, :]
    if ACC_ONLY:
        tl.store(out_ptr + offs_o, acc, mask=omask)
        if HAS_RES:
            tl.store(racc_ptr + offs_o, racc, mask=omask)
    else:
        xs = tl.load(xs_ptr + offs_m, mask=mmask, other=0.0)
        ws = tl.load(ws_ptr + offs_n, mask=nmask, other=0.0)
        y = acc.to(tl.float32) * ws[None, :]
        if HAS_RES:
            rs = tl.load(rs_ptr + offs_n, mask=nmask, other=0.0)
            y = y + racc.to(tl.float32) * rs[None, :]
        y = y * xs[:, None]
        if HAS_BIAS:
            bias = tl.load(bias_ptr + offs_n, mask=nmask, other=0.0)
            y = y + bias[None, :]
        tl.store(out_ptr + offs_o, y, mask=omask)


def _activation_int8(xq: torch.Tensor, x_zero: torch.Tensor, x_bits: torch.Tensor | int,
                     symmetric: bool, check_codes: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes as int8 plus an int32 effective zero per row: ``xq - zero == x8 - zeff``."""
    m = xq.shape[0]
    z = torch.broadcast_to(x_zero.to(device=xq.device, dtype=torch.float32).reshape(-1, 1), (m, 1))
    if symmetric:
        off = torch.zeros((m, 1), dtype=torch.int32, device=xq.device)
    else:
        bits = torch.as_tensor(x_bits, device=xq.device).to(torch.int32)
        off = torch.broadcast_to(2 ** (bits.reshape(-1, 1) - 1), (m, 1)).to(torch.int32)
    x8 = xq.to(torch.int32) - off
    if check_codes and x8.numel() and (int(x8.min()) < -128 or int(x8.max()) > 127):
        raise ValueError("activation codes do not fit int8 after the offset: use activation bits <= 8")
    return x8.to(torch.int8).contiguous(), (z.round().to(torch.int32) - off).reshape(m).contiguous()


def _launch(xq, x_scale, x_zero, x_spec, weight, residual, bias, acc_only, x_bits, tiles, check_codes):
    if tiles is not None and not isinstance(tiles, GemmTiles):
        raise TypeError(f"tiles must be a GemmTiles or None, got {type(tiles).__name__}")
    if not isinstance(weight, PackedWeight):
        raise TypeError(f"weight must be a PackedWeight (see pack_weight), got {type(weight).__name__}")
    if residual is not None and not isinstance(residual, PackedWeight):
        raise TypeError(f"residual must be a PackedWeight or None, got {type(residual).__name__}")
    if not isinstance(x_spec, QuantSpec) or x_spec.granularity not in ("per_token", "per_tensor"):
        raise ValueError(f"x_spec must be a per_token or per_tensor QuantSpec, got {x_spec!r}")
    if x_spec.bits > 8:
        raise ValueError(f"activation bits must be <= 8 for the int8 GEMM, got {x_spec.bits}")
    top = int(torch.as_tensor(x_bits).max()) if check_codes and x_bits is not None else 0  # waits for the GPU
    if top > 8:
        raise ValueError(f"per-row activation bits (x_bits) must be <= 8 for the int8 GEMM, got up to {top}")
    if xq.dim() < 2 or xq.shape[-1] != weight.in_features:
        raise ValueError(f"xq must be [..., {weight.in_features}], got shape {tuple(xq.shape)}")
    if residual is not None:
        if residual.out_features != weight.out_features or residual.in_features > weight.in_features:
            raise ValueError(f"residual must be [{weight.out_features}, r <= {weight.in_features}], got "
                             f"[{residual.out_features}, {residual.in_features}]")
    check_device(xq, weight.data)
    lead = xq.shape[:-1]
    k = weight.in_features
    x2 = xq.reshape(-1, k)
    m, n = x2.shape[0], weight.out_features
    xs = torch.broadcast_to(x_scale.to(device=xq.device, dtype=torch.float32).reshape(-1, 1), (m, 1))
    x8, zeff = _activation_int8(x2, x_zero.reshape(-1, 1) if x_zero.dim() else x_zero.reshape(1, 1),
                                x_spec.bits if x_bits is None else x_bits, x_spec.symmetric, check_codes)
    xs = xs.reshape(m).contiguous()
    res = residual if residual is not None else weight
    has_bias = bias is not None
    b = bias.detach().float().contiguous() if has_bias else xs
    if has_bias and b.numel() != n:
        raise ValueError(f"bias must have {n} elements, got {b.numel()}")
    out = torch.empty((m, n), dtype=torch.int32 if acc_only else torch.float32, device=xq.device)
    racc = torch.empty((m, n), dtype=torch.int32, device=xq.device) if (acc_only and residual is not None) else out
    t = tiles or default_tiles(m, n, k, weight.packed)
    grid = (triton.cdiv(m, t.block_m), triton.cdiv(n, t.block_n))
    _int_gemm_kernel[grid](
        x8, xs, zeff, weight.data, weight.scale, weight.colsum, res.data, res.scale, res.colsum, b, out, racc,
        m, n, k, res.in_features, x8.stride(0), weight.data.stride(0), res.data.stride(0), out.stride(0),
        W_PACKED=weight.packed, R_PACKED=res.packed, HAS_RES=residual is not None, HAS_BIAS=has_bias,
        ACC_ONLY=acc_only, INTERLEAVE=t.interleave, BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k,
        num_warps=t.num_warps, num_stages=t.num_stages,
    )
    if acc_only:
        return out.reshape(*lead, n), (racc.reshape(*lead, n) if residual is not None else None)
    return out.reshape(*lead, n)


def int_gemm(
    xq: torch.Tensor,
    x_scale: torch.Tensor,
    x_zero: torch.Tensor,
    x_spec: QuantSpec,
    weight: PackedWeight,
    residual: PackedWeight | None = None,
    bias: torch.Tensor | None = None,
    x_bits: torch.Tensor | None = None,
    tiles: GemmTiles | None = None,
    check_codes: bool = True,
) -> torch.Tensor:
    """float32 ``deQ(xq) @ deQ(W).T [+ deQ(xq)[..., :r] @ deQ(R).T] [+ bias]``, shape ``[..., N]``.

    ``xq, x_scale, x_zero`` are exactly what ``reference.compute_qparams``/``quantize`` (or the kernels in
    :mod:`quant_kernels.triton.quant` / :func:`~quant_kernels.triton.stamp.stamp_quantize`) return for ``x_spec``.
    ``x_bits`` (optional, per row) overrides ``x_spec.bits`` for mixed-precision rows such as STaMP's.
    ``tiles`` overrides :func:`default_tiles` (the result is the same for every tiling; only speed differs).
    ``check_codes=False`` skips the range checks of ``xq`` and ``x_bits``, which wait for the GPU: for callers
    whose codes come from this package's quantizers with <= 8 bits.
    """
    return _launch(xq, x_scale, x_zero, x_spec, weight, residual, bias, False, x_bits, tiles, check_codes)


def int_gemm_acc(
    xq: torch.Tensor,
    x_zero: torch.Tensor,
    x_spec: QuantSpec,
    weight: PackedWeight,
    residual: PackedWeight | None = None,
    x_bits: torch.Tensor | None = None,
    tiles: GemmTiles | None = None,
    check_codes: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The exact int32 accumulators ``(xq - x_zero) @ Wq.T`` and, with a residual, ``(xq - x_zero)[:, :r] @ Rq.T``."""
    ones = torch.ones((), dtype=torch.float32, device=xq.device)
    return _launch(xq, ones, x_zero, x_spec, weight, residual, None, True, x_bits, tiles, check_codes)
