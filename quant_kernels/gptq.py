"""GPTQ weight quantization (Frantar et al., 2023), part of the reference math (pure PyTorch, float64).

Columns are quantized left to right on the same integer grid the round-to-nearest quantizer uses
(:func:`quant_kernels.reference.compute_qparams` scales, per output channel or per group of input channels);
each column's rounding error is spread over the not-yet-quantized columns through the inverse Hessian
``H = X^T X`` of the layer's calibration inputs, which minimises ``||X W^T - X Q^T||``. With ``H = I`` nothing is
propagated and the codes equal round-to-nearest exactly. Lazy block updates (``block``) as in the paper.
"""

from __future__ import annotations

import torch

from quant_kernels.reference import QuantSpec, compute_qparams, dequantize, quantize

__all__ = ["gptq_quantize", "transform_hessian"]


def _inverse_cholesky(h: torch.Tensor, damp: float) -> torch.Tensor:
    """Upper Cholesky factor of ``(H + damp * mean(diag H) I)^-1``; retries with more damping if needed."""
    n = h.shape[0]
    lam = damp * float(h.diagonal().mean().clamp_min(1e-12))
    for _ in range(6):
        try:
            chol = torch.linalg.cholesky(h + lam * torch.eye(n, dtype=h.dtype))
            return torch.linalg.cholesky(torch.cholesky_inverse(chol), upper=True)
        except RuntimeError:  # torch.linalg.LinAlgError subclasses RuntimeError
            lam *= 10.0
    raise ValueError("GPTQ: the calibration Hessian is not positive definite even after damping")


@torch.no_grad()
def gptq_quantize(w: torch.Tensor, hessian: torch.Tensor, spec: QuantSpec, damp: float = 0.01,
                  block: int = 128) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GPTQ codes for ``w`` ``[out, in]``: returns ``(q, scale, zero)`` shaped as ``quantize`` /
    ``compute_qparams`` return them for ``spec`` (``per_channel`` or ``per_group`` over input channels).

    ``hessian`` is ``X^T X`` (any positive scale) of the inputs the layer sees at run time, ``[in, in]``.
    """
    if w.dim() != 2:
        raise ValueError(f"GPTQ quantizes 2-D weights [out, in], got shape {tuple(w.shape)}")
    out_f, in_f = w.shape
    if tuple(hessian.shape) != (in_f, in_f):
        raise ValueError(f"GPTQ: Hessian shape {tuple(hessian.shape)} does not match in_features {in_f}")
    if spec.granularity not in ("per_channel", "per_group"):
        raise ValueError(f"GPTQ needs per_channel or per_group weight scales, got {spec.granularity!r}")
    if not 0.0 <= damp < 1.0:
        raise ValueError(f"GPTQ damp must be in [0, 1), got {damp}")
    if not torch.isfinite(hessian).all():
        raise ValueError("GPTQ: the calibration Hessian contains NaN or inf")
    h = hessian.detach().double().clone()
    wq = w.detach().double().clone()
    # inputs never active in calibration: the paper zeroes their weights; we keep them (rounded, nothing
    # propagated), because little calibration data often misses channels that fire at run time (ReLU units)
    dead = h.diagonal() == 0
    h[dead, dead] = 1.0
    hinv = _inverse_cholesky(h, damp)
    group = spec.group_size if spec.granularity == "per_group" else None
    col_spec = QuantSpec(spec.bits, spec.symmetric, "per_channel", None, spec.clip_ratio)
    if group is None:
        scale, zero = compute_qparams(w.float(), spec)
        scales, zeros = [scale], [zero]
    else:
        block = group  # a group's scale is set from its columns once all earlier errors have reached them
        scales, zeros = [], []
    codes = torch.zeros(out_f, in_f, dtype=torch.int32)
    for i1 in range(0, in_f, block):
        i2 = min(i1 + block, in_f)
        w1 = wq[:, i1:i2].clone()
        err1 = torch.zeros_like(w1)
        h1 = hinv[i1:i2, i1:i2]
        if group is not None:
            scale, zero = compute_qparams(w1.float(), col_spec)
            scales.append(scale)
            zeros.append(zero)
        s, z = scale.double().reshape(out_f, 1), zero.double().reshape(out_f, 1)
        for i in range(i2 - i1):
            col = w1[:, i : i + 1]
            q = quantize(col.float(), s.float(), z.float(), col_spec)
            codes[:, i1 + i] = q[:, 0]
            deq = dequantize(q, s.float(), z.float(), col_spec).double()
            e = (col - deq) / h1[i, i]
            w1[:, i:] -= e @ h1[i : i + 1, i:]
            err1[:, i : i + 1] = e
        wq[:, i2:] -= err1 @ hinv[i1:i2, i2:]
    if group is None:
        return codes, scales[0], zeros[0]
    return codes, torch.cat(scales, 1).float(), torch.cat(zeros, 1).float()


def transform_hessian(h: torch.Tensor, scale: torch.Tensor | None = None, perm: torch.Tensor | None = None,
                      rotation: torch.Tensor | None = None) -> torch.Tensor:
    """``M^T H M`` for the run-time input transform ``x -> (x[perm] / scale[perm]) @ rotation`` (``scale`` in
    the original channel order), so that GPTQ sees the Hessian of what the quantized weight multiplies."""
    h = h.double()
    if perm is not None:
        h = h[perm][:, perm]
        if scale is not None:
            scale = scale[perm]
    if scale is not None:
        inv = 1.0 / scale.double()
        h = h * inv[:, None] * inv[None, :]
    if rotation is not None:
        r = rotation.double()
        h = r.T @ h @ r
    return h
