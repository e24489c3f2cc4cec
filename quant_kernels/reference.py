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
    SEQUENCE_TRANSFORMS,
    block_random_hadamard_matrix,
    dct,
    dct_matrix,
    haar_dwt,
    haar_dwt2d,
    haar_idwt,
    haar_idwt2d,
    haar_matrix,
    hadamard_matrix,
    idct,
    inverse_sequence_transform,
    pad_tokens,
    random_hadamard_matrix,
    sequence_transform,
    walsh_hadamard,
)

__all__ = [
    "GRANULARITIES",
    "SCALE_EPS",
    "SEQUENCE_TRANSFORMS",
    "QuantSpec",
    "block_random_hadamard_matrix",
    "check_input",
    "code_dtype",
    "compute_qparams",
    "dct",
    "dct_matrix",
    "dequantize",
    "fake_quant",
    "gptq_quantize",
    "haar_dwt",
    "haar_dwt2d",
    "haar_idwt",
    "haar_idwt2d",
    "haar_matrix",
    "hadamard_matrix",
    "idct",
    "inverse_sequence_transform",
    "pack_int4",
    "pad_tokens",
    "quant_error_sqnr",
    "quantize",
    "random_hadamard_matrix",
    "sequence_transform",
    "smoothquant_scales",
    "stamp_dequantize",
    "stamp_error_bound",
    "stamp_fake_quant",
    "stamp_quantize",
    "stamp_token_bits",
    "transform_hessian",
    "unpack_int4",
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


def check_input(x: torch.Tensor, spec: QuantSpec) -> None:
    """A floating-point tensor with enough dims for ``spec`` (ValueError otherwise); kernels check the same."""
    if not x.is_floating_point():
        raise ValueError(f"expected a floating-point tensor, got {x.dtype}")
    if spec.granularity != "per_tensor" and x.dim() < 1:
        raise ValueError(f"{spec.granularity} needs at least 1 dim, got a scalar")
    if spec.granularity == "per_channel" and x.dim() < 2:
        raise ValueError(f"per_channel expects a weight [out, in], got shape {tuple(x.shape)}")


def compute_qparams(x: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Min-max ``(scale, zero_point)`` (float32, zero_point integer-valued) for ``x`` under ``spec``."""
    check_input(x, spec)
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
    check_input(x, spec)
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


# --- STaMP: mixed precision along the token axis ------------------------------------------------------------------


def _stamp_specs(high_bits: int, low_bits: int, symmetric: bool) -> tuple[QuantSpec, QuantSpec]:
    return QuantSpec(high_bits, symmetric, "per_token"), QuantSpec(low_bits, symmetric, "per_token")


def _check_n_high(x: torch.Tensor, n_high: int) -> None:
    if x.dim() < 2:
        raise ValueError(f"STaMP needs [..., tokens, features], got shape {tuple(x.shape)}")
    if not 0 <= n_high <= x.shape[-2]:
        raise ValueError(f"stamp k (high-precision tokens) must be in 0..{x.shape[-2]} (tokens), got {n_high}")


def stamp_quantize(
    x: torch.Tensor, n_high: int, high_bits: int = 8, low_bits: int = 4, symmetric: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token quantize ``x [..., tokens, features]`` with the first ``n_high`` tokens at ``high_bits`` and the
    rest at ``low_bits`` (asymmetric min-max by default, as in STaMP). Returns ``(q int32, scale, zero)`` with
    ``scale``/``zero`` of shape ``[..., tokens, 1]``; each part is exactly :func:`quantize` with its own spec."""
    _check_n_high(x, n_high)
    hi_spec, lo_spec = _stamp_specs(high_bits, low_bits, symmetric)
    qs, ss, zs = [], [], []
    for part, spec in ((x[..., :n_high, :], hi_spec), (x[..., n_high:, :], lo_spec)):
        if part.shape[-2] == 0:
            continue
        sc, zp = compute_qparams(part, spec)
        qs.append(quantize(part, sc, zp, spec))
        ss.append(sc)
        zs.append(zp)
    return torch.cat(qs, dim=-2), torch.cat(ss, dim=-2), torch.cat(zs, dim=-2)


def stamp_dequantize(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """``(q - zero) * scale`` (float32) for :func:`stamp_quantize` output (per-token dequantize)."""
    return (q.float() - zero.float()) * scale.float()


def stamp_fake_quant(
    x: torch.Tensor, n_high: int, high_bits: int = 8, low_bits: int = 4, symmetric: bool = False
) -> torch.Tensor:
    """:func:`stamp_quantize` then :func:`stamp_dequantize`; returns ``x.dtype``."""
    q, scale, zero = stamp_quantize(x, n_high, high_bits, low_bits, symmetric)
    return stamp_dequantize(q, scale, zero).to(x.dtype)


def stamp_token_bits(tokens: int, n_high: int, high_bits: int = 8, low_bits: int = 4) -> torch.Tensor:
    """Bit width of each transformed token: ``high_bits`` for the first ``n_high``, ``low_bits`` after."""
    if not 0 <= n_high <= tokens:
        raise ValueError(f"stamp k must be in 0..{tokens} (tokens), got {n_high}")
    bits = torch.full((tokens,), low_bits, dtype=torch.int64)
    bits[:n_high] = high_bits
    return bits


def stamp_error_bound(x_transformed: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """STaMP Theorem 1: ``||L^T Q(L X) - X||^2 <= (d / 2) * sum_i e_i / (2^b_i - 1)^2``.

    ``x_transformed`` is ``L X`` with shape ``[..., tokens, d]``; ``e_i = ||(L X)_i||^2`` is the energy of
    transformed token ``i`` (summed over leading dims) and ``bits[i]`` its bit width. Holds per sample for an
    orthogonal ``L`` and per-token asymmetric min-max quantization (each element's error is at most half a step
    and ``(max - min)^2 <= 2 ||row||^2``). Returns a float64 scalar.
    """
    d = x_transformed.shape[-1]
    energy = x_transformed.double().pow(2).sum(dim=-1)  # [..., tokens]
    energy = energy.reshape(-1, energy.shape[-1]).sum(dim=0)
    levels = (2.0 ** bits.double() - 1.0) ** 2
    return (d / 2.0) * (energy / levels).sum()


# --- SmoothQuant / flattening scales ------------------------------------------------------------------------------


def smoothquant_scales(act_amax: torch.Tensor, weight_amax: torch.Tensor | None, alpha: float) -> torch.Tensor:
    """Per-input-channel migration scales ``s_j = amax_x_j^alpha / amax_w_j^(1 - alpha)`` (float32, > 0).

    The layer then computes ``(x / s) @ (W * s).T``. ``alpha = 1`` (``weight_amax`` may be None) is SERQ's static
    activation flattening ``s_j = max_t |x_tj|``; with ``weight_amax=None`` the scale is ``amax_x^alpha`` (SERQ's
    partial flattening). Zero statistics are floored so every scale is positive.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha (migration strength) must be in [0, 1], got {alpha}")
    a = act_amax.detach().float().clamp_min(1e-5)
    if alpha == 1.0 or weight_amax is None:
        return a.pow(alpha)
    w = weight_amax.detach().float().clamp_min(1e-5)
    return (a.pow(alpha) / w.pow(1.0 - alpha)).clamp_min(1e-5)


# --- integer storage ----------------------------------------------------------------------------------------------


def code_dtype(spec: QuantSpec) -> torch.dtype:
    """Smallest torch integer dtype holding ``[spec.qmin, spec.qmax]`` (int8, uint8, int16 or int32)."""
    for dt in (torch.int8, torch.uint8, torch.int16):
        info = torch.iinfo(dt)
        if info.min <= spec.qmin and spec.qmax <= info.max:
            return dt
    return torch.int32


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Pack unsigned 4-bit codes (values 0..15, last dim even) two per uint8: low nibble = even index."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_int4 needs an even last dim, got {codes.shape[-1]}")
    c = codes.to(torch.int32)
    if bool((c < 0).any()) or bool((c > 15).any()):
        raise ValueError("pack_int4 expects codes in 0..15")
    return (c[..., 0::2] | (c[..., 1::2] << 4)).to(torch.uint8)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_int4` (returns int32 codes 0..15)."""
    p = packed.to(torch.int32)
    return torch.stack((p & 15, (p >> 4) & 15), dim=-1).reshape(*p.shape[:-1], p.shape[-1] * 2)


# GPTQ lives in its own module (it builds on the quantizers above); re-exported so the math has one entry point
from quant_kernels.gptq import gptq_quantize, transform_hessian  # noqa: E402
