#!/usr/bin/env python
"""FedPTE vs FedAvg vs FedProto-style fixed prototypes on cross-domain clients (one client per domain):
generated digit styles (mnist/usps/svhn/synth/mnistm-like) and simulator furniture views under the all-day
conditions (normal/low_light/overexposure/scattering). Test accuracy of the global model per domain and the
mean over domains. Runs the plain-function loop (training.federated.fedpte.loop: the same client_round /
server_round the Flower app calls, without messaging). Last stdout line: one JSON object."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")

METHODS = ("fedavg", "fedproto", "fedpte")


def run(dataset: str, ds_kwargs: dict, rounds: int, seeds: list[int], methods: list[str], lam: float) -> dict:
    from training.federated.fedpte.config import ClientConfig
    from training.federated.fedpte.data import load_domains
    from training.federated.fedpte.loop import FedRunConfig, run_federated

    t0 = time.time()
    domains = load_domains(dataset, **ds_kwargs)
    print(f"{dataset}: {len(domains)} domains, train {[len(d.y_train) for d in domains]}, "
          f"test {[len(d.y_test) for d in domains]} ({time.time() - t0:.1f}s)", flush=True)
    out = {}
    for m in methods:
        per_seed = []
        for s in seeds:
            t = time.time()
            hist = run_federated(domains, FedRunConfig(method=m, rounds=rounds, seed=s,
                                                       client=ClientConfig(lam=lam, seed=s)))
            per_seed.append(hist)
            print(f"  {m:9s} seed {s}: mean acc {hist[-1]['mean_accuracy']:.4f} "
                  f"{ {k: round(v, 3) for k, v in hist[-1]['accuracy'].items()} } "
                  f"protos/class {list(hist[-1]['prototypes'].values()) or '-'} ({time.time() - t:.1f}s)", flush=True)
        names = [d.name for d in domains]
        out[m] = {
            "mean_accuracy": round(statistics.median(h[-1]["mean_accuracy"] for h in per_seed), 4),
            "per_domain": {n: round(statistics.median(h[-1]["accuracy"][n] for h in per_seed), 4) for n in names},
            "curve": [round(statistics.median(h[r]["mean_accuracy"] for h in per_seed), 4) for r in range(rounds)],
            "prototypes_per_class": per_seed[0][-1]["prototypes"],
        }
    return out


def table(results: dict) -> str:
    lines = []
    for ds, res in results.items():
        doms = list(next(iter(res.values()))["per_domain"])
        lines.append(f"**{ds}**\n")
        lines.append("| method | " + " | ".join(doms) + " | mean |")
        lines.append("|---" * (len(doms) + 2) + "|")
        for m, r in res.items():
            lines.append(f"| {m} | " + " | ".join(f"{100 * r['per_domain'][d]:.1f}" for d in doms)
                         + f" | **{100 * r['mean_accuracy']:.1f}** |")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.8))
    axes = [axes] if len(results) == 1 else axes
    for ax, (ds, res) in zip(axes, results.items()):
        for m, r in res.items():
            ax.plot(range(1, len(r["curve"]) + 1), [100 * a for a in r["curve"]], marker="o", label=m)
        ax.set_title(f"{ds}: mean test accuracy over domains")
        ax.set_xlabel("round")
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small data, 2 rounds (under a minute on 2 idle cores)")
    ap.add_argument("--datasets", default="digits,sim_views", help="comma list of: digits, sim_views")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma list of: " + ", ".join(METHODS))
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 8, quick 2)")
    ap.add_argument("--seeds", type=int, default=1, help="seeds per method (medians are reported)")
    ap.add_argument("--lam", type=float, default=1.0, help="weight of the prototype loss term")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--cache-dir", default="runs/fedpte_cache", help="rendered sim_views cache")
    ap.add_argument("--plot", default="docs/fedpte.png", help="PNG written in full mode")
    ap.add_argument("--table", default="runs/fedpte/table.md", help="markdown table written in full mode")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        ap.error(f"unknown method(s) {bad}; known: {list(METHODS)}")
    rounds = args.rounds or (2 if args.quick else 8)
    specs = {
        "digits": {"n_train": 120, "n_test": 100} if args.quick else {"n_train": 400, "n_test": 300},
        "sim_views": ({"n_houses": 6, "views_per_class": 10, "cache_dir": args.cache_dir} if args.quick
                      else {"cache_dir": args.cache_dir}),
    }
    if args.quick:  # use the full rendered set when it is already cached (rendering it takes minutes)
        from training.federated.fedpte.data.sim_views import sim_views_cache_path

        if sim_views_cache_path(args.cache_dir).is_file():  # the full default set's file, not any cached set
            specs["sim_views"] = {"cache_dir": args.cache_dir}
    t0 = time.time()
    results = {}
    for ds in [d for d in args.datasets.split(",") if d]:
        if ds not in specs:
            ap.error(f"unknown dataset {ds!r}; known: {list(specs)}")
        results[ds] = run(ds, specs[ds], rounds, list(range(args.seeds)), methods, args.lam)
    md = table(results)
    print(md)
    if not args.quick:
        plot(results, args.plot)
        os.makedirs(os.path.dirname(args.table) or ".", exist_ok=True)
        with open(args.table, "w") as f:
            f.write(md)
        print(f"wrote {args.plot} and {args.table}")
    summary = {"benchmark": "fedpte", "quick": args.quick, "rounds": rounds, "seeds": args.seeds,
               "seconds": round(time.time() - t0, 1),
               "accuracy": {ds: {m: r["mean_accuracy"] for m, r in res.items()} for ds, res in results.items()},
               "per_domain": {ds: {m: r["per_domain"] for m, r in res.items()} for ds, res in results.items()},
               "prototypes_per_class": {ds: res.get("fedpte", {}).get("prototypes_per_class") for ds, res in
                                        results.items()}}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
