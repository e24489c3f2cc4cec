"""Low-bit quantization: the pure-PyTorch reference, STaMP, SERQ, Triton kernels and ONNX export (issue #4)."""

from __future__ import annotations

from quant_kernels.reference import *  # noqa: F403 - the package re-exports the reference's public API
from quant_kernels.reference import __all__  # noqa: F401
