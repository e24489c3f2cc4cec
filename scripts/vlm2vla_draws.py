#!/usr/bin/env python
"""Combine full runs of ``benchmarks/vlm2vla.py`` (one per seed: a *draw*) into one table and plot.

Each argument is a run's ``results.json`` or its ``--out`` folder (``<out>/full/results.json`` is read), or several
runs of one draw joined by ``+`` (methods fine-tuned in parallel processes from the same pre-trained model). Runs with
different settings are refused (``--allow-mixed`` combines them anyway and lists the differences). Writes a Markdown
table (per draw and mean +- sd of VQA retention, the VQA skill above the blind baseline kept, Lift success free /
constrained, malformed rate, the blind floor) and a PNG; the last stdout line is one JSON object with the means and
how many draws keep the paper's ordering. Where the runs record which episodes each rollout lifted, the two codecs are
compared with each other and with the blind replay on the same episodes: per draw (mean difference, paired t) and
per episode pooled over the draws (the episodes only one side lifts, exact sign test).

    python scripts/vlm2vla_draws.py runs/s0 runs/s1 runs/s2 --labels 0,1,2 --md docs/vlm2vla_draws.md \\
        --png docs/vlm2vla_draws.png
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agents.core.config import differing_keys  # noqa: E402
from training.vla.evaluate import skill_retained  # noqa: E402

log = logging.getLogger("vlm2vla_draws")
LANG, AT = "VLM2VLA", "VLM2VLA-AT"


def load_draw(path: Path) -> dict[str, Any]:
    """A run's results (``path`` = the JSON file or the run's ``--out`` folder); ``ValueError`` if it is not one."""
    f = path / "full" / "results.json" if path.is_dir() else path
    try:
        res = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{f}: not a readable vlm2vla results file ({exc})") from exc
    if not isinstance(res, dict) or res.get("mode") != "full" or not isinstance(res.get("methods"), dict):
        raise ValueError(f"{f}: not the results of a full benchmarks/vlm2vla.py run")
    missing = [k for k in ("settings", "vqa_pretrained") if not isinstance(res.get(k), dict)]
    missing += [f"methods.{m}.{k}" for m, v in res["methods"].items()
                for k in ("retention", "success", "malformed_rate") if not isinstance(v, dict) or k not in v]
    if missing:
        raise ValueError(f"{f}: incomplete results (missing {', '.join(missing)})")
    return res


def load_parts(spec: str) -> dict[str, Any]:
    """One draw from ``spec``: a run (as :func:`load_draw` reads it) or several runs of the same draw joined by
    ``+`` (each fine-tuned other methods from the same pre-trained model, e.g. ``--methods`` in parallel
    processes); ``ValueError`` when they are not one draw (seed, settings, pre-trained model) or repeat a method."""
    paths = spec.split("+")
    out = load_draw(Path(paths[0]))  # freshly read: extended in place
    for x in paths[1:]:
        r = load_draw(Path(x))
        diff = differing_keys(out["settings"], r["settings"])
        if r.get("seed") != out.get("seed") or diff or r["vqa_pretrained"] != out["vqa_pretrained"]:
            what = diff or ["seed" if r.get("seed") != out.get("seed") else "pre-trained model"]
            raise ValueError(f"{x}: not the same draw as {paths[0]} ({', '.join(what)} differ)")
        twice = sorted(set(out["methods"]) & set(r["methods"]))
        if twice:
            raise ValueError(f"{x}: {', '.join(twice)} already in this draw")
        out["methods"].update(r["methods"])
    return out


def _mean_sd(xs: list[float], pct: bool = False) -> str:
    if not xs:
        return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    if pct:
        return f"{100 * statistics.fmean(xs):.0f}% +- {100 * sd:.0f}"
    return f"{statistics.fmean(xs):.2f} +- {sd:.2f}"


def _skill(r: dict[str, Any], x: dict[str, Any] | None) -> float | None:
    """The method's VQA skill above the blind baseline kept (``training.vla.evaluate.skill_retained``); ``None``
    when the run did not record what it needs (runs before the majority baseline was saved) or it is undefined."""
    try:
        v = skill_retained(x["vqa"]["accuracy"], r["vqa_pretrained"]["accuracy"], r["vqa_majority_baseline"])
    except (KeyError, TypeError):
        return None
    return None if v != v else v


def sign_test(b: int, c: int) -> float:
    """Two-sided exact sign test (McNemar's exact test) of ``b`` against ``c`` discordant pairs: the chance of a
    split at least this uneven when either side of a discordant pair is equally likely."""
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n)


def paired(first: list[dict[str, Any] | None], second: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Lift successes of two rollouts of each draw on the same episodes (``succeeded`` seeds, ``episodes``):
    the per-draw difference in episodes (mean, sd, paired t over draws) and, pooled over draws, the episodes only
    the first lifts and only the second (exact sign test). ``None`` when no draw has both with their
    episode lists (runs written before ``succeeded`` was recorded)."""
    pairs = [(a, b) for a, b in zip(first, second)
             if a is not None and b is not None and "succeeded" in a and "succeeded" in b]
    if not pairs:
        return None
    diffs = [len(a["succeeded"]) - len(b["succeeded"]) for a, b in pairs]
    only_a = sum(len(set(a["succeeded"]) - set(b["succeeded"])) for a, b in pairs)
    only_b = sum(len(set(b["succeeded"]) - set(a["succeeded"])) for a, b in pairs)
    sd = statistics.stdev(diffs) if len(diffs) > 1 else float("nan")
    t = statistics.fmean(diffs) / (sd / math.sqrt(len(diffs))) if len(diffs) > 1 and sd > 0 else float("nan")
    return {"draws": len(pairs), "episodes": sum(int(a["episodes"]) for a, _ in pairs),
            "mean_diff": statistics.fmean(diffs), "sd_diff": sd, "t": t, "only_first": only_a, "only_second": only_b,
            "sign_p": sign_test(only_a, only_b)}


def summarize(draws: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per method: retention, free and constrained success, malformed rate per draw; the blind floor per draw; the
    number of draws where VLM2VLA retains more than VLM2VLA-AT and where each method beats the blind floor."""
    methods = list(dict.fromkeys(m for r in draws.values() for m in r["methods"]))
    out: dict[str, Any] = {"labels": list(draws), "methods": {}, "blind": [], "pretrained": [], "constant": []}
    for r in draws.values():
        out["blind"].append(r.get("blind_replay", {}).get("success"))
        out["pretrained"].append(r["vqa_pretrained"]["accuracy"])
        # the retention of a model answering each kind's most frequent answer (majority baseline / pre-trained)
        maj, pre = r.get("vqa_majority_baseline"), r["vqa_pretrained"]["accuracy"]
        out["constant"].append(maj / pre if isinstance(maj, float) and pre > 0 else None)
    for m in methods:
        rows = [r["methods"].get(m) for r in draws.values()]
        out["methods"][m] = {
            "retention": [x["retention"] if x else None for x in rows],
            "skill": [_skill(r, x) if x else None for r, x in zip(draws.values(), rows)],
            "success": [x["success"] if x else None for x in rows],
            "constrained": [x["constrained"]["success"] if x and "constrained" in x else None for x in rows],
            "malformed": [x["malformed_rate"] if x else None for x in rows],
            "above_blind": sum(1 for x, b in zip(rows, out["blind"]) if x and b is not None and x["success"] > b)}
    lang, at = out["methods"].get(LANG), out["methods"].get(AT)
    if lang and at:
        pairs = [(a, b) for a, b in zip(lang["retention"], at["retention"]) if a is not None and b is not None]
        out["lang_over_at_retention"] = sum(a > b for a, b in pairs)
        out["paired_draws"] = len(pairs)  # draws with both methods (a draw may lack one)
        pairs = [(a, b) for a, b in zip(lang["success"], at["success"]) if a is not None and b is not None]
        out["lang_over_at_success"] = sum(a > b for a, b in pairs)
    # each rollout per draw (None where a draw lacks it), compared on the same episodes
    ro = {m: [r["methods"].get(m) for r in draws.values()] for m in (LANG, AT) if m in out["methods"]}
    ro["the blind replay"] = [r.get("blind_replay") for r in draws.values()]
    comparisons = [(LANG, AT)] if lang and at else []
    comparisons += [(m, "the blind replay") for m in (LANG, AT) if m in ro]
    out["paired"] = {}
    for a, b in comparisons:
        res = paired(ro[a], ro[b])
        if res is not None:
            out["paired"][f"{a} - {b}"] = res
    return out


def markdown(s: dict[str, Any]) -> str:
    labels = s["labels"]
    head = "| method | measure | " + " | ".join(f"draw {x}" for x in labels) + " | mean +- sd |"
    lines = [head, "|---|---|" + "---|" * (len(labels) + 1)]

    def fmt(v: float | None, pct: bool) -> str:
        return "-" if v is None else (f"{100 * v:.0f}%" if pct else f"{v:.2f}")

    def add(name: str, measure: str, xs: list[float | None], pct: bool = False) -> None:
        vals = [x for x in xs if x is not None]
        lines.append(f"| {name} | {measure} | " + " | ".join(fmt(x, pct) for x in xs) + f" | {_mean_sd(vals, pct)} |")

    add("pre-trained", "VQA accuracy", s["pretrained"])
    for m, d in s["methods"].items():
        add(m, "VQA retained", d["retention"], pct=True)
        if any(x is not None for x in d["skill"]):
            add(m, "VQA skill above blind kept", d["skill"], pct=True)
        add(m, "Lift success (free)", d["success"])
        if any(x is not None for x in d["constrained"]):
            add(m, "Lift success (constrained)", d["constrained"])
        add(m, "malformed (free)", d["malformed"])
    if any(x is not None for x in s["constant"]):
        add("constant answers (majority per kind)", "VQA retained", s["constant"], pct=True)
    add("blind replay", "Lift success", s["blind"])
    lines += [""] + [f"- {m} above the blind floor (free) in {d['above_blind']} of "
                     f"{sum(x is not None for x in d['success'])} draws" for m, d in s["methods"].items()]
    if "lang_over_at_retention" in s:
        n = s["paired_draws"]
        lines.append(f"- {LANG} retains more VQA than {AT} in {s['lang_over_at_retention']} of {n} draws and succeeds "
                     f"more often in {s['lang_over_at_success']} of {n} (draws with both)")
    for name, d in s.get("paired", {}).items():
        a, b = name.split(" - ")
        lines.append(f"- Lift (free), {a} against {b} on the same episodes: {d['mean_diff']:+.1f} +- "
                     f"{d['sd_diff']:.1f} episodes per draw (paired t = {d['t']:.1f} over {d['draws']} draws); of "
                     f"{d['episodes']} episodes {d['only_first']} lifted by {a} only and {d['only_second']} by {b} "
                     f"only (exact sign test p = {d['sign_p']:.3g})")
    return "\n".join(lines) + "\n"


def plot(s: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(s["methods"])
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.4))
    for i, m in enumerate(names):
        d = s["methods"][m]
        for a, key, scale in ((ax[0], "retention", 100), (ax[1], "success", 100)):
            xs = [x for x in d[key] if x is not None]
            if xs:
                a.bar(i, scale * statistics.fmean(xs), 0.6, color="tab:blue" if key == "retention" else "tab:green",
                      alpha=0.5)
                a.scatter([i] * len(xs), [scale * x for x in xs], c="k", s=12, zorder=3)
    ax[0].axhline(85, ls="--", c="k", lw=1, label="paper's claim (85%)")
    const = [c for c in s["constant"] if c is not None]
    if const:
        ax[0].axhline(100 * statistics.fmean(const), ls=":", c="tab:red", lw=1.2, label="constant answers (mean)")
    ax[0].set_ylabel("VQA accuracy retained (%)")
    blind = [b for b in s["blind"] if b is not None]
    if blind:
        ax[1].axhline(100 * statistics.fmean(blind), ls=":", c="tab:red", lw=1.2, label="blind replay (mean)")
    ax[1].set_ylabel("Lift success, free generation (%)")
    ax[1].set_ylim(0, 100)
    for a in ax:
        a.set_xticks(range(len(names)), names)
        a.tick_params(axis="x", labelsize=7)
        a.legend(fontsize=8)
    fig.suptitle(f"VLM2VLA over {len(s['labels'])} draws (bars: mean, dots: draws)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+",
                   help="results.json files or benchmarks/vlm2vla.py --out folders, one per draw; join runs of one "
                        "draw that fine-tuned different --methods with '+' (run_a+run_b)")
    p.add_argument("--labels", default=None, help="comma-separated draw labels (default: each run's seed)")
    p.add_argument("--md", type=Path, default=None, help="write the Markdown table here")
    p.add_argument("--png", type=Path, default=None, help="write the plot here")
    p.add_argument("--allow-mixed", action="store_true", help="combine runs whose settings differ")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        loaded = [load_parts(r) for r in args.runs]
    except ValueError as exc:
        p.error(str(exc))
    labels = (args.labels.split(",") if args.labels else
              [str(r.get("seed", f"#{i + 1}")) for i, r in enumerate(loaded)])  # runs since 2026-12-04 record it
    if len(labels) != len(args.runs) or len(set(labels)) != len(labels):
        p.error(f"--labels needs {len(args.runs)} distinct labels, got {labels}")
    seeds = [r["seed"] for r in loaded if "seed" in r]
    if len(set(seeds)) != len(seeds):
        p.error(f"two runs have the same seed ({sorted(seeds)}): one draw counted twice")
    draws = dict(zip(labels, loaded))
    first = next(iter(draws.values()))["settings"]
    diff = sorted({k for r in draws.values() for k in differing_keys(first, r["settings"])})
    if diff:
        if not args.allow_mixed:
            p.error(f"the runs' settings differ in {sorted(diff)}; give --allow-mixed to combine them anyway")
        log.warning("combining runs whose settings differ in %s", sorted(diff))
    s = summarize(draws)
    table = markdown(s)
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(table)
    else:
        sys.stdout.write(table)
    if args.png:
        plot(s, args.png)
    def mean(xs: list[float | None]) -> float | None:
        vals = [x for x in xs if x is not None]
        return statistics.fmean(vals) if vals else None

    line = {"draws": len(draws),
            "retention": {m: mean(d["retention"]) for m, d in s["methods"].items()},
            "skill_retained": {m: mean(d["skill"]) for m, d in s["methods"].items()},
            "success": {m: mean(d["success"]) for m, d in s["methods"].items()},
            "blind": mean(s["blind"]),
            "above_blind": {m: d["above_blind"] for m, d in s["methods"].items()},
            "lang_over_at_retention": s.get("lang_over_at_retention"),
            "lang_over_at_success": s.get("lang_over_at_success"), "paired_draws": s.get("paired_draws"),
            "paired_lift": {k: {x: (None if isinstance(v, float) and v != v else v) for x, v in d.items()}
                            for k, d in s.get("paired", {}).items()}}
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
