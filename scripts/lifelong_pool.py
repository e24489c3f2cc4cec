#!/usr/bin/env python
"""Pool ``benchmarks/lifelong_vln.py`` reports over task orders: per method, the average SR over every task of
every order with its binomial standard error, F-SR per order, and each method's lead over a reference method on
the orders both ran and over the un-adapted base navigator, in standard errors of the difference. On an order
where both sides kept each held-out episode's outcome (``final_success`` and the references' ``success``, reports
since 2026-12-07), the difference's variance is paired (same episodes on both sides); on the others it is the
unpaired one from each side's binomial variance. Each (order, task) counts as independent of the others.

Reports must share the protocol (base, scenes, conditions, episodes, steps, ...); they may differ in the task
order and in method settings (a method run with other settings, e.g. TuKA's ``routing_memory``, is its own row).
Writes ``OUT/lifelong_pool.{json,md,png}``; the last stdout line is one JSON object.

    python scripts/lifelong_pool.py docs/lifelong_vln_guarded/order*.json --reference seq_lora --out /tmp/pool
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lifelong_report import (  # noqa: E402
    binomial_var,
    clean_json,
    config_with_defaults,
    paired_terms,
    protocol_differences,
    report_references,
    sr_se,
)

#: the settings each method reads, so that a variant is named only by what changes that method
READS = {"seq_lora": ("lora_rank",), "oracle_multi_lora": ("lora_rank",),
         "ewc_lora": ("lora_rank", "ewc_lambda", "fisher_batches")}
TUKA_READS = ("tuka_ranks", "dkil_w_ewc", "dkil_anchor_reused", "dkil_core_fisher", "fisher_batches",
              "routing_memory", "tuka_init_jitter")
#: settings that belong to one method, not to the protocol: they may differ between reports and name a variant
METHOD_KEYS = tuple(dict.fromkeys(k for keys in (*READS.values(), TUKA_READS) for k in keys))
#: settings that may differ between reports without making them incomparable
FREE_KEYS = ("methods", "order_seed", "full_matrix", *METHOD_KEYS)


@dataclass
class Row:
    """One method variant's final per-task SRs and F-SR, by task order."""

    name: str
    final_sr: dict[int, list[float]] = field(default_factory=dict)
    forgetting: dict[int, float | None] = field(default_factory=dict)
    #: per order, each task's held-out episode outcomes after the last task (absent in older reports)
    success: dict[int, list[list[int]]] = field(default_factory=dict)


def _variants(entries: list[tuple[str, dict]]) -> list[str]:
    """A row name per ``(method, config)``: the method, plus the settings it reads whose values differ between its
    reports (``tuka_dkil[dkil_core_fisher=pair,routing_memory=2048]``), so each setting of a method is its own row."""
    names = []
    for method, cfg in entries:
        reads = READS.get(method, TUKA_READS if method.startswith("tuka") else METHOD_KEYS)
        varying = [k for k in reads if len({json.dumps(c.get(k)) for m, c in entries if m == method}) > 1]
        names.append(f"{method}[{','.join(f'{k}={cfg.get(k)}' for k in varying)}]" if varying else method)
    return names


def load(paths: list[str]) -> tuple[dict[str, Row], Row, int, dict]:
    """Rows by variant, the base navigator's (per-task SR and episode outcomes by order; no forgetting), episodes
    per task and the shared protocol."""
    from agents.core.io import read_json_object

    reports = [read_json_object(p, required=("tasks", "config", "results")) for p in paths]
    first = config_with_defaults(reports[0]["config"])
    base = Row("base")
    tasks_by_order: dict[int, list[str]] = {}
    found = []  # (path, order, method, config, result)
    for path, rep in zip(paths, reports):
        cfg = config_with_defaults(rep["config"])
        diff = protocol_differences(reports[0], rep, ignore=FREE_KEYS)
        if diff:
            raise ValueError(f"{path}: reports to pool must share the protocol; it differs from {paths[0]} in "
                             f"{', '.join(diff)}")
        order = int(cfg["order_seed"])
        if tasks_by_order.setdefault(order, rep["tasks"]) != rep["tasks"]:
            raise ValueError(f"{path}: order {order} has another task sequence than an earlier report")
        refs = report_references(rep)
        if "base" in refs:  # the same episodes in every report of an order: the first one's, preferring outcomes
            srs = [float(refs["base"][t]["sr"]) for t in rep["tasks"]]
            outs = _outcomes(path, "base", [refs["base"][t]["success"] for t in rep["tasks"]], srs, "success") if all(
                "success" in refs["base"][t] for t in rep["tasks"]) else None
            if order not in base.final_sr or (outs is not None and order not in base.success):
                base.final_sr[order] = srs
                if outs is not None:
                    base.success[order] = outs
        found += [(path, order, method, cfg, res) for method, res in rep["results"].items()]
    rows: dict[str, Row] = {}
    for (path, order, _, _, res), name in zip(found, _variants([(m, c) for _, _, m, c, _ in found])):
        row = rows.setdefault(name, Row(name))
        if order in row.final_sr:
            raise ValueError(f"{path}: {name} on order {order} appears twice")
        try:  # the SR matrix's last row: every task's SR after the last one was learnt
            row.final_sr[order] = [float(v) for v in res["matrices"]["sr"][-1]]
            row.forgetting[order] = res["forgetting"]["sr"]["relative"]
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"{path}: {name} has no complete final SR row and F-SR ({exc!r})") from None
        if res.get("final_success") is not None:
            row.success[order] = _outcomes(path, name, res["final_success"], row.final_sr[order])
    return rows, base, int(first["eval_per_task"]), first


