"""SmoothQuant: migrate activation outliers into the weights with per-channel scales (strength alpha)."""

from quant_kernels.methods.smoothquant.method import SmoothQuant

__all__ = ["SmoothQuant"]
