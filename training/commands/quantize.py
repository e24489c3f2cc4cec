"""``allday quantize`` and ``allday export-onnx``: low-bit compression of a trained model and ONNX export.

``allday quantize --method serq --wbits 4 --abits 4 MODEL OUT`` quantizes MODEL (a transformers model directory
loadable with ``AutoModel``, or a ``torch.save``-d ``nn.Module``) with calibration inputs (``--calib`` text lines
for transformers models, else seeded random inputs) and writes OUT (``save_quantized`` files + how to rebuild the
float skeleton). ``allday export-onnx OUT model.onnx --mode qdq|matmulnbits`` exports it and checks ONNX Runtime
against PyTorch; the last stdout line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

METHODS_CLI = ("rtn", "smoothquant", "quarot", "stamp", "serq", "l2qer")
SOURCE_FILE = "source.json"
SKELETON_FILE = "float_module.pt"


def _load_model(src: str) -> tuple[Any, dict[str, Any]]:
    """The float model and a JSON-able description of how to rebuild it."""

    p = Path(src)
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"{p} has no config.json: not a transformers model directory")
        from transformers import AutoModel

        return AutoModel.from_pretrained(str(p)).eval(), {"kind": "transformers"}
    if not p.is_file():
        raise FileNotFoundError(f"model {src!r} not found (a transformers directory or a torch.save-d nn.Module)")
    return _load_module(p).eval(), {"kind": "torch"}


def _load_module(p: Path) -> Any:
    """A ``torch.save``-d ``nn.Module``; ``ValueError`` naming ``p`` for a truncated or foreign file."""
    import torch

    from agents.core.io import load_torch_file

    obj = load_torch_file(p, "torch.save-d module")
    if not isinstance(obj, torch.nn.Module):
        raise ValueError(f"{p} holds a {type(obj).__name__}, not an nn.Module")
    return obj


def _parse_shape(text: str | None) -> list[int]:
    if not text:
        raise ValueError("--input-shape is required for a torch module (e.g. --input-shape 4,64,128)")
    try:
        shape = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--input-shape must be comma-separated ints, got {text!r}") from None
    if not shape or any(v <= 0 for v in shape):
        raise ValueError(f"--input-shape must be positive ints, got {text!r}")
    return shape


def _calib_inputs(model: Any, src: dict[str, Any], args: argparse.Namespace) -> list[Any]:
    import torch

    g = torch.Generator().manual_seed(args.seed)
    if src["kind"] == "torch":
        shape = _parse_shape(args.input_shape)
        src["input_shape"] = shape
        return [torch.randn(*shape, generator=g) for _ in range(args.calib_batches)]
    src["seq_len"] = args.seq_len
    if args.calib:
        from transformers import AutoTokenizer

        lines = [t.strip() for t in Path(args.calib).read_text().splitlines() if t.strip()]
        if not lines:
            raise ValueError(f"--calib {args.calib} has no text lines")
        tok = AutoTokenizer.from_pretrained(args.model)
        text = " ".join(lines)  # long sequences, as STaMP needs (>= stamp_k tokens)
        enc = tok([text] * args.calib_batches, return_tensors="pt", truncation=True, max_length=args.seq_len,
                  padding="max_length")
        return [{k: v[i:i + 1] for k, v in enc.items()} for i in range(args.calib_batches)]
    vocab = int(getattr(model.config, "vocab_size", 1000))
    ids = torch.randint(0, vocab, (args.calib_batches, 1, args.seq_len), generator=g)
    return [{"input_ids": x, "attention_mask": torch.ones_like(x)} for x in ids]


def cmd_quantize(args: argparse.Namespace) -> int:
    from quant_kernels.api import QuantConfig, quantize_, quantized_layers, save_quantized
    from training.cli import print_json

    cfg = QuantConfig(method=args.method, wbits=args.wbits, abits=args.abits, group_size=args.group_size,
                      hadamard=args.hadamard, stamp_k=args.stamp_k, stamp_transform=args.stamp_transform,
                      serq_rank=args.serq_rank, serq_alpha=args.serq_alpha, smoothquant_alpha=args.alpha,
                      weight_quantizer=args.weight_quantizer,
                      include=tuple(args.include), exclude=tuple(args.exclude), fold=not args.no_fold)
    model, src = _load_model(args.model)
    calib = _calib_inputs(model, src, args)
    out = Path(args.out)
    if src["kind"] == "torch":
        import copy

        import torch

        out.mkdir(parents=True, exist_ok=True)
        torch.save(copy.deepcopy(model), out / SKELETON_FILE)  # the float architecture to load into
    quantize_(model, cfg, calib)
    save_quantized(model, out)
    if src["kind"] == "transformers":
        model.config.save_pretrained(str(out))
    (out / SOURCE_FILE).write_text(json.dumps({**src, "model": str(Path(args.model).resolve())}, indent=1))
    n = len(quantized_layers(model))
    size = (out / "quantized.safetensors").stat().st_size
    print_json({"out": str(out), "method": cfg.method, "wbits": cfg.wbits, "abits": cfg.abits,
                "layers": n, "bytes": size})
    return 0


def load_cli_quantized(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """Rebuild a model written by ``allday quantize`` (float skeleton + ``load_quantized``)."""

    from quant_kernels.api import load_quantized

    p = Path(path)
    sfile = p / SOURCE_FILE
    if not sfile.is_file():
        raise FileNotFoundError(f"{sfile} not found: {p} was not written by `allday quantize`")
    from agents.core.io import read_json_object

    src = read_json_object(sfile)
    if src.get("kind") == "transformers":
        from transformers import AutoConfig, AutoModel

        skeleton = AutoModel.from_config(AutoConfig.from_pretrained(str(p)))
    elif src.get("kind") == "torch":
        if "input_shape" not in src:
            raise ValueError(f"{sfile}: a torch model's source needs its input_shape")
        skeleton = _load_module(p / SKELETON_FILE)
    else:
        raise ValueError(f"{sfile}: unknown model kind {src.get('kind')!r}")
    return load_quantized(p, skeleton.eval()), src


def cmd_export(args: argparse.Namespace) -> int:
    import torch

    from quant_kernels.export.onnx import check_onnx, export_onnx
    from training.cli import print_json

    model, src = load_cli_quantized(args.input)
    g = torch.Generator().manual_seed(0)
    if src["kind"] == "torch":
        example: Any = (torch.randn(*src["input_shape"], generator=g),)
    else:
        seq = args.seq_len or int(src.get("seq_len", 128))
        ids = torch.randint(0, int(getattr(model.config, "vocab_size", 1000)), (args.batch, seq), generator=g)
        example = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    path = export_onnx(model, example, args.out, mode=args.mode, block_size=args.block_size)
    res = check_onnx(model, example, path, rtol=args.rtol, min_sqnr_db=args.min_sqnr)
    print_json({"out": str(path), "mode": args.mode, "bytes": path.stat().st_size, "ok": res.ok,
                "max_abs_err": res.max_abs_err, "rel_err": res.rel_err, "sqnr_db": res.sqnr_db})
    return 0 if res.ok else 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quantize", help="quantize a model (rtn, smoothquant, quarot, stamp, serq, l2qer)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="transformers model directory, or a torch.save-d nn.Module file")
    p.add_argument("out", metavar="OUT", help="output directory (quantized.safetensors + quant_config.json)")
    p.add_argument("--method", choices=METHODS_CLI, default="rtn", help="quantization method (default rtn)")
    p.add_argument("--wbits", type=int, default=4, help="weight bits, 2..16 (16 = float; default 4)")
    p.add_argument("--abits", type=int, default=8, help="activation bits, 2..16 (16 = float; default 8)")
    p.add_argument("--group-size", type=int, default=None, help="weight group size (default: per channel)")
    p.add_argument("--hadamard", action="store_true", help="add a random-Hadamard feature rotation")
    p.add_argument("--stamp-k", type=int, default=64, help="STaMP: transformed tokens kept at 8 bits (default 64)")
    p.add_argument("--stamp-transform", default="dwt", choices=("dwt", "dct", "wht"), help="STaMP transform")
    p.add_argument("--serq-rank", type=int, default=None, help="SERQ salient rank (default scaled to the layer)")
    p.add_argument("--alpha", type=float, default=0.5, help="SmoothQuant migration strength (default 0.5)")
    p.add_argument("--serq-alpha", type=float, default=0.5, help="SERQ flattening strength (1 = full; default 0.5)")
    p.add_argument("--weight-quantizer", choices=["rtn", "gptq"], default="rtn",
                   help="weight rounding: rtn (nearest) or gptq (Hessian-aware, uses the calibration inputs)")
    p.add_argument("--include", action="append", default=[], metavar="GLOB", help="only these modules (repeat)")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="skip these modules (repeat)")
    p.add_argument("--no-fold", action="store_true", help="never fold scales/permutations into previous ops")
    p.add_argument("--calib", default=None, help="text file (one sentence per line) for transformers models")
    p.add_argument("--calib-batches", type=int, default=4, help="calibration batches (default 4)")
    p.add_argument("--seq-len", type=int, default=128, help="calibration tokens per sequence (default 128)")
    p.add_argument("--input-shape", default=None, help="torch modules: calibration input shape, e.g. 4,64,128")
    p.add_argument("--seed", type=int, default=0, help="seed of random calibration inputs")
    p.set_defaults(func=cmd_quantize)

    e = sub.add_parser("export-onnx", help="export an `allday quantize` output to ONNX and check it in ORT",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("input", metavar="IN", help="directory written by `allday quantize`")
    e.add_argument("out", metavar="OUT", help="ONNX file to write")
    e.add_argument("--mode", choices=("qdq", "matmulnbits"), default="qdq",
                   help="qdq: int4/int8 DequantizeLinear; matmulnbits: com.microsoft 4-bit (default qdq)")
    e.add_argument("--block-size", type=int, default=32, help="MatMulNBits block size (default 32)")
    e.add_argument("--batch", type=int, default=1, help="example batch size (static shape; default 1)")
    e.add_argument("--seq-len", type=int, default=None, help="example tokens (default: the calibration length)")
    e.add_argument("--rtol", type=float, default=1e-3, help="ORT vs PyTorch tolerance, relative to max|ref|")
    e.add_argument("--min-sqnr", type=float, default=30.0,
                   help="or accept ORT vs PyTorch SQNR >= this many dB (4-bit activation code flips; default 30)")
    e.set_defaults(func=cmd_export)
