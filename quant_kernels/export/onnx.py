"""ONNX export of quantized models and ONNX Runtime checks.

Two modes (both opset 21, dynamo exporter, static shapes of ``example_inputs``):

- ``qdq``: each quantized weight is an integer initializer (INT4/UINT4 for <= 4 bits, else INT8/UINT8/INT16)
  read by ``DequantizeLinear`` (per output channel on axis 0, or blocked per group) and a ``MatMul``.
- ``matmulnbits``: 4-bit weights as ``com.microsoft::MatMulNBits`` (``block_size`` columns per scale,
  ``accuracy_level=0``).

Activation fake-quantization (per token, STaMP transforms, rotations) is exported as ordinary float ops, so the
graph computes the same function as the PyTorch reference. Sessions set
``session.qdq_matmulnbits_accuracy_level=0`` so ORT's DQ+MatMul fusion stays exact. The ONNX Runtime GPU path is
the same file with ``providers=["CUDAExecutionProvider"]``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from quant_kernels.qlinear import QuantLinear

log = logging.getLogger(__name__)

__all__ = ["EXPORT_MODES", "OnnxCheck", "check_onnx", "export_onnx", "ort_session", "run_onnx"]

EXPORT_MODES = ("qdq", "matmulnbits")
MAX_IR_VERSION = 13  # onnxruntime-gpu 1.31 rejects IR 14


def _translations() -> dict:
    import onnxscript
    from onnx.defs import OpSchema
    from onnxscript import opset21 as op

    import quant_kernels.export._ops  # noqa: F401 - registers the custom ops

    fp, at = OpSchema.FormalParameter, OpSchema.Attribute
    schema = OpSchema(
        "MatMulNBits", "com.microsoft", 1,
        inputs=[fp("A", "T1"), fp("B", "T2"), fp("scales", "T1"), fp("zero_points", "T2")],
        outputs=[fp("Y", "T1")],
        type_constraints=[("T1", ["tensor(float)"], ""), ("T2", ["tensor(uint8)"], "")],
        attributes=[at(a, OpSchema.AttrType.INT, "") for a in ("K", "N", "bits", "block_size", "accuracy_level")],
    )
    matmul_nbits = onnxscript.values.Op(onnxscript.values.Opset("com.microsoft", 1), "MatMulNBits", schema)

    def dq_weight(codes, scale, zero, block: int):
        if block == 0:
            return op.DequantizeLinear(codes, scale, zero, axis=0)
        return op.DequantizeLinear(codes, scale, zero, axis=1, block_size=block)

    def mm_nbits(x, packed, scales, zeros, k: int, n: int, block: int):
        return matmul_nbits(x, packed, scales, zeros, K=k, N=n, bits=4, block_size=block, accuracy_level=0)

    return {torch.ops.quant_kernels.dq_weight.default: dq_weight,
            torch.ops.quant_kernels.matmul_nbits.default: mm_nbits}


def _split_inputs(example_inputs: Any) -> tuple[tuple, dict]:
    if isinstance(example_inputs, Mapping):
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), {}
    return (example_inputs,), {}


def _narrow_int4(model_proto: Any, int4_names: set[str]) -> int:
    """Rewrite the INT8/UINT8 initializers in ``int4_names`` (and their zero points) as INT4/UINT4."""
    import onnx
    from onnx import TensorProto, numpy_helper

    inits = {i.name: i for i in model_proto.graph.initializer}
    done = 0
    for node in model_proto.graph.node:
        if node.op_type != "DequantizeLinear" or node.input[0] not in int4_names:
            continue
        for name in (node.input[0], node.input[2] if len(node.input) > 2 else None):
            if name is None or name not in inits:
                continue
            init = inits[name]
            if init.data_type not in (TensorProto.INT8, TensorProto.UINT8):  # shared, already narrowed
                continue
            arr = numpy_helper.to_array(init)
            dt = TensorProto.INT4 if init.data_type == TensorProto.INT8 else TensorProto.UINT4
            new = onnx.helper.make_tensor(name, dt, arr.shape, arr.astype(np.int32).flatten().tolist())
            init.CopyFrom(new)
        done += 1
    return done


def export_onnx(model: nn.Module, example_inputs: Any, path: str | Path, mode: str = "qdq", opset: int = 21,
                block_size: int = 32, ir_version: int = 10) -> Path:
    """Export ``model`` (with ``QuantLinear`` layers, or none) to ``path`` and return it.

    ``example_inputs``: a tensor, a tuple of positional args or a dict of keyword args (fixes the shapes).
    ``block_size``: MatMulNBits columns per scale for per-channel weights (per-group weights use their group).
    """
    import onnx

    if mode not in EXPORT_MODES:
        raise ValueError(f"mode must be one of {EXPORT_MODES}, got {mode!r}")
    if opset < 21:
        raise ValueError(f"opset must be >= 21 (INT4 DequantizeLinear), got {opset}")
    if not 1 <= ir_version <= MAX_IR_VERSION:
        raise ValueError(f"ir_version must be in 1..{MAX_IR_VERSION} (onnxruntime-gpu limit), got {ir_version}")
    from quant_kernels.export import _ops

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    layers = {n: m for n, m in model.named_modules() if isinstance(m, QuantLinear)}
    int4_names: set[str] = set()
    args, kwargs = _split_inputs(example_inputs)
    was_training = model.training
    model.eval()
    try:
        for name, q in layers.items():
            _ops.attach_export_buffers(q, mode, block_size)
            if mode == "qdq" and q.wspec is not None and q.wspec.bits <= 4:
                prefix = f"{name}." if name else ""
                int4_names |= {f"{prefix}onnx_main_codes", f"{prefix}onnx_res_codes"}
        with torch.no_grad():
            prog = torch.onnx.export(model, args, kwargs=kwargs or None, dynamo=True, opset_version=opset,
                                     custom_translation_table=_translations(), verbose=False)
        proto = prog.model_proto
    finally:
        for q in layers.values():
            _ops.detach_export_buffers(q)
        model.train(was_training)
    if int4_names:
        n = _narrow_int4(proto, int4_names)
        expected = sum(1 + bool(q.meta.res_rank) for q in layers.values() if q.wspec is not None and q.wspec.bits <= 4)
        if n != expected:
            log.warning("narrowed %d of %d int4 weight initializers (others stay int8)", n, expected)
    proto.ir_version = min(proto.ir_version, ir_version)
    for node in proto.graph.node:  # the exporter's per-node stack traces would dominate small files
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.save(proto, str(path))
    onnx.checker.check_model(str(path))
    log.info("exported %s (%s, %d quantized layers, %.2f MB)", path, mode, len(layers), path.stat().st_size / 1e6)
    return path


def ort_session(path: str | Path, providers: list[str] | None = None) -> Any:
    """An ``onnxruntime.InferenceSession`` for ``path`` with exact DQ+MatMul fusion (accuracy level 0).

    ``providers`` defaults to CPU; a provider this onnxruntime build lacks raises ValueError.
    """
    import onnxruntime as ort

    providers = providers or ["CPUExecutionProvider"]
    missing = [p for p in providers if p not in ort.get_available_providers()]
    if missing:
        raise ValueError(f"ONNX Runtime providers {missing} are not available here "
                         f"(available: {ort.get_available_providers()}); the GPU path needs onnxruntime-gpu")
    so = ort.SessionOptions()
    so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=so, providers=providers)


def run_onnx(session: Any, example_inputs: Any) -> list[np.ndarray]:
    """Run ``session`` on the same inputs given to :func:`export_onnx` (matched by name, else by position)."""
    args, kwargs = _split_inputs(example_inputs)
    names = [i.name for i in session.get_inputs()]
    if kwargs:
        feed = {k: v.detach().cpu().numpy() for k, v in kwargs.items() if k in names}
    else:
        feed = {n: a.detach().cpu().numpy() for n, a in zip(names, args, strict=False)}
    return session.run(None, feed)


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return []


@dataclass
class OnnxCheck:
    """ORT vs PyTorch: worst absolute error, that error relative to max |reference|, worst SQNR (dB)."""

    max_abs_err: float
    rel_err: float
    sqnr_db: float
    rtol: float
    ok: bool


def check_onnx(model: nn.Module, example_inputs: Any, path: str | Path, providers: list[str] | None = None,
               rtol: float = 1e-3, min_sqnr_db: float | None = None) -> OnnxCheck:
    """Compare ORT outputs of ``path`` with ``model``'s PyTorch outputs on ``example_inputs``.

    Passes when every output satisfies ``max|ort - ref| <= rtol * max|ref|`` (measured ~3e-7 with 8-bit
    activations: the quantized weights and the activation quantizers compute the same numbers). With 4-bit
    activations, ORT's float kernels (attention, GELU, LayerNorm) differ from torch's by ~1e-7 and can move a
    few activations across a rounding boundary (one code step each), which compounds over layers; pass
    ``min_sqnr_db`` (e.g. 30) to accept outputs whose SQNR against the reference is at least that instead.
    """
    from quant_kernels.reference import quant_error_sqnr

    args, kwargs = _split_inputs(example_inputs)
    with torch.no_grad():
        refs = _flat(model(*args, **kwargs))
    outs = run_onnx(ort_session(path, providers), example_inputs)
    if len(outs) != len(refs):
        raise ValueError(f"ONNX graph has {len(outs)} outputs, the model {len(refs)}")
    worst_abs, worst_rel, worst_sqnr = 0.0, 0.0, math.inf
    for r, o in zip(refs, outs, strict=True):
        o_t = torch.from_numpy(np.asarray(o)).to(r.dtype)
        if tuple(o_t.shape) != tuple(r.shape):
            raise ValueError(f"ONNX output shape {tuple(o_t.shape)} != reference {tuple(r.shape)}")
        err = float((o_t - r).abs().max()) if r.numel() else 0.0
        scale = float(r.abs().max()) if r.numel() else 0.0
        worst_abs = max(worst_abs, err)
        worst_rel = max(worst_rel, err / scale if scale > 0 else (0.0 if err == 0 else math.inf))
        worst_sqnr = min(worst_sqnr, quant_error_sqnr(r, o_t))
    ok = worst_rel <= rtol or (min_sqnr_db is not None and worst_sqnr >= min_sqnr_db)
    return OnnxCheck(worst_abs, worst_rel, worst_sqnr, rtol, ok)
