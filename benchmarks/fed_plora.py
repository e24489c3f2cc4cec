#!/usr/bin/env python
"""Fed-PLoRA vs FedIT (homogeneous rank R) / HETLoRA / FLoRA / FlexLoRA on identical data and client budgets.

Task: the generated 16-class instruction task (training/federated/data.py) on a tiny random-weight Llama with rank-16
adapters on q/k/v/o; clients with rank budgets {2,4,8,16}; IID and Dirichlet(0.3) non-IID splits. Runs the plain
loop (training/federated/loop.py): the same FedServer/client_round functions the Flower apps call, without the
transport, for speed. Reports per method and split: final test accuracy (mean of the last 3 rounds, median over
seeds), initialisation noise (max |f_client_start - f_global| on 32 local examples, mean over clients and rounds) and
bytes communicated (float32, down + up, whole run). --quick: < 1 min, last line JSON. Full mode also writes
docs/fed_plora.png (accuracy vs round) and docs/fed_plora_table.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from pathlib import Path

import numpy as np

METHODS = ["fedit", "fedplora", "hetlora", "flora", "flexlora"]
SPLITS = ["iid", "dirichlet"]
DOCS = Path(__file__).resolve().parents[1] / "docs"


def run_one(method: str, split: str, seed: int, a: argparse.Namespace) -> dict:
    from training.federated.config import FedConfig
    from training.federated.loop import run_plain

    cfg = FedConfig(method=method, split=split, seed=seed, rounds=a.rounds, num_clients=a.clients,
                    fraction=a.fraction, min_clients=2, examples_per_client=a.examples, test_size=a.test_size,
                    local_steps=a.local_steps, batch_size=16, lr=a.lr, budgets=[2, 4, 8, 16], rank=16)
    t = time.perf_counter()
    server = run_plain(cfg)
    h = server.history
    acc = [r.accuracy for r in h]
    return {"method": method, "split": split, "seed": seed, "acc_curve": acc,
            "final_acc": float(np.mean(acc[-3:])), "init_noise": float(np.nanmean([r.init_noise for r in h])),
            "bytes": int(sum(r.down_bytes + r.up_bytes for r in h)), "seconds": time.perf_counter() - t}


def summarise(rows: list[dict]) -> dict:
    out: dict = {}
    for split in SPLITS:
        for m in METHODS:
            rs = [r for r in rows if r["method"] == m and r["split"] == split]
            if not rs:
                continue
            out.setdefault(split, {})[m] = {
                "acc": round(float(np.median([r["final_acc"] for r in rs])), 4),
                "acc_min": round(min(r["final_acc"] for r in rs), 4),
                "acc_max": round(max(r["final_acc"] for r in rs), 4),
                "init_noise": float(f"{np.median([r['init_noise'] for r in rs]):.3g}"),
                "mbytes": round(float(np.median([r["bytes"] for r in rs])) / 1e6, 3),
            }
    return out


def write_docs(rows: list[dict], summary: dict, a: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, split in zip(axes, SPLITS):
        for m in METHODS:
            curves = np.array([r["acc_curve"] for r in rows if r["method"] == m and r["split"] == split])
            if len(curves):
                ax.plot(np.arange(1, curves.shape[1] + 1), np.median(curves, 0), label=m,
                        lw=2.5 if m == "fedplora" else 1.3, ls="--" if m == "fedit" else "-")
        ax.set_title(f"{split} ({a.clients} clients, {a.fraction:.0%} per round)")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (median over seeds)")
    axes[1].legend()
    fig.suptitle("Fed-PLoRA vs heterogeneous-rank baselines (budgets {2,4,8,16}, R=16); fedit = homogeneous R")
    fig.tight_layout()
    fig.savefig(DOCS / "fed_plora.png", dpi=110)
    lines = [
        f"Fed-PLoRA benchmark (`python benchmarks/fed_plora.py`), {time.strftime('%Y-%m-%d')}, 2-core CPU box.",
        f"{a.clients} clients, {a.fraction:.0%} sampled per round, {a.rounds} rounds, {a.local_steps} local AdamW "
        f"steps (lr {a.lr}), {a.examples} examples/client, budgets {{2,4,8,16}}, R=16, seeds {a.seeds}.",
        "Accuracy: mean of the last 3 rounds, median [min, max] over seeds. Init noise: max |f_client_start - "
        "f_global| (logits). Bytes: float32 down + up over the whole run.",
        "",
        "| split | method | accuracy | init noise | MB communicated |",
        "|---|---|---|---|---|",
    ]
    for split, per in summary.items():
        for m, s in per.items():
            lines.append(f"| {split} | {m} | {s['acc']:.3f} [{s['acc_min']:.3f}, {s['acc_max']:.3f}] | "
                         f"{s['init_noise']:.3g} | {s['mbytes']:.1f} |")
    (DOCS / "fed_plora_table.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10 clients, 3 rounds, 1 seed (< 1 min on a quiet 2-core box)")
    ap.add_argument("--clients", type=int, default=None, help="clients (default 30, quick 10)")
    ap.add_argument("--fraction", type=float, default=None, help="sampled per round (default 0.2, quick 0.2)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 25, quick 3)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 0 1, quick 0)")
    ap.add_argument("--local-steps", type=int, default=10)
    ap.add_argument("--examples", type=int, default=48, help="examples per client")
    ap.add_argument("--test-size", type=int, default=None, help="test examples (default 400, quick 128)")
    ap.add_argument("--lr", type=float, default=5e-3)
    ap.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    ap.add_argument("--splits", nargs="+", default=SPLITS, choices=SPLITS)
    ap.add_argument("--no-docs", action="store_true", help="full mode: do not write docs/fed_plora.{png,_table.md}")
    a = ap.parse_args()
    a.clients = a.clients or (10 if a.quick else 30)
    a.fraction = a.fraction or 0.2
    a.rounds = a.rounds or (3 if a.quick else 25)
    a.seeds = a.seeds or ([0] if a.quick else [0, 1])
    a.test_size = a.test_size or (128 if a.quick else 400)
    logging.basicConfig(level=logging.ERROR)
    from tqdm import tqdm

    jobs = [(m, s, seed) for seed in a.seeds for s in a.splits for m in a.methods]
    rows = []
    t0 = time.perf_counter()
    for m, s, seed in tqdm(jobs, desc="fed_plora runs", disable=a.quick):
        r = run_one(m, s, seed, a)
        rows.append(r)
        print(f"{s:>9} {m:>8} seed {seed}: acc {r['final_acc']:.3f}  init-noise {r['init_noise']:.3g}  "
              f"{r['bytes'] / 1e6:.2f} MB  ({r['seconds']:.1f} s)", flush=True)
    summary = summarise(rows)
    if not a.quick and not a.no_docs:
        write_docs(rows, summary, a)
    out = {"benchmark": "fed_plora", "date": time.strftime("%Y-%m-%d"), "machine": platform.machine(),
           "cpus": os.cpu_count(), "quick": a.quick, "clients": a.clients, "fraction": a.fraction,
           "rounds": a.rounds, "seeds": a.seeds, "seconds": round(time.perf_counter() - t0, 1),
           "accuracy": {s: {m: v["acc"] for m, v in per.items()} for s, per in summary.items()},
           "summary": summary}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
