"""Low-bit quantization: the pure-PyTorch reference, STaMP, SERQ, Triton kernels and ONNX export (issue #4)."""

from __future__ import annotations

from quant_kernels.reference import (
    GRANULARITIES,
    SCALE_EPS,
    QuantSpec,
    compute_qparams,
    dct,
    dct_matrix,
    dequantize,
    fake_quant,
    haar_dwt,
    haar_dwt2d,
    haar_idwt,
    haar_idwt2d,
    haar_matrix,
    hadamard_matrix,
    idct,
    quant_error_sqnr,
    quantize,
    random_hadamard_matrix,
    walsh_hadamard,
)

__all__ = [
    "GRANULARITIES",
    "SCALE_EPS",
    "QuantSpec",
    "compute_qparams",
    "dct",
    "dct_matrix",
    "dequantize",
    "fake_quant",
    "haar_dwt",
    "haar_dwt2d",
    "haar_idwt",
    "haar_idwt2d",
    "haar_matrix",
    "hadamard_matrix",
    "idct",
    "quant_error_sqnr",
    "quantize",
    "random_hadamard_matrix",
    "walsh_hadamard",
]