def _outcomes(path: str, name: str, success: list, final_sr: list[float], key: str = "final_success"
              ) -> list[list[int]]:
    """A report's per-episode outcomes (``key``), checked against its SR row (each task's mean must be its SR)."""
    try:
        out = [[int(v) for v in task] for task in success]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {name}'s {key} is not lists of 0/1 per task ({exc!r})") from None
    if len(out) != len(final_sr) or any(not t or set(t) - {0, 1} or abs(sum(t) / len(t) - sr) > 1e-9
                                        for t, sr in zip(out, final_sr)):
        raise ValueError(f"{path}: {name}'s {key} does not match its final SR row")
    return out


def lead(row: Row, ref: Row, orders: list[int], n_eval: int) -> dict:
    """``row``'s average SR minus ``ref``'s on ``orders`` with its SE: paired on the orders where both kept every
    episode's outcome (the same episodes), unpaired (each side's binomial variance) on the others; the orders'
    variances add."""
    diffs: list[float] = []
    var, paired = 0.0, []
    for o in orders:
        if o in row.success and o in ref.success:
            means, v = paired_terms(row.success[o], ref.success[o])
            paired.append(o)
        else:
            means = [x - y for x, y in zip(row.final_sr[o], ref.final_sr[o])]
            v = binomial_var(row.final_sr[o], n_eval) + binomial_var(ref.final_sr[o], n_eval)
        diffs += means
        var += v
    d, se = sum(diffs) / len(diffs), math.sqrt(var) / len(diffs)
    return {"orders": orders, "diff": d, "se": se, "z": d / se if se > 0 else None, "paired": paired == orders,
            "paired_orders": paired}


def summarise(rows: dict[str, Row], base: Row, n_eval: int, reference: str | None) -> dict:
    """Pooled SR and SE per variant and, against ``reference`` and against the un-adapted base, the lead on shared
    orders in SEs of the difference."""
    out: dict = {"n_eval": n_eval, "methods": {}, "base": None}
    if base.final_sr:
        srs = [p for o in sorted(base.final_sr) for p in base.final_sr[o]]
        out["base"] = {"orders": sorted(base.final_sr), "sr": sum(srs) / len(srs), "se": sr_se(srs, n_eval),
                       "sr_by_order": {o: sum(v) / len(v) for o, v in sorted(base.final_sr.items())}}
    ref = rows.get(reference) if reference else None
    if reference and ref is None:
        raise ValueError(f"--reference {reference!r} is not one of {sorted(rows)}")
    for name, row in rows.items():
        orders = sorted(row.final_sr)
        srs = [p for o in orders for p in row.final_sr[o]]
        f = [row.forgetting[o] for o in orders if row.forgetting[o] is not None]
        entry = {"orders": orders, "tasks": len(srs), "sr": sum(srs) / len(srs), "se": sr_se(srs, n_eval),
                 "sr_by_order": {o: sum(row.final_sr[o]) / len(row.final_sr[o]) for o in orders},
                 "f_sr_by_order": {o: row.forgetting[o] for o in orders},
                 "f_sr": sum(f) / len(f) if f else None}
        shared = [o for o in orders if ref is not None and o in ref.final_sr]
        if ref is not None and row is not ref and shared:
            entry["vs_reference"] = lead(row, ref, shared, n_eval)
        with_base = [o for o in orders if o in base.final_sr]
        if with_base:
            entry["vs_base"] = lead(row, base, with_base, n_eval)
        out["methods"][name] = entry
    order = sorted(out["methods"], key=lambda n: (n != reference, n))  # the reference first, then by name
    out["methods"] = {n: out["methods"][n] for n in order}
    out["reference"] = reference
    return out


