"""Method protocol shared by all quantization methods: statistics in, ``QuantLinear`` out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from quant_kernels import reference as ref
from quant_kernels.qlinear import LayerMeta, QuantLinear
from quant_kernels.registry import Registry

if TYPE_CHECKING:
    from quant_kernels.api import QuantConfig

__all__ = ["METHODS", "InputTransform", "LayerStats", "Method", "build_quant_linear", "default_serq_rank"]


@dataclass
class LayerStats:
    """Calibration statistics of one linear layer's input (per input channel, over all calibration tokens)."""

    amax: torch.Tensor
    absmean: torch.Tensor
    n_tokens: int
    min_tokens: int
    min_ndim: int = 3
    hessian: torch.Tensor | None = None  # X^T X [in, in] (float64), only when GPTQ weights are asked for

    @staticmethod
    def merge(stats: list[LayerStats]) -> LayerStats:
        """Statistics of layers that read the same input (q/k/v): channel-wise max of ``amax``."""
        amax = torch.stack([s.amax for s in stats]).amax(0)
        absmean = torch.stack([s.absmean for s in stats]).amax(0)
        hessian = next((s.hessian for s in stats if s.hessian is not None), None)  # same input: same X^T X
        return LayerStats(amax, absmean, min(s.n_tokens for s in stats), min(s.min_tokens for s in stats),
                          min(s.min_ndim for s in stats), hessian)


@dataclass
class InputTransform:
    """Per-input-channel transform ``x -> x[perm] / scale[perm]`` shared by layers that read the same input.

    ``scale`` is in the original channel order. ``*_folded`` means the producing op already applies it, so the
    ``QuantLinear`` does not apply it at run time (the weight always gets ``W[:, perm] * scale[perm]``).
    """

    scale: torch.Tensor | None = None
    perm: torch.Tensor | None = None
    scale_folded: bool = False
    perm_folded: bool = False


class Method:
    """A quantization method: optional shared input transform, then a per-layer conversion."""

    name = "base"
    wants_input_transform = False

    def input_transform(self, weights: list[torch.Tensor], stats: LayerStats, cfg: QuantConfig) -> InputTransform:
        """The channel scale/permutation for layers sharing one input (default: none)."""
        return InputTransform()

    def convert(self, linear: nn.Linear, stats: LayerStats, cfg: QuantConfig, tf: InputTransform) -> QuantLinear:
        """Build the ``QuantLinear`` for ``linear`` (default: plain RTN weights and activations)."""
        return build_quant_linear(linear, cfg, tf, self.name, hessian=stats.hessian)


METHODS: Registry[Method] = Registry("quantization method")


def default_serq_rank(in_features: int) -> int:
    """SERQ salient rank scaled to the layer: ``in/16`` rounded down to a multiple of 16, in [16, 128]."""
    return min(in_features, max(16, min(128, (in_features // 16) // 16 * 16)))


def build_quant_linear(
    linear: nn.Linear,
    cfg: QuantConfig,
    tf: InputTransform,
    method: str,
    *,
    rotation: torch.Tensor | None = None,
    stamp: dict | None = None,
    res_rank: int = 0,
    lowrank_rank: int = 0,
    hessian: torch.Tensor | None = None,
    quantize_weight: bool = True,
) -> QuantLinear:
    """A ``QuantLinear`` with weight ``W[:, perm] * scale[perm] @ rotation`` quantized.

    Residual/low-rank buffers are created (zeros) for the caller to fill; with ``quantize_weight=False`` the caller
    also sets the weight (SERQ fixes its residual first, so the weight is quantized once). With
    ``cfg.weight_quantizer == "gptq"`` and the calibration ``hessian`` (``X^T X`` of the original input), every
    ``set_weight`` of the layer runs GPTQ on the Hessian of the transformed input instead of round-to-nearest.
    """
    meta = LayerMeta(
        in_features=linear.in_features,
        out_features=linear.out_features,
        has_bias=linear.bias is not None,
        method=method,
        wbits=cfg.wbits,
        w_symmetric=cfg.w_symmetric,
        w_group_size=cfg.group_size,
        w_clip_ratio=cfg.clip_ratio,
        abits=cfg.abits,
        a_symmetric=cfg.a_symmetric,
        a_group_size=cfg.a_group_size if stamp is None else None,
        has_in_scale=tf.scale is not None and not tf.scale_folded,
        has_perm=tf.perm is not None and not tf.perm_folded,
        has_rotation=rotation is not None,
        stamp=stamp,
        res_rank=res_rank,
        lowrank_rank=lowrank_rank,
    )
    q = QuantLinear(meta).to(linear.weight.device)
    if cfg.weight_quantizer == "gptq":
        if hessian is None:
            raise ValueError("weight_quantizer='gptq' needs calibration inputs (the layer's input Hessian)")
        q.use_gptq(ref.transform_hessian(hessian, tf.scale, tf.perm, rotation), cfg.gptq_damp)
    if quantize_weight:
        q.set_weight(transformed_weight(linear.weight, tf, rotation))
    if linear.bias is not None:
        q.bias.copy_(linear.bias.detach().float())
    scale = tf.scale
    if tf.perm is not None and scale is not None:
        scale = scale[tf.perm]
    if meta.has_perm:
        q.perm.copy_(tf.perm)
    if meta.has_in_scale:
        q.in_scale.copy_(scale)
    if rotation is not None:
        q.rotation.copy_(rotation)
    return q


def transformed_weight(w: torch.Tensor, tf: InputTransform, rotation: torch.Tensor | None = None) -> torch.Tensor:
    """``W[:, perm] * scale[perm]`` then ``@ rotation`` (float32), matching the run-time input transform."""
    w = w.detach().float()
    if tf.scale is not None:
        w = w * tf.scale.float()
    if tf.perm is not None:
        w = w[:, tf.perm]
    if rotation is not None:
        w = w @ rotation.float()
    return w


def rotation_for(in_features: int, cfg: QuantConfig) -> torch.Tensor:
    """The QuaRot-style block random Hadamard rotation of a layer's input features."""
    return ref.block_random_hadamard_matrix(in_features, seed=cfg.hadamard_seed)
