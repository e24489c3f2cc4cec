"""STaMP: orthonormal sequence transform along tokens + mixed precision (first k transformed tokens high bits)."""

from quant_kernels.methods.stamp.method import STaMP

__all__ = ["STaMP"]
