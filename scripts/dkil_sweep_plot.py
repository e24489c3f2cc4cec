#!/usr/bin/env python3
"""Plot TuKA's stability-plasticity trade-off over a sweep of DKIL's EWC weight (`lifelong_vln.py --dkil-ewc W`).

Reads lifelong_vln.json reports that hold a ``tuka_dkil`` result on the same task sequence (the weight is the
report's ``config.dkil_w_ewc``, 0.2 where a report predates the field) and draws, against the weight: the SR right
after learning the normal-light and the shifted-condition tasks, the final average SR, and the forgetting F-SR.
Prints one row per weight; the last stdout line is one JSON object with the rows.

    python scripts/dkil_sweep_plot.py docs/lifelong_vln_night/all_methods.json \
        docs/lifelong_vln_night/tuka_dkil_ewc*.json --out docs/lifelong_vln_night/dkil_sweep.png
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

DEFAULT_W_EWC = 0.2  # DKILConfig.w_ewc, for reports written before the weight was recorded


def sweep_row(report: dict[str, Any], source: str = "") -> dict[str, Any]:
    """The trade-off figures of a report's ``tuka_dkil`` result."""
    res = report.get("results", {}).get("tuka_dkil")
    if res is None:
        raise ValueError(f"{source}: no tuka_dkil result")
    tasks, sr = report["tasks"], res["matrices"]["sr"]
    after = [sr[i][i] for i in range(len(tasks))]
    normal = [a for a, t in zip(after, tasks) if t.endswith("-normal")]
    shifted = [a for a, t in zip(after, tasks) if not t.endswith("-normal")]
    mean = lambda xs: float(sum(xs) / len(xs)) if xs else math.nan  # noqa: E731
    return {"w_ewc": float(report.get("config", {}).get("dkil_w_ewc", DEFAULT_W_EWC)), "source": source,
            "after_normal": mean(normal), "after_shifted": mean(shifted), "avg_sr": float(res["avg"]["sr"]),
            "f_sr": res["forgetting"]["sr"]["relative"]}


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = [r["w_ewc"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, label, style in (("after_normal", "SR right after, normal-light tasks", "o-"),
                              ("after_shifted", "SR right after, shifted tasks", "s-"),
                              ("avg_sr", "final average SR", "^--")):
        a.plot(w, [r[key] for r in rows], style, label=label)
    a.set(xlabel="DKIL EWC weight (symlog)", ylabel="SR", title="What TuKA learns")
    a.set_xscale("symlog", linthresh=1e-3)
    a.legend(fontsize=8)
    b.plot(w, [r["f_sr"] if r["f_sr"] is not None else math.nan for r in rows], "o-", color="C3")
    b.set_xscale("symlog", linthresh=1e-3)
    b.set(xlabel="DKIL EWC weight (symlog)", ylabel="F-SR (relative)", title="What TuKA forgets")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+", help="lifelong_vln.json files with a tuka_dkil result")
    p.add_argument("--out", type=Path, default=None, help="PNG to write (default: none, print only)")
    a = p.parse_args(argv)
    rows, tasks = [], None
    try:
        for path in a.reports:
            report = json.loads(Path(path).read_text())
            if tasks is not None and report.get("tasks") != tasks:
                raise ValueError(f"{path}: another task sequence ({report.get('tasks')} vs {tasks})")
            tasks = report.get("tasks")
            rows.append(sweep_row(report, path))
    except (OSError, KeyError, json.JSONDecodeError, ValueError) as exc:
        p.error(f"{exc.__class__.__name__}: {exc}")
    weights = [r["w_ewc"] for r in rows]
    if len(set(weights)) != len(weights):
        p.error(f"one report per weight, got weights {weights}")
    rows.sort(key=lambda r: r["w_ewc"])
    for r in rows:
        f = "-" if r["f_sr"] is None else f"{r['f_sr']:.2f}"
        print(f"w_ewc {r['w_ewc']:<6g} right after: normal {r['after_normal']:.2f}, shifted {r['after_shifted']:.2f}; "
              f"final avg SR {r['avg_sr']:.2f}; F-SR {f}")
    if a.out is not None:
        plot(rows, a.out)
    print(json.dumps({"rows": rows, "out": str(a.out) if a.out else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
