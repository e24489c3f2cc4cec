"""``QuantLinear``: a linear layer holding integer weight codes, an activation spec and method extras.

Forward (every step optional, each set by the method at convert time)::

    x -> x[..., perm] -> x / in_scale -> x @ rotation -> [STaMP: L x along tokens] -> activation fake-quant
      -> y = xq @ deq(W).T (+ xq[..., :r] @ deq(R).T  SERQ residual) (+ Q(xq @ B.T) @ A.T  two-factor low rank)
      -> [STaMP: L^T y] -> + bias

Bit width 16 means "not quantized" (W16 keeps a float weight, A16 leaves activations float), so a 16-bit
config is a check that the method's transforms are exact. All math calls :mod:`quant_kernels.reference`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from quant_kernels import reference as ref

__all__ = ["FLOAT_BITS", "LayerMeta", "QuantLinear", "StampSpec"]

FLOAT_BITS = 16  # a bit width of 16 keeps that tensor in float


@dataclass(frozen=True)
class StampSpec:
    """STaMP sequence transform and token bit allocation (the low bit width is the layer's ``abits``)."""

    transform: str = "dwt"
    levels: int = 3
    k: int = 64
    high_bits: int = 8
    grid_hw: tuple[int, int] | None = None
    pad: str = "reflect"


@dataclass
class LayerMeta:
    """Everything needed to rebuild an empty :class:`QuantLinear` before loading its state (JSON-able)."""

    in_features: int
    out_features: int
    has_bias: bool
    method: str
    wbits: int
    w_symmetric: bool = True
    w_group_size: int | None = None
    w_clip_ratio: float = 1.0
    abits: int = 16
    a_symmetric: bool = False
    a_group_size: int | None = None
    has_in_scale: bool = False
    has_perm: bool = False
    has_rotation: bool = False
    stamp: dict[str, Any] | None = None
    res_rank: int = 0
    lowrank_rank: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LayerMeta:
        d = dict(d)
        if d.get("stamp") is not None and d["stamp"].get("grid_hw") is not None:
            d["stamp"] = {**d["stamp"], "grid_hw": tuple(d["stamp"]["grid_hw"])}
        return cls(**d)


def weight_spec(bits: int, symmetric: bool, group_size: int | None, clip_ratio: float = 1.0) -> ref.QuantSpec:
    """Weight quantizer: per output channel, or per group of ``group_size`` input features."""
    gran = "per_group" if group_size else "per_channel"
    return ref.QuantSpec(bits, symmetric, gran, group_size, clip_ratio)


class QuantLinear(nn.Module):
    """Quantized replacement for ``nn.Linear`` (see the module docstring for the forward)."""

    def __init__(self, meta: LayerMeta) -> None:
        super().__init__()
        self.meta = meta
        self.in_features, self.out_features = meta.in_features, meta.out_features
        self.export_mode: str | None = None  # set by quant_kernels.export.onnx while exporting
        i, o = meta.in_features, meta.out_features
        self.wspec = None if meta.wbits >= FLOAT_BITS else weight_spec(
            meta.wbits, meta.w_symmetric, meta.w_group_size, meta.w_clip_ratio)
        self.aspec = None
        if meta.abits < FLOAT_BITS:
            gran = "per_group" if meta.a_group_size else "per_token"
            self.aspec = ref.QuantSpec(meta.abits, meta.a_symmetric, gran, meta.a_group_size)
        self.stamp = StampSpec(**meta.stamp) if meta.stamp is not None else None
        if self.wspec is None:
            self.register_buffer("weight", torch.zeros(o, i))
        else:
            ng = 1 if meta.w_group_size is None else i // meta.w_group_size
            self.register_buffer("qweight", torch.zeros(o, i, dtype=ref.code_dtype(self.wspec)))
            self.register_buffer("w_scale", torch.ones(o, ng))
            self.register_buffer("w_zero", torch.zeros(o, ng))
        self.register_buffer("bias", torch.zeros(o) if meta.has_bias else None)
        self.register_buffer("perm", torch.arange(i) if meta.has_perm else None)
        self.register_buffer("in_scale", torch.ones(i) if meta.has_in_scale else None)
        self.register_buffer("rotation", torch.eye(i) if meta.has_rotation else None)
        r = meta.res_rank
        if r:
            if self.wspec is None:
                self.register_buffer("res_weight", torch.zeros(o, r))
            else:
                self.register_buffer("res_qweight", torch.zeros(o, r, dtype=ref.code_dtype(self.res_spec)))
                self.register_buffer("res_scale", torch.ones(o, 1))
                self.register_buffer("res_zero", torch.zeros(o, 1))
        k = meta.lowrank_rank
        self.register_buffer("lr_a", torch.zeros(o, k) if k else None)
        self.register_buffer("lr_b", torch.zeros(k, i) if k else None)

    @property
    def res_spec(self) -> ref.QuantSpec:
        """SERQ residual quantizer: the weight bits, per output channel."""
        return weight_spec(self.meta.wbits, self.meta.w_symmetric, None, 1.0)

    # --- setting weights -----------------------------------------------------------------------------------------
    def use_gptq(self, hessian: torch.Tensor, damp: float = 0.01) -> None:
        """Quantize later ``set_weight`` calls with GPTQ on ``hessian`` (of the transformed input); conversion-time
        state only (not saved): :meth:`release_calibration` drops it."""
        self._gptq = (hessian, float(damp))

    def release_calibration(self) -> None:
        """Forget conversion-time state (the GPTQ Hessian); the stored codes are unchanged."""
        self._gptq = None

    def set_weight(self, w: torch.Tensor) -> None:
        """Quantize (round to nearest, or GPTQ after :meth:`use_gptq`) and store the transformed ``[out, in]``."""
        w = w.detach().float()
        if self.wspec is None:
            self.weight.copy_(w)
            return
        gptq = getattr(self, "_gptq", None)
        if gptq is not None:
            codes, scale, zero = ref.gptq_quantize(w.cpu(), gptq[0], self.wspec, gptq[1])
            self.qweight.copy_(codes.to(self.qweight.dtype))
            self.w_scale.copy_(scale.reshape(self.w_scale.shape))
            self.w_zero.copy_(zero.reshape(self.w_zero.shape))
            return
        scale, zero = ref.compute_qparams(w, self.wspec)
        self.qweight.copy_(ref.quantize(w, scale, zero, self.wspec).to(self.qweight.dtype))
        self.w_scale.copy_(scale.reshape(self.w_scale.shape))
        self.w_zero.copy_(zero.reshape(self.w_zero.shape))

    def set_residual(self, r: torch.Tensor) -> None:
        """Quantize and store the SERQ residual matrix ``[out, r]``."""
        r = r.detach().float()
        if self.wspec is None:
            self.res_weight.copy_(r)
            return
        scale, zero = ref.compute_qparams(r, self.res_spec)
        self.res_qweight.copy_(ref.quantize(r, scale, zero, self.res_spec).to(self.res_qweight.dtype))
        self.res_scale.copy_(scale)
        self.res_zero.copy_(zero)

    def dequantized_weight(self) -> torch.Tensor:
        """``deq(W)`` as float32 ``[out, in]`` (the weight actually used)."""
        if self.wspec is None:
            return self.weight
        return ref.dequantize(self.qweight, self._qp(self.w_scale), self._qp(self.w_zero), self.wspec)

    def dequantized_residual(self) -> torch.Tensor:
        """``deq(R)`` as float32 ``[out, r]``."""
        if self.wspec is None:
            return self.res_weight
        return ref.dequantize(self.res_qweight, self.res_scale, self.res_zero, self.res_spec)

    def _qp(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.meta.w_group_size else t.reshape(-1, 1)

    # --- forward -------------------------------------------------------------------------------------------------
    def _matmul(self, x: torch.Tensor, which: str) -> torch.Tensor:
        if self.export_mode is not None:
            from quant_kernels.export import _ops

            return _ops.export_matmul(self, x, which)
        w = self.dequantized_weight() if which == "main" else self.dequantized_residual()
        return x @ w.T

    def prepare_input(self, x: torch.Tensor) -> torch.Tensor:
        """The offline-folded input steps, in order: float32, SERQ permutation, flattening scales, rotation."""
        x = x.float()
        if self.perm is not None:
            x = x.index_select(-1, self.perm)
        if self.in_scale is not None:
            x = x / self.in_scale
        if self.rotation is not None:
            x = x @ self.rotation
        return x

    def _stamp_forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        st = self.stamp
        assert st is not None
        x, n = ref.pad_tokens(x, st.transform, st.levels, st.pad)
        if st.k > x.shape[-2]:
            raise ValueError(f"stamp_k={st.k} exceeds the number of tokens ({x.shape[-2]})")
        xt = ref.sequence_transform(x, st.transform, st.levels, st.grid_hw)
        low = self.meta.abits if self.aspec is not None else FLOAT_BITS
        if low < FLOAT_BITS:
            xt = ref.stamp_fake_quant(xt, st.k, min(st.high_bits, FLOAT_BITS), low, self.meta.a_symmetric)
        return xt, n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        in_dtype = x.dtype
        x = self.prepare_input(x)
        n_tokens = 0
        if self.stamp is not None:
            x, n_tokens = self._stamp_forward(x)
        elif self.aspec is not None:
            x = ref.fake_quant(x, self.aspec)
        y = self._matmul(x, "main")
        if self.meta.res_rank:
            y = y + self._matmul(x[..., : self.meta.res_rank], "res")
        if self.lr_a is not None:
            t = x @ self.lr_b.T
            if self.aspec is not None:
                t = ref.fake_quant(t, ref.QuantSpec(self.aspec.bits, self.aspec.symmetric, "per_token"))
            y = y + t @ self.lr_a.T
        if self.stamp is not None:
            st = self.stamp
            y = ref.inverse_sequence_transform(y, st.transform, st.levels, st.grid_hw)[..., :n_tokens, :]
        if self.bias is not None:
            y = y + self.bias
        return y.to(in_dtype)

    def extra_repr(self) -> str:
        m = self.meta
        return (f"in={m.in_features}, out={m.out_features}, method={m.method}, W{m.wbits}A{m.abits}, "
                f"stamp={self.stamp is not None}, res_rank={m.res_rank}, lowrank={m.lowrank_rank}")
