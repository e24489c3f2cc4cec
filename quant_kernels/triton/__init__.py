"""Triton kernels for the quantization reference: quant/dequant, fused STaMP transform + mixed-precision quantize,
and an int8/int4 GEMM with the SERQ low-rank residual.

``import quant_kernels.triton`` works without triton installed: the kernel modules (which need ``triton`` at import
time for their ``@triton.jit`` decorators) load on first use of a public name. On a machine without a GPU set
``TRITON_INTERPRET=1`` *before* the first use (tests/conftest.py does) to run the kernels in Triton's interpreter.
See docs/quantization_kernels.md for signatures and exactness guarantees.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any

__all__ = [
    "GemmTiles",
    "PackedLayer",
    "PackedWeight",
    "compute_qparams",
    "default_tiles",
    "dequantize",
    "int_gemm",
    "int_gemm_acc",
    "pack_layer",
    "pack_weight",
    "qlinear_forward",
    "quantize",
    "quantize_dynamic",
    "stamp_quantize",
    "triton_available",
    "triton_device",
]

_LAZY = {
    "compute_qparams": "quant",
    "dequantize": "quant",
    "quantize": "quant",
    "quantize_dynamic": "quant",
    "stamp_quantize": "stamp",
    "GemmTiles": "gemm",
    "PackedWeight": "gemm",
    "default_tiles": "gemm",
    "int_gemm": "gemm",
    "int_gemm_acc": "gemm",
    "pack_weight": "gemm",
    "PackedLayer": "linear",
    "pack_layer": "linear",
    "qlinear_forward": "linear",
}


def triton_available() -> bool:
    """True when triton is importable and can launch kernels here (a CUDA GPU, or ``TRITON_INTERPRET=1``)."""
    if importlib.util.find_spec("triton") is None:
        return False
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        return True
    import torch

    return torch.cuda.is_available()


def triton_device() -> str:
    """The torch device kernels run on: ``"cuda"`` with a GPU (and no interpreter), else ``"cpu"`` (interpreter)."""
    import torch

    if os.environ.get("TRITON_INTERPRET", "0") != "1" and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'quant_kernels.triton' has no attribute {name!r}")
    if importlib.util.find_spec("triton") is None:
        raise ImportError(f"quant_kernels.triton.{name} needs the 'triton' package (pip install 'allday[kernels]')")
    return getattr(importlib.import_module(f"quant_kernels.triton.{mod}"), name)
