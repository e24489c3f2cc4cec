#!/usr/bin/env python3
"""Compare lifelong runs on their offline matrices (`lifelong_vln.py --offline-samples N`), grouped by task order.

Reads lifelong_vln.json reports (any mix of methods, orders and DKIL settings) and, for every method result with
offline figures, takes the mean teacher-forced token accuracy right after learning each task, at the end, and its
relative forgetting F; TuKA variants are labelled by their Tucker ranks and DKIL ablations. Draws two panels
(final token accuracy with the base navigator's as a line, and F) with one group of bars per task order, prints a
markdown table, and prints one JSON object with the rows last.

    python scripts/offline_forgetting_plot.py docs/lifelong_vln_dkil/*.json docs/lifelong_vln_offline/order*.json \
        --out docs/lifelong_vln_dkil/offline_forgetting.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def variant(method: str, config: dict[str, Any]) -> str:
    """A method's label: TuKA carries its ranks and the DKIL ablations that were on."""
    if method != "tuka_dkil":
        return method
    ranks = ",".join(str(r) for r in config.get("tuka_ranks", [8, 8, 4, 4]))
    extra = [name for name, on in (("anchor reused", config.get("dkil_anchor_reused", False)),
                                   ("pair EWC", config.get("dkil_core_fisher", "diagonal") == "pair")) if on]
    return f"tuka_dkil {ranks}" + (f" + {' + '.join(extra)}" if extra else "")


def rows_of(report: dict[str, Any], source: str = "") -> list[dict[str, Any]]:
    """One row per method result of ``report`` that has offline figures (none: ``[]``)."""
    config, tasks = report.get("config", {}), report.get("tasks", [])
    base = report.get("references", {}).get("base", {})
    base_acc = [base[t]["token_acc"] for t in tasks if "token_acc" in base.get(t, {})]
    rows = []
    for method, res in report.get("results", {}).items():
        off = res.get("offline")
        if not off:
            continue
        after = off["right_after"]["token_acc"]
        rows.append({"order": "order " + str(config.get("order_seed", "?")) + ": " + ", ".join(tasks),
                     "variant": variant(method, config), "source": source,
                     "after": sum(after) / len(after), "final": off["avg"]["token_acc"],
                     "forgetting": off["forgetting"]["token_acc"], "avg_sr": res["avg"]["sr"],
                     "base": sum(base_acc) / len(base_acc) if base_acc else None})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| task order | method | token acc. right after | final | F (rel.) | closed-loop avg SR |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['order']} | {r['variant']} | {r['after']:.3f} | {r['final']:.3f} | {r['forgetting']:.3f} | "
              f"{r['avg_sr']:.2f} |" for r in rows]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    orders = list(dict.fromkeys(r["order"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    width = 0.8 / len(variants)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for j, v in enumerate(variants):
        for ax, key in zip(axes, ("final", "forgetting")):
            xs = [i + j * width for i, o in enumerate(orders) for r in rows if r["order"] == o and r["variant"] == v]
            ys = [r[key] for o in orders for r in rows if r["order"] == o and r["variant"] == v]
            ax.bar(xs, ys, width, label=v, color=f"C{j}")
    for i, o in enumerate(orders):
        base = next((r["base"] for r in rows if r["order"] == o and r["base"] is not None), None)
        if base is not None:
            axes[0].hlines(base, i - width / 2, i + 0.8 - width / 2, colors="k", linestyles="--",
                           label="base navigator" if i == 0 else None)
    labels = [o.split(":")[0] for o in orders]
    for ax, title, ylabel in ((axes[0], "Offline token accuracy after the last task", "token accuracy"),
                              (axes[1], "Offline forgetting (relative drop)", "F (token accuracy)")):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(orders))], labels)
        ax.set(title=title, ylabel=ylabel)
    lo = min(min(r["final"] for r in rows), *(r["base"] for r in rows if r["base"] is not None))
    axes[0].set_ylim(max(0.0, lo - 0.05), 1.0)
    axes[0].legend(fontsize=7, loc="upper center", ncol=2)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+", help="lifelong_vln.json reports with offline figures")
    p.add_argument("--out", type=Path, required=True, help="PNG to write")
    a = p.parse_args(argv)
    rows = []
    for path in a.reports:
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            p.error(f"{path}: not a readable JSON report ({exc})")
        rows += rows_of(report, path)
    if not rows:
        p.error("no report has offline figures (run lifelong_vln.py with --offline-samples > 0)")
    kept: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:  # the same run merged into two reports counts once
        first = kept.setdefault((r["order"], r["variant"]), r)
        if first is not r and (first["final"], first["after"]) != (r["final"], r["after"]):
            p.error(f"{r['source']} and {first['source']}: two different {r['variant']} runs of {r['order']}")
    rows = sorted(kept.values(), key=lambda r: (r["order"], r["variant"]))
    plot(rows, a.out)
    print(table(rows))
    print(json.dumps({"rows": rows, "out": str(a.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
