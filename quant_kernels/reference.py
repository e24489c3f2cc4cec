"""The one place the quantization math is written: specs, qparams, quantize/dequantize, fake quant, SQNR.

Kernels (Triton, ONNX) must match this module bit-exactly on quantize/dequantize. Conventions:

- Statistics, scales and zero points are float32; ``quantize`` computes ``round(x / scale) + zero`` in float32
  (true division, round-half-to-even) and clamps to ``[qmin, qmax]``; it returns ``int32``.
- Symmetric: ``scale = max(clip * amax / qmax, SCALE_EPS)``, ``zero = 0``, ``q in [-(2^(b-1)-1), 2^(b-1)-1]``.
- Asymmetric: the range is widened to contain 0 (``lo = min(clip * min, 0)``, ``hi = max(clip * max, 0)``),
  ``scale = max((hi - lo) / (2^b - 1), SCALE_EPS)``, ``zero = clamp(round(-lo / scale), 0, 2^b - 1)``,
  ``q in [0, 2^b - 1]``. Containing 0 keeps the zero point a valid uint (ONNX QDQ) and constant rows exact;
  for rows that span 0 it equals the STaMP min-max formula.
- Scale shapes (broadcast rules): per_token / per_channel reduce over the last dim -> ``x.shape[:-1] + (1,)``
  (per_token: one scale per token of ``[..., tokens, features]``; per_channel: one per output row of a weight
  ``[out, in]``); per_group -> ``x.shape[:-1] + (n_groups,)`` with groups of ``group_size`` along the last dim;
  per_tensor -> shape ``()``.

The orthonormal transforms live in :mod:`quant_kernels.transforms` and are re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from quant_kernels.transforms import (
    dct,
    dct_matrix,
    haar_dwt,
    haar_dwt2d,
    haar_idwt,
    haar_idwt2d,
    haar_matrix,
    hadamard_matrix,
    idct,
    random_hadamard_matrix,
    walsh_hadamard,
)

__all__ = [
    "GRANULARITIES",
    "SCALE_EPS",
    "QuantSpec",
    "compute_qparams",
    "dct",
    "dct_matrix",
    "dequantize",
    "fake_quant",
    "haar_dwt",
    "haar_dwt2d",
    "haar_idwt",
    "haar_idwt2d",
    "haar_matrix",
    "hadamard_matrix",
    "idct",
    "quant_error_sqnr",
    "quantize",
    "random_hadamard_matrix",
    "walsh_hadamard",
]

GRANULARITIES = ("per_token", "per_channel", "per_group", "per_tensor")
SCALE_EPS = 1e-12  # floor on every scale, so all-zero ranges quantize to 0 instead of dividing by zero


@dataclass(frozen=True)
class QuantSpec:
    """Integer quantizer settings; see the module docstring for the exact math."""

    bits: int
    symmetric: bool = True
    granularity: str = "per_token"
    group_size: int | None = None
    clip_ratio: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 2 <= self.bits <= 16:
            raise ValueError(f"bits must be in 2..16, got {self.bits}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {self.granularity!r}")
        if self.granularity == "per_group":
            if self.group_size is None or self.group_size <= 0:
                raise ValueError(f"per_group granularity needs group_size > 0, got {self.group_size}")
        elif self.group_size is not None:
            raise ValueError(f"group_size is only valid with per_group granularity, got {self.granularity!r}")
        if not 0.0 < self.clip_ratio <= 1.0:
            raise ValueError(f"clip_ratio must be in (0, 1], got {self.clip_ratio}")

    @property
    def qmin(self) -> int:
        """Smallest integer code."""
        return -(2 ** (self.bits - 1) - 1) if self.symmetric else 0

    @property
    def qmax(self) -> int:
        """Largest integer code."""
        return 2 ** (self.bits - 1) - 1 if self.symmetric else 2**self.bits - 1


def _grouped(x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """View ``x`` so the reduction axis is last: ``[..., n_groups, group_size]`` for per_group, else ``x``."""
    if spec.granularity != "per_group":
        return x
    g = spec.group_size
    assert g is not None
    n = x.shape[-1]
    if n % g != 0:
        raise ValueError(f"last dim {n} is not divisible by group_size {g}")
    return x.reshape(*x.shape[:-1], n // g, g)


def _check_input(x: torch.Tensor, spec: QuantSpec) -> None:
    if not x.is_floating_point():
        raise ValueError(f"expected a floating-point tensor, got {x.dtype}")
    if spec.granularity != "per_tensor" and x.dim() < 1:
        raise ValueError(f"{spec.granularity} needs at least 1 dim, got a scalar")
    if spec.granularity == "per_channel" and x.dim() < 2:
        raise ValueError(f"per_channel expects a weight [out, in], got shape {tuple(x.shape)}")


def compute_qparams(x: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Min-max ``(scale, zero_point)`` (float32, zero_point integer-valued) for ``x`` under ``spec``."""
    _check_input(x, spec)
    xf = _grouped(x.detach().float(), spec)
    if spec.granularity == "per_tensor":
        lo, hi = xf.amin(), xf.amax()
    else:
        lo, hi = xf.amin(dim=-1), xf.amax(dim=-1)
        if spec.granularity != "per_group":
            lo, hi = lo.unsqueeze(-1), hi.unsqueeze(-1)
    lo, hi = lo * spec.clip_ratio, hi * spec.clip_ratio
    if spec.symmetric:
        scale = (torch.maximum(hi, -lo) / spec.qmax).clamp_min(SCALE_EPS)
        return scale, torch.zeros_like(scale)
    lo, hi = lo.clamp_max(0.0), hi.clamp_min(0.0)
    scale = ((hi - lo) / spec.qmax).clamp_min(SCALE_EPS)
    zero = torch.round((0.0 - lo) / scale).clamp(0, spec.qmax)  # 0.0 - lo: no negative zero
    return scale, zero


def _bcast(t: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    return t.unsqueeze(-1) if spec.granularity == "per_group" else t


def quantize(x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """``clamp(round(x / scale) + zero, qmin, qmax)`` as int32, same shape as ``x``."""
    _check_input(x, spec)
    xf = _grouped(x.float(), spec)
    q = torch.round(xf / _bcast(scale.float(), spec)) + _bcast(zero.float(), spec)
    return q.clamp(spec.qmin, spec.qmax).to(torch.int32).reshape(x.shape)


def dequantize(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """``(q - zero) * scale`` as float32, same shape as ``q``."""
    qf = _grouped(q.float(), spec)
    return ((qf - _bcast(zero.float(), spec)) * _bcast(scale.float(), spec)).reshape(q.shape)


def fake_quant(x: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Quantize then dequantize with min-max qparams of ``x``; returns ``x.dtype`` (no gradient through round)."""
    scale, zero = compute_qparams(x, spec)
    return dequantize(quantize(x, scale, zero, spec), scale, zero, spec).to(x.dtype)


def quant_error_sqnr(x: torch.Tensor, y: torch.Tensor) -> float:
    """SQNR in dB of approximation ``y`` against reference ``x``: ``10 log10(||x||^2 / ||x - y||^2)``."""
    xf, yf = x.detach().double(), y.detach().double()
    signal = float(xf.pow(2).sum())
    noise = float((xf - yf).pow(2).sum())
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)
