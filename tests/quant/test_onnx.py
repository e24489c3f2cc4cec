"""ONNX export (QDQ int4/int8, MatMulNBits) run in real ONNX Runtime sessions == the PyTorch reference."""

from __future__ import annotations

import pytest
import torch

from quant_kernels.api import QuantConfig, quantize_
from quant_kernels.export.onnx import check_onnx, export_onnx, ort_session, run_onnx
from tests.quant.conftest import bert_inputs, make_mlp, outlier_inputs, tiny_bert

pytest.importorskip("onnxruntime", reason="needs onnxruntime (the quant extra)")
onnx = pytest.importorskip("onnx", reason="needs onnx (the quant extra)")

RTOL = 1e-3  # max|ort - torch| <= RTOL * max|torch| per output (measured: ~3e-7)

SLOW = pytest.mark.slow  # each export costs seconds on 2 cores; the default tier keeps one case per path
MLP_CASES = [
    ("rtn", "qdq", dict(group_size=32)),
    pytest.param("serq", "qdq", dict(serq_rank=16), marks=SLOW),
    ("stamp", "qdq", dict(stamp_k=16, hadamard=True)),
    pytest.param("rtn", "matmulnbits", dict(abits=16), marks=SLOW),
    ("serq", "matmulnbits", dict(serq_rank=16)),
    pytest.param("l2qer", "matmulnbits", dict(), marks=SLOW),
]


def _init_types(path) -> dict[str, int]:
    m = onnx.load(str(path))
    return {i.name: i.data_type for i in m.graph.initializer}


@pytest.mark.parametrize(("method", "mode", "kw"), MLP_CASES)
def test_mlp_onnx_matches_reference(method: str, mode: str, kw: dict, tmp_path) -> None:
    x = outlier_inputs((2, 64, 64))
    model = make_mlp()
    quantize_(model, QuantConfig(method=method, **{"wbits": 4, "abits": 8, **kw}), [x])
    path = export_onnx(model, (x,), tmp_path / "m.onnx", mode=mode)
    res = check_onnx(model, (x,), path, rtol=RTOL)
    assert res.ok, res
    assert res.sqnr_db > 80
    graph = onnx.load(str(path)).graph
    ops = {n.op_type for n in graph.node}
    if mode == "qdq":
        assert "DequantizeLinear" in ops and "MatMulNBits" not in ops
        assert onnx.TensorProto.INT4 in set(_init_types(path).values())
    else:
        assert "MatMulNBits" in ops and "DequantizeLinear" not in ops
    if not kw.get("hadamard"):  # (dense float rotation matrices would add their own size)
        n_params = sum(p.numel() for p in make_mlp().parameters())
        assert path.stat().st_size < 0.5 * 4 * n_params, "4-bit weights should shrink the file well below fp32"


@pytest.mark.parametrize("mode", ["qdq", "matmulnbits"])
def test_single_w4a4_layer_is_exact(mode: str, tmp_path) -> None:
    """With identical inputs the whole quantized layer (SERQ: permutation, flattening, 4-bit per-token
    activations, int4 weights, residual GEMM) computes the same numbers in ORT as in torch."""
    x = outlier_inputs((2, 32, 64))
    model = torch.nn.Sequential(torch.nn.Linear(64, 128))
    quantize_(model, QuantConfig(method="serq", wbits=4, abits=4, serq_rank=16, fold=False), [x])
    path = export_onnx(model, (x,), tmp_path / "l.onnx", mode=mode)
    res = check_onnx(model, (x,), path, rtol=1e-5)
    assert res.ok and res.sqnr_db > 100, res


def test_int8_weights_export_as_int8(tmp_path) -> None:
    x = torch.randn(1, 16, 64)
    model = make_mlp()
    quantize_(model, QuantConfig(method="rtn", wbits=8, abits=8), [x])
    path = export_onnx(model, (x,), tmp_path / "m8.onnx", mode="qdq")
    assert check_onnx(model, (x,), path).ok
    assert onnx.TensorProto.INT8 in set(_init_types(path).values())
    assert onnx.TensorProto.INT4 not in set(_init_types(path).values())
    with pytest.raises(ValueError, match="wbits <= 4"):
        export_onnx(model, (x,), tmp_path / "bad.onnx", mode="matmulnbits")


@pytest.mark.parametrize(("method", "mode"), [("serq", "qdq"), ("rtn", "matmulnbits")])
def test_bert_encoder_onnx_matches_reference(method: str, mode: str, tmp_path) -> None:
    model = tiny_bert()
    inp = bert_inputs()
    quantize_(model, QuantConfig(method=method, wbits=4, abits=8), [inp])
    path = export_onnx(model, inp, tmp_path / "bert.onnx", mode=mode)
    res = check_onnx(model, inp, path, rtol=RTOL)
    assert res.ok, res
    sess = ort_session(path)
    assert {i.name for i in sess.get_inputs()} == {"input_ids", "attention_mask"}
    assert len(run_onnx(sess, inp)) == 2  # last_hidden_state, pooler_output


def test_export_and_session_errors(tmp_path) -> None:
    model = make_mlp()
    x = torch.randn(1, 4, 64)
    with pytest.raises(ValueError, match="mode must be one of"):
        export_onnx(model, (x,), tmp_path / "m.onnx", mode="int4")
    with pytest.raises(ValueError, match="opset"):
        export_onnx(model, (x,), tmp_path / "m.onnx", opset=17)
    with pytest.raises(ValueError, match="ir_version"):
        export_onnx(model, (x,), tmp_path / "m.onnx", ir_version=14)
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(ValueError, match="onnxruntime-gpu"):
            ort_session(tmp_path / "m.onnx", providers=["CUDAExecutionProvider"])


@pytest.mark.gpu
def test_onnxruntime_gpu_runs_the_same_graph(tmp_path) -> None:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs onnxruntime-gpu with CUDA (CPU twin: test_mlp_onnx_matches_reference)")
    x = outlier_inputs((2, 64, 64))
    model = make_mlp()
    quantize_(model, QuantConfig(method="serq", wbits=4, abits=8, serq_rank=16), [x])
    for mode in ("qdq", "matmulnbits"):
        path = export_onnx(model, (x,), tmp_path / f"{mode}.onnx", mode=mode)
        res = check_onnx(model, (x,), path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"], rtol=1e-2)
        assert res.ok, res
