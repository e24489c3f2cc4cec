"""Fused STaMP activation quantizer: sequence transform + per-token mixed-precision quantize in one launch.

Input ``x [..., S, D]`` (tokens, features). The sequence transform ``L`` (orthonormal, along tokens) is either

- ``transform="dwt"``: the multi-level Haar DWT of :func:`quant_kernels.transforms.haar_dwt`, computed in-kernel with
  the same float32 butterflies in the same order, so codes, scales and zero points are **bit-identical** to
  ``reference.stamp_quantize(haar_dwt(x, levels), n_high, ...)`` (``"identity"``: no transform, same kernel); or
- ``"dct"``/``"wht"``/``"dwt2d"`` or an explicit ``[S, S]`` matrix: ``T @ x``
  with an IEEE float32 ``tl.dot``; its summation order differs from torch's matmul, so the transformed values match
  to ~1e-6 relative and the codes are bit-identical to the reference quantizer applied to the kernel's own
  transformed values (``return_transformed=True``), and within one code step of the torch path.

Transformed tokens ``0..n_high-1`` get ``high_bits`` and the rest ``low_bits``, each with per-token min-max qparams
exactly as ``reference.compute_qparams(QuantSpec(bits, symmetric, "per_token"))``.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from quant_kernels.reference import SEQUENCE_TRANSFORMS, QuantSpec, sequence_transform
from quant_kernels.triton._common import check_device, next_pow2, qparams_from_minmax, quantize_values

__all__ = ["stamp_quantize"]

_SQRT2_F32 = float(torch.tensor(math.sqrt(2.0), dtype=torch.float32))  # torch casts the Python scalar the same way


@triton.jit
def _haar_tile(x, r, sqrt2, LEVELS: tl.constexpr, G: tl.constexpr, BLOCK_D: tl.constexpr):
    """Multi-level Haar of the ``G = 2**LEVELS`` rows of ``x`` in lifting layout (level-l details at odd multiples)."""
    t = x
    for lvl in tl.static_range(LEVELS):
        s = 1 << lvl
        idx = (r ^ s)[:, None] + tl.zeros((G, BLOCK_D), dtype=tl.int32)
        partner = tl.gather(t, idx, 0)
        new_even = tl.math.div_rn(t + partner, sqrt2)
        new_odd = tl.math.div_rn(partner - t, sqrt2)
        new = tl.where(((r % (2 * s)) == 0)[:, None], new_even, new_odd)
        t = tl.where(((r % s) == 0)[:, None], new, t)
    return t


@triton.jit
def _stamp_haar_kernel(
    x_ptr, q_ptr, scale_ptr, zero_ptr, y_ptr, S, D, k_hi, qmin_hi, qmax_hi, qmin_lo, qmax_lo, clip, sqrt2,
    SYMMETRIC: tl.constexpr, LEVELS: tl.constexpr, G: tl.constexpr, BLOCK_D: tl.constexpr, STORE_Y: tl.constexpr,
):
    b = tl.program_id(0)
    g = tl.program_id(1)
    r = tl.arange(0, G)
    # lifting-layout row r -> its position in haar_dwt's [a^(L), d^(L), ..., d^(1)] order
    low = r & (-r)
    two = tl.where(r == 0, 1, 2 * low)
    out = tl.where(r == 0, g, S // two + g * (G // two) + r // two)
    cols = tl.arange(0, BLOCK_D)
    base = b.to(tl.int64) * S * D
    in_rows = (g * G + r).to(tl.int64)
    hi_row = out < k_hi
    qmin = tl.where(hi_row, qmin_hi, qmin_lo)
    qmax = tl.where(hi_row, qmax_hi, qmax_lo)
    lo_acc = tl.full((G,), float("inf"), tl.float32)
    hi_acc = tl.full((G,), float("-inf"), tl.float32)
    for d0 in range(0, D, BLOCK_D):
        cm = (d0 + cols) < D
        x = tl.load(x_ptr + base + in_rows[:, None] * D + d0 + cols[None, :], mask=cm[None, :], other=0.0)
        t = _haar_tile(x.to(tl.float32), r, sqrt2, LEVELS, G, BLOCK_D)
        lo_acc = tl.minimum(lo_acc, tl.min(tl.where(cm[None, :], t, float("inf")), axis=1))
        hi_acc = tl.maximum(hi_acc, tl.max(tl.where(cm[None, :], t, float("-inf")), axis=1))
    scale, zero = qparams_from_minmax(lo_acc, hi_acc, clip, qmax, SYMMETRIC)
    tl.store(scale_ptr + b.to(tl.int64) * S + out, scale)
    tl.store(zero_ptr + b.to(tl.int64) * S + out, zero)
    out64 = out.to(tl.int64)
    for d0 in range(0, D, BLOCK_D):
        cm = (d0 + cols) < D
        x = tl.load(x_ptr + base + in_rows[:, None] * D + d0 + cols[None, :], mask=cm[None, :], other=0.0)
        t = _haar_tile(x.to(tl.float32), r, sqrt2, LEVELS, G, BLOCK_D)
        q = quantize_values(t, scale[:, None], zero[:, None], qmin[:, None], qmax[:, None])
        offs = base + out64[:, None] * D + d0 + cols[None, :]
        tl.store(q_ptr + offs, q.to(tl.int32), mask=cm[None, :])
        if STORE_Y:
            tl.store(y_ptr + offs, t, mask=cm[None, :])


@triton.jit
def _stamp_matrix_tile(t_ptr, x_ptr, base, rows, S, D, d0, BLOCK_S: tl.constexpr, BLOCK_K: tl.constexpr,
                       BLOCK_D: tl.constexpr):
    cols = d0 + tl.arange(0, BLOCK_D)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_S, BLOCK_D), dtype=tl.float32)
    for k0 in range(0, S, BLOCK_K):
        kk = k0 + ks
        tm = (rows < S)[:, None] & (kk < S)[None, :]
        a = tl.load(t_ptr + rows.to(tl.int64)[:, None] * S + kk[None, :], mask=tm, other=0.0)
        xm = (kk < S)[:, None] & (cols < D)[None, :]
        xv = tl.load(x_ptr + base + kk.to(tl.int64)[:, None] * D + cols[None, :], mask=xm, other=0.0)
        acc = tl.dot(a, xv.to(tl.float32), acc, input_precision="ieee")
    return acc


@triton.jit
def _stamp_matrix_kernel(
    t_ptr, x_ptr, q_ptr, scale_ptr, zero_ptr, y_ptr, S, D, k_hi, qmin_hi, qmax_hi, qmin_lo, qmax_lo, clip,
    SYMMETRIC: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
    STORE_Y: tl.constexpr,
):
    b = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    rmask = rows < S
    base = b.to(tl.int64) * S * D
    hi_row = rows < k_hi
    qmin = tl.where(hi_row, qmin_hi, qmin_lo)
    qmax = tl.where(hi_row, qmax_hi, qmax_lo)
    lo_acc = tl.full((BLOCK_S,), float("inf"), tl.float32)
    hi_acc = tl.full((BLOCK_S,), float("-inf"), tl.float32)
    dcols = tl.arange(0, BLOCK_D)
    for d0 in range(0, D, BLOCK_D):
        t = _stamp_matrix_tile(t_ptr, x_ptr, base, rows, S, D, d0, BLOCK_S, BLOCK_K, BLOCK_D)
        m = rmask[:, None] & ((d0 + dcols) < D)[None, :]
        lo_acc = tl.minimum(lo_acc, tl.min(tl.where(m, t, float("inf")), axis=1))
        hi_acc = tl.maximum(hi_acc, tl.max(tl.where(m, t, float("-inf")), axis=1))
    scale, zero = qparams_from_minmax(lo_acc, hi_acc, clip, qmax, SYMMETRIC)
    tl.store(scale_ptr + b.to(tl.int64) * S + rows, scale, mask=rmask)
    tl.store(zero_ptr + b.to(tl.int64) * S + rows, zero, mask=rmask)
    for d0 in range(0, D, BLOCK_D):
        t = _stamp_matrix_tile(t_ptr, x_ptr, base, rows, S, D, d0, BLOCK_S, BLOCK_K, BLOCK_D)
        m = rmask[:, None] & ((d0 + dcols) < D)[None, :]
        q = quantize_values(t, scale[:, None], zero[:, None], qmin[:, None], qmax[:, None])
        offs = base + rows.to(tl.int64)[:, None] * D + d0 + dcols[None, :]
        tl.store(q_ptr + offs, q.to(tl.int32), mask=m)
        if STORE_Y:
            tl.store(y_ptr + offs, t, mask=m)


def _check_args(x: torch.Tensor, n_high: int, high_bits: int, low_bits: int, levels: int) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor [..., tokens, features], got {getattr(x, 'dtype', x)}")
    if x.dim() < 2:
        raise ValueError(f"STaMP needs [..., tokens, features], got shape {tuple(x.shape)}")
    for name, bits in (("high_bits", high_bits), ("low_bits", low_bits)):
        if isinstance(bits, bool) or not isinstance(bits, int) or not 2 <= bits <= 16:
            raise ValueError(f"{name} must be an int in 2..16, got {bits}")
    s = int(x.shape[-2])
    if isinstance(n_high, bool) or not isinstance(n_high, int) or not 0 <= n_high <= s:
        raise ValueError(f"stamp k (high-precision tokens) must be in 0..{s} (tokens), got {n_high}")
    if isinstance(levels, bool) or not isinstance(levels, int) or levels < 0:
        raise ValueError(f"levels must be an int >= 0, got {levels}")


def _transform_matrix(kind: str, s: int, levels: int, grid_hw: tuple[int, int] | None) -> torch.Tensor:
    """``[S, S]`` matrix of ``sequence_transform(., kind)`` (columns of the identity, float64 then float32)."""
    return sequence_transform(torch.eye(s, dtype=torch.float64), kind, levels, grid_hw, dim=0).to(torch.float32)


def stamp_quantize(
    x: torch.Tensor,
    n_high: int,
    high_bits: int = 8,
    low_bits: int = 4,
    symmetric: bool = False,
    *,
    transform: str | torch.Tensor = "dwt",
    levels: int = 3,
    grid_hw: tuple[int, int] | None = None,
    return_transformed: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Fused ``reference.stamp_quantize(sequence_transform(x, transform, levels), n_high, ...)``.

    Returns ``(codes int32 [..., S, D], scale [..., S, 1], zero [..., S, 1])`` (float32), plus the float32
    transformed input ``L x`` with ``return_transformed``. ``transform``: ``"dwt"`` (in-kernel Haar, bit-exact;
    ``S`` divisible by ``2**levels``), ``"identity"`` (bit-exact twin of ``reference.stamp_quantize``), another
    :data:`~quant_kernels.transforms.SEQUENCE_TRANSFORMS` name (``"dct"``, ``"wht"``, ``"dwt2d"`` with
    ``grid_hw``) or an explicit ``[S, S]`` orthonormal matrix, both applied as an IEEE float32 ``T @ x`` in-kernel.
    Dequantize with ``reference.stamp_dequantize`` and invert with ``inverse_sequence_transform`` / ``T.T``.
    """
    _check_args(x, n_high, high_bits, low_bits, levels)
    check_device(x)
    lead = x.shape[:-2]
    s, d = int(x.shape[-2]), int(x.shape[-1])
    xc = x.detach().reshape(-1, s, d).contiguous()
    nb = xc.shape[0]
    hi, lo = QuantSpec(high_bits, symmetric), QuantSpec(low_bits, symmetric)
    q = torch.empty((nb, s, d), dtype=torch.int32, device=x.device)
    scale = torch.empty((nb, s), dtype=torch.float32, device=x.device)
    zero = torch.empty((nb, s), dtype=torch.float32, device=x.device)
    y = torch.empty((nb, s, d), dtype=torch.float32, device=x.device) if return_transformed else q
    common = (n_high, float(hi.qmin), float(hi.qmax), float(lo.qmin), float(lo.qmax), 1.0)
    if isinstance(transform, str) and transform in ("dwt", "identity"):
        lv = levels if transform == "dwt" else 0
        if s % (2**lv) != 0:
            raise ValueError(f"sequence length {s} is not divisible by 2**levels = {2**lv}")
        g = 2**lv
        bd = max(16, min(next_pow2(d), max(16, 4096 // g)))
        _stamp_haar_kernel[(nb, s // g)](
            xc, q, scale, zero, y, s, d, *common, _SQRT2_F32, SYMMETRIC=symmetric, LEVELS=lv, G=g,
            BLOCK_D=bd, STORE_Y=return_transformed,
        )
    else:
        if isinstance(transform, str):
            if transform not in SEQUENCE_TRANSFORMS:
                raise ValueError(
                    f"transform must be one of {SEQUENCE_TRANSFORMS} or an [S, S] tensor, got {transform!r}"
                )
            tm = _transform_matrix(transform, s, levels, grid_hw)
        elif isinstance(transform, torch.Tensor) and tuple(transform.shape) == (s, s):
            tm = transform.detach().to(torch.float32)
        else:
            raise ValueError(f"transform must be a name or a [{s}, {s}] tensor (tokens x tokens), got "
                             f"{tuple(getattr(transform, 'shape', ())) or type(transform).__name__}")
        tm = tm.to(x.device).contiguous()
        bs = 64 if s > 32 else (32 if s > 16 else 16)
        bd = max(16, min(next_pow2(d), 128))
        _stamp_matrix_kernel[(nb, triton.cdiv(s, bs))](
            tm, xc, q, scale, zero, y, s, d, *common, SYMMETRIC=symmetric, BLOCK_S=bs, BLOCK_K=bs, BLOCK_D=bd,
            STORE_Y=return_transformed,
        )
    out = (q.reshape(*lead, s, d), scale.reshape(*lead, s, 1), zero.reshape(*lead, s, 1))
    if return_transformed:
        out = out + (y.reshape(*lead, s, d),)
    return out
