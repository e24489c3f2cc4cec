"""Row-wise quant/dequant kernels, bit-exact with :mod:`quant_kernels.reference` (same signatures).

Every granularity is a reduction over contiguous runs of the flattened input: per_token / per_channel -> rows of
the last dim, per_group -> runs of ``group_size``, per_tensor -> one run. A program owns ``BLOCK_R`` runs and walks
their columns in ``BLOCK_C`` tiles (min/max pass, then quantize pass).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from quant_kernels.reference import QuantSpec, check_input
from quant_kernels.triton._common import check_device, next_pow2, qparams_from_minmax, quantize_values

__all__ = ["compute_qparams", "dequantize", "quantize", "quantize_dynamic"]

_MAX_BLOCK_C = 1024
_TILE_ELEMS = 4096  # BLOCK_R * BLOCK_C per program


@triton.jit
def _rows_kernel(
    x_ptr, q_ptr, scale_ptr, zero_ptr, n_rows, n_cols, qmin, qmax, clip,
    SYMMETRIC: tl.constexpr, COMPUTE_QPARAMS: tl.constexpr, WRITE_Q: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    rmask = rows < n_rows
    base = rows.to(tl.int64)[:, None] * n_cols
    if COMPUTE_QPARAMS:
        lo = tl.full((BLOCK_R,), float("inf"), tl.float32)
        hi = tl.full((BLOCK_R,), float("-inf"), tl.float32)
        for c0 in range(0, n_cols, BLOCK_C):
            m = rmask[:, None] & ((c0 + cols) < n_cols)[None, :]
            x = tl.load(x_ptr + base + c0 + cols[None, :], mask=m, other=0.0).to(tl.float32)
            lo = tl.minimum(lo, tl.min(tl.where(m, x, float("inf")), axis=1))
            hi = tl.maximum(hi, tl.max(tl.where(m, x, float("-inf")), axis=1))
        scale, zero = qparams_from_minmax(lo, hi, clip, qmax, SYMMETRIC)
        tl.store(scale_ptr + rows, scale, mask=rmask)
        tl.store(zero_ptr + rows, zero, mask=rmask)
    else:
        scale = tl.load(scale_ptr + rows, mask=rmask, other=1.0)
        zero = tl.load(zero_ptr + rows, mask=rmask, other=0.0)
    if WRITE_Q:
        for c0 in range(0, n_cols, BLOCK_C):
            m = rmask[:, None] & ((c0 + cols) < n_cols)[None, :]
            x = tl.load(x_ptr + base + c0 + cols[None, :], mask=m, other=0.0).to(tl.float32)
            q = quantize_values(x, scale[:, None], zero[:, None], qmin, qmax)
            tl.store(q_ptr + base + c0 + cols[None, :], q.to(tl.int32), mask=m)


@triton.jit
def _dequant_kernel(q_ptr, y_ptr, scale_ptr, zero_ptr, n_rows, n_cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    rmask = rows < n_rows
    base = rows.to(tl.int64)[:, None] * n_cols
    scale = tl.load(scale_ptr + rows, mask=rmask, other=1.0)
    zero = tl.load(zero_ptr + rows, mask=rmask, other=0.0)
    for c0 in range(0, n_cols, BLOCK_C):
        m = rmask[:, None] & ((c0 + cols) < n_cols)[None, :]
        q = tl.load(q_ptr + base + c0 + cols[None, :], mask=m, other=0).to(tl.float32)
        tl.store(y_ptr + base + c0 + cols[None, :], (q - zero[:, None]) * scale[:, None], mask=m)


def _runs(shape: torch.Size, spec: QuantSpec) -> tuple[int, int, tuple[int, ...]]:
    """``(n_runs, run_len, qparam_shape)`` of the reduction layout for ``shape`` under ``spec``."""
    numel = 1
    for s in shape:
        numel *= int(s)
    if spec.granularity == "per_tensor":
        return 1, max(numel, 1), ()
    last = int(shape[-1])
    lead = tuple(int(s) for s in shape[:-1])
    if spec.granularity == "per_group":
        g = spec.group_size
        assert g is not None
        if last % g != 0:
            raise ValueError(f"last dim {last} is not divisible by group_size {g}")
        return numel // g, g, lead + (last // g,)
    return numel // max(last, 1), last, lead + (1,)


def _blocks(n_rows: int, n_cols: int) -> tuple[int, int]:
    bc = min(next_pow2(n_cols), _MAX_BLOCK_C)
    br = max(1, min(next_pow2(n_rows), _TILE_ELEMS // bc))
    return br, bc


def _launch_rows(x: torch.Tensor, spec: QuantSpec, scale: torch.Tensor | None, zero: torch.Tensor | None,
                 write_q: bool) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    check_device(x)
    n_rows, n_cols, qshape = _runs(x.shape, spec)
    xc = x.detach().contiguous()
    compute = scale is None
    if compute:
        s = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        z = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    else:
        assert zero is not None
        s = _qparam_rows(scale, qshape, n_rows, "scale", x.device)
        z = _qparam_rows(zero, qshape, n_rows, "zero", x.device)
    q = torch.empty(x.shape, dtype=torch.int32, device=x.device) if write_q else None
    br, bc = _blocks(n_rows, n_cols)
    grid = (triton.cdiv(n_rows, br),)
    _rows_kernel[grid](
        xc, q if q is not None else s, s, z, n_rows, n_cols, float(spec.qmin), float(spec.qmax),
        float(spec.clip_ratio), SYMMETRIC=spec.symmetric, COMPUTE_QPARAMS=compute, WRITE_Q=write_q,
        BLOCK_R=br, BLOCK_C=bc,
    )
    return q, s.reshape(qshape), z.reshape(qshape)


def _qparam_rows(
    t: torch.Tensor, qshape: tuple[int, ...], n_rows: int, name: str, device: torch.device
) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    try:
        full = torch.broadcast_to(t.to(device=device, dtype=torch.float32), qshape)
    except RuntimeError as exc:
        raise ValueError(f"{name} of shape {tuple(t.shape)} does not broadcast to qparam shape {qshape}") from exc
    return full.contiguous().reshape(n_rows)


def _validate(x: torch.Tensor, spec: QuantSpec) -> None:
    if not isinstance(spec, QuantSpec):
        raise TypeError(f"spec must be a QuantSpec, got {type(spec).__name__}")
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"expected a floating-point tensor, got {type(x).__name__}")
    check_input(x, spec)


def compute_qparams(x: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Kernel twin of ``reference.compute_qparams``: bit-identical float32 ``(scale, zero_point)``."""
    _validate(x, spec)
    _, s, z = _launch_rows(x, spec, None, None, write_q=False)
    return s, z


