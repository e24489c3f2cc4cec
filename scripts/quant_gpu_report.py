#!/usr/bin/env python
"""Render the GPU part of a ``benchmarks/quant_speed.py`` run (the JSON line it prints last) as a table and a plot.

Per problem size: torch bf16 matmul, cuBLAS int8 (``torch._int_mm``), the Triton int GEMM at its default tiles
(W8A8, W4A8, W4A4, W4A4 + SERQ r=128) and the best and the old (even/odd halves) tilings of the GemmTiles sweep,
in ms and TOP/s. Refuses a file without GPU rows.

    python scripts/quant_gpu_report.py docs/quant_gpu_h200.json --md docs/quant_gpu_h200.md \\
        --png docs/quant_gpu_h200.png
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("quant_gpu_report")
OLD_TILES = "64x64x128w4s2h"  # even/odd K halves (two dots per step) on the first version's 64x64x128 tiles


def load_gpu(path: Path) -> dict[str, Any]:
    """The ``gpu`` part of a quant_speed JSON (the whole line, or a file whose last line is it)."""
    try:
        text = path.read_text().strip().splitlines()[-1]
        res = json.loads(text)
    except (OSError, IndexError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a quant_speed JSON line ({exc})") from exc
    gpu = res.get("gpu") if isinstance(res, dict) else None
    if not isinstance(gpu, dict) or not gpu.get("rows"):
        raise ValueError(f"{path}: no GPU rows (skipped: {gpu.get('skipped') if isinstance(gpu, dict) else gpu})")
    gpu["date"] = res.get("date", "?")
    return gpu


def _ms(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) else None


def table_rows(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per problem size with ms per implementation (None where not measured) and the TOP/s factor."""
    rows = []
    for r in gpu["rows"]:
        ops = 2 * r["m"] * r["k"] * r["n"]
        sweep = {k: v for k, v in r.get("tiles_w8a8_ms", {}).items() if isinstance(v, (int, float))}
        rows.append({
            "shape": f"{r['m']} x {r['k']} x {r['n']}", "ops": ops,
            "bf16": _ms(r.get("torch_bf16_ms")), "int8_cublas": _ms(r.get("torch_int_mm_ms")),
            "w8a8": _ms(r.get("triton_w8a8_gemm_ms")), "w4a8": _ms(r.get("triton_w4a8_gemm_ms")),
            "w4a4": _ms(r.get("triton_w4a4_gemm_ms")), "w4a4_serq": _ms(r.get("triton_w4a4_serq_r128_gemm_ms")),
            "w8a8_old_tiles": sweep.get(OLD_TILES), "w8a8_best": r.get("tiles_w8a8_best"),
            "w4a8_best": r.get("tiles_w4a8_best"),
        })
    return rows


COLUMNS = [("bf16", "torch bf16"), ("int8_cublas", "cuBLAS int8"), ("w8a8", "Triton W8A8"),
           ("w8a8_old_tiles", "W8A8, halves 64x64x128"), ("w4a8", "Triton W4A8"), ("w4a4", "Triton W4A4"),
           ("w4a4_serq", "W4A4 + SERQ r128")]


def render_md(gpu: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Markdown: ms (TOP/s) per implementation and size (``rows``: :func:`table_rows`), then the best tilings."""
    head = "| M x K x N | " + " | ".join(name for _, name in COLUMNS) + " |"
    lines = [f"Triton int GEMM on {gpu['device']} (torch {gpu.get('torch', '?')}, triton {gpu.get('triton', '?')}), "
             f"{gpu['date']}: median ms of {gpu.get('repeats', 30)} CUDA-event timings (TOP/s in brackets).", "", head,
             "|" + "---|" * (len(COLUMNS) + 1)]
    for r in rows:
        cells = [f"{r[k]:.3f} ({r['ops'] / r[k] / 1e9:.0f})" if r[k] else "-" for k, _ in COLUMNS]
        lines.append(f"| {r['shape']} | " + " | ".join(cells) + " |")
    checked = not any("triton_w8a8_gemm_checked_ms" in r for r in gpu["rows"])
    lines += ["", "Triton columns: default tiles, "
              + ("with the code range checks of `int_gemm`, which wait for the GPU."
                 if checked else "`check_codes=False` (no wait for the GPU in the wrapper).")]
    lines += ["", "Best tiling of the sweep per size: "
              + "; ".join(f"{r['shape']}: W8A8 {r['w8a8_best']}, W4A8 {r['w4a8_best']}" for r in rows) + "."]
    return "\n".join(lines) + "\n"


def render_png(gpu: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> None:
    """Grouped bars of TOP/s per implementation and size (``rows``: :func:`table_rows`, log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / len(COLUMNS)
    for i, (key, name) in enumerate(COLUMNS):
        xs = [j + i * width for j, r in enumerate(rows) if r[key]]
        ys = [r["ops"] / r[key] / 1e9 for r in rows if r[key]]
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks([j + width * (len(COLUMNS) - 1) / 2 for j in range(len(rows))], [r["shape"] for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("TOP/s (2 M K N / time)")
    ax.set_title(f"int GEMM vs bf16 on {gpu['device']} ({gpu['date']})")
    ax.legend(fontsize=7, ncol=4)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", type=Path, help="quant_speed.py output (its last line is read)")
    ap.add_argument("--md", type=Path, default=None, help="write the Markdown table here (default: stdout)")
    ap.add_argument("--png", type=Path, default=None, help="write the bar plot here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        gpu = load_gpu(args.json)
    except ValueError as exc:
        ap.error(str(exc))
    rows = table_rows(gpu)
    md = render_md(gpu, rows)
    if args.md:
        args.md.write_text(md)
        log.info("wrote %s", args.md)
    else:
        sys.stdout.write(md)
    if args.png:
        render_png(gpu, rows, args.png)
        log.info("wrote %s", args.png)
    big = max(rows, key=lambda r: r["ops"])
    print(json.dumps({"device": gpu["device"], "largest": big["shape"],
                      "w8a8_vs_bf16": big["bf16"] / big["w8a8"] if big["w8a8"] and big["bf16"] else None,
                      "w8a8_vs_cublas_int8": (big["int8_cublas"] / big["w8a8"]
                                              if big["w8a8"] and big["int8_cublas"] else None)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
