"""Shared ``@triton.jit`` helpers: the reference's rounding (half-to-even) and qparam formulas, bit for bit.

Every float op here mirrors one float32 op of :mod:`quant_kernels.reference` (IEEE division via ``div_rn``;
plain ``/`` in Triton lowers to an approximate division on NVIDIA GPUs), so codes and scales match exactly.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SCALE_EPS_F32 = 1e-12  # reference.SCALE_EPS; the kernels compare in float32, as torch's clamp_min does


@triton.jit
def round_half_even(x):
    """``torch.round`` (round half to even) in float32, exact for every finite input."""
    r = tl.floor(x)
    f = x - r
    half = r * 0.5
    r_odd = (half - tl.floor(half)) != 0.0
    up = (f > 0.5) | ((f == 0.5) & r_odd)
    return tl.where(up, r + 1.0, r)


@triton.jit
def qparams_from_minmax(lo, hi, clip, qmax, SYMMETRIC: tl.constexpr):
    """``reference.compute_qparams`` from per-row ``lo``/``hi`` (float32 tensors, same shape): ``(scale, zero)``."""
    lo = lo * clip
    hi = hi * clip
    if SYMMETRIC:
        scale = tl.maximum(tl.math.div_rn(tl.maximum(hi, -lo), qmax), 1e-12)
        zero = tl.zeros_like(scale)
    else:
        lo = tl.minimum(lo, 0.0)
        hi = tl.maximum(hi, 0.0)
        scale = tl.maximum(tl.math.div_rn(hi - lo, qmax), 1e-12)
        zero = round_half_even(tl.math.div_rn(0.0 - lo, scale))
        zero = tl.minimum(tl.maximum(zero, 0.0), qmax)
    return scale, zero


@triton.jit
def quantize_values(x, scale, zero, qmin, qmax):
    """``clamp(round(x / scale) + zero, qmin, qmax)`` in float32 (integer-valued)."""
    q = round_half_even(tl.math.div_rn(x, scale)) + zero
    return tl.minimum(tl.maximum(q, qmin), qmax)


def next_pow2(n: int) -> int:
    """Smallest power of two >= ``n`` (>= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def check_device(*tensors: torch.Tensor) -> None:
    """Kernels launch on CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1``; say which when neither."""
    import os

    for t in tensors:
        if t.device.type == "cuda":
            continue
        if t.device.type == "cpu" and os.environ.get("TRITON_INTERPRET", "0") == "1":
            continue
        raise ValueError(
            f"tensor on {t.device} cannot run a Triton kernel: use a CUDA tensor, or set TRITON_INTERPRET=1 "
            "before importing the kernels to run them on CPU"
        )
