"""Quantization methods, one folder each, registered in ``METHODS`` by importing them."""

from quant_kernels.methods import l2qer, quarot, rtn, serq, smoothquant, stamp  # noqa: F401 - registration
from quant_kernels.methods.base import METHODS, InputTransform, LayerStats, Method

__all__ = ["METHODS", "InputTransform", "LayerStats", "Method"]
