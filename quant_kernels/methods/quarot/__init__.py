"""QuaRot-style rotation: a random (block) Hadamard rotation of the input features, folded into the weight."""

from quant_kernels.methods.quarot.method import QuaRot

__all__ = ["QuaRot"]