def table(s: dict) -> str:
    """The pooled table in markdown."""
    lines = ["| method | orders | tasks | avg SR ± SE | F-SR by order | mean F-SR | lead over the reference | "
             "lead over the base |", "|---|---|---|---|---|---|---|---|"]

    def cell(v: dict | None) -> str:
        if v is None:
            return "-"
        z = "n/a" if v["z"] is None else f"{v['z']:+.1f}"
        how = ", paired" if v.get("paired") else f", paired on {v['paired_orders']}" if v.get("paired_orders") else ""
        return f"{v['diff']:+.2f} ± {v['se']:.2f} ({z} SE{how}) on {v['orders']}"

    for name, e in s["methods"].items():
        fs = ", ".join("-" if v is None else f"{v:.2f}" for v in e["f_sr_by_order"].values())
        f = "-" if e["f_sr"] is None else f"{e['f_sr']:.2f}"
        ref = "reference" if name == s["reference"] else cell(e.get("vs_reference"))
        lines.append(f"| {name} | {e['orders']} | {e['tasks']} | {e['sr']:.2f} ± {e['se']:.2f} | {fs} | {f} | {ref} | "
                     f"{cell(e.get('vs_base'))} |")
    if s["base"]:
        b = s["base"]
        lines.append(f"| base, no adaptation | {b['orders']} | | {b['sr']:.2f} ± {b['se']:.2f} | | | | |")
    return "\n".join(lines)


def plot(s: dict, path: Path) -> None:
    """Average SR by order and pooled, with binomial error bars, per method (the base as a dashed line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    orders = sorted({o for e in s["methods"].values() for o in e["orders"]})
    groups = [*(f"order {o}" for o in orders), "pooled"]
    fig, ax = plt.subplots(figsize=(2.5 + 1.5 * len(groups), 4.2))
    width = 0.8 / max(len(s["methods"]), 1)
    for i, (name, e) in enumerate(s["methods"].items()):
        xs = [j for j, o in enumerate(orders) if o in e["orders"]] + [len(orders)]
        ys = [e["sr_by_order"][o] for o in orders if o in e["orders"]] + [e["sr"]]
        ax.bar([x + (i - (len(s["methods"]) - 1) / 2) * width for x in xs], ys, width, label=name)
        ax.errorbar(len(orders) + (i - (len(s["methods"]) - 1) / 2) * width, e["sr"], yerr=e["se"], color="k",
                    capsize=3)
    if s["base"]:  # the un-adapted base navigator on each order's tasks, and pooled
        b = s["base"]
        xs = [j for j, o in enumerate(orders) if o in b["sr_by_order"]] + [len(orders)]
        ys = [b["sr_by_order"][o] for o in orders if o in b["sr_by_order"]] + [b["sr"]]
        ax.hlines(ys, [x - 0.45 for x in xs], [x + 0.45 for x in xs], colors="grey", linestyles="--", lw=1.2,
                  label="base, no adaptation")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel("average SR after the last task")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("reports", nargs="+", help="lifelong_vln.json reports (any methods, any orders)")
    p.add_argument("--reference", default="seq_lora", help="the method (variant) the others are compared against; "
                   "'' for none (default: seq_lora)")
    p.add_argument("--out", type=Path, default=None, help="write lifelong_pool.{json,md,png} there")
    a = p.parse_args(argv)
    try:
        rows, base, n_eval, _ = load(a.reports)
        s = summarise(rows, base, n_eval, a.reference or None)
    except (ValueError, FileNotFoundError) as exc:
        p.error(str(exc))
    md = table(s)
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "lifelong_pool.json").write_text(json.dumps(clean_json({**s, "reports": a.reports}), indent=1))
        (a.out / "lifelong_pool.md").write_text(md + "\n")
        plot(s, a.out / "lifelong_pool.png")
    print(md)
    print(json.dumps(clean_json({"avg_sr": {m: e["sr"] for m, e in s["methods"].items()},
                             "f_sr": {m: e["f_sr"] for m, e in s["methods"].items()}})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