def quantize(x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Kernel twin of ``reference.quantize``: bit-identical int32 codes for given qparams."""
    _validate(x, spec)
    q, _, _ = _launch_rows(x, spec, scale, zero, write_q=True)
    assert q is not None
    return q


def quantize_dynamic(x: torch.Tensor, spec: QuantSpec) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused ``compute_qparams`` + ``quantize`` in one launch: ``(codes int32, scale, zero)``, bit-exact."""
    _validate(x, spec)
    q, s, z = _launch_rows(x, spec, None, None, write_q=True)
    assert q is not None
    return q, s, z


def dequantize(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Kernel twin of ``reference.dequantize``: ``(q - zero) * scale`` as float32, bit-identical."""
    if not isinstance(spec, QuantSpec):
        raise TypeError(f"spec must be a QuantSpec, got {type(spec).__name__}")
    check_device(q)
    n_rows, n_cols, qshape = _runs(q.shape, spec)
    s = _qparam_rows(scale, qshape, n_rows, "scale", q.device)
    z = _qparam_rows(zero, qshape, n_rows, "zero", q.device)
    qc = q.detach().contiguous()
    y = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    br, bc = _blocks(n_rows, n_cols)
    _dequant_kernel[(triton.cdiv(n_rows, br),)](qc, y, s, z, n_rows, n_cols, BLOCK_R=br, BLOCK_C=bc)
    return y
