"""L2QER-style baseline: quantized weight plus a two-factor low-rank correction of its error."""

from quant_kernels.methods.l2qer.method import L2QER

__all__ = ["L2QER"]
