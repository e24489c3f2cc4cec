"""RTN: round-to-nearest min-max weights (per channel / per group) and activations (per token)."""

from quant_kernels.methods.rtn.method import RTN

__all__ = ["RTN"]
