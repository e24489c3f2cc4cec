"""VLM2VLA's forgetting frontier: VQA retained against open-loop action error, along each fine-tune.

``benchmarks/vlm2vla.py`` compares the methods at one end point, where they have learnt their actions to different
degrees. Here every ``--every`` steps of each fine-tune (same pre-trained model, data and settings as that
benchmark) the probe (``training.vla.frontier.FrontierProbe``) measures held-out VQA accuracy and the open-loop
action error on held-out demonstrations (greedy chunk, decoded by the method's codec, net displacement against the
demonstration's, malformed = no motion). The paper's claim, read at matched action error: language actions keep
more VQA than action tokens.

``--pretrained DIR`` reuses a pre-trained VQA model (e.g. ``runs/bench_vlm2vla/full/pretrained``, the same seed's
data); without it the model is pre-trained here. The fine-tuning and data options are ``vlm2vla.py``'s
(``--ft-*``, ``--lora-targets``, ``--demos``, ``--camera``, ``--demo-noise``; for the pre-training
``--spatial-prior``, ``--spatial-view``, ``--patch-size``, ``--pre-steps``); the held-out demonstrations are clean,
from the same camera. ``--quick`` (< 1 minute with warm caches) is a flow check; the
last stdout line is one JSON object. The full mode writes ``docs/vlm2vla_frontier.{md,png,json}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import vlm2vla as base_bench  # the sibling benchmark: modes, data, pre-training and fine-tuning
from vlm2vla_options import add_finetune_args, add_pretraining_args, recorded, settings

ROOT = base_bench.ROOT
log = logging.getLogger("vlm2vla_frontier")
EVERY = {"quick": 4, "full": 50}
HELD_OUT = {"quick": 1, "full": 16}
CLIP = 1.5  # the frontier plot's largest action error (a model that overshoots can be far above 1)
HELD_OUT_SEED = 5000  # demonstrations for the action error: seeds far from the training ones


def run(mode: str, out: Path, cache: Path, seed: int, every: int, held_out: int, pretrained: Path | None,
        methods: list[str], vqa_limit: int, progress: bool, m: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fine-tune each of ``methods`` from one pre-trained model, probing every ``every`` steps; ``m``: the run's
    settings (default: the mode's). The held-out demonstrations are clean (no DART noise), from the same camera."""
    base_bench.preload_ml_stack()
    from training.vla.data.robosuite_source import record_robosuite
    from training.vla.evaluate import majority_baseline, skill_retained
    from training.vla.frontier import FrontierProbe
    from training.vla.relabel import ScriptedRelabeller

    m = base_bench.MODES[mode] if m is None else m
    t0 = time.perf_counter()
    items, train, test = base_bench.vqa_sets(cache, m, seed, progress)
    probe_vqa = test[:vqa_limit] if vqa_limit else test
    relabel = ScriptedRelabeller()
    lang = relabel.relabel_all(record_robosuite("lift", m["demos"], m["image"], seed=seed, cache_dir=cache,
                                                progress=progress, camera=m["camera"],
                                                noise_m=float(m.get("noise") or 0.0)))
    held = relabel.relabel_all(record_robosuite("lift", held_out, m["image"], seed=HELD_OUT_SEED + seed,
                                                cache_dir=cache, progress=progress, camera=m["camera"]))
    if pretrained is None:
        pretrained = base_bench.pretrain_vqa(out, base_bench.pretrain_corpus(lang, items, m), train, m, seed,
                                             progress)
    from agents.vlm import base_fingerprint, load_vlm

    res: dict[str, Any] = {"mode": mode, "seed": seed, "pretrained": str(pretrained),
                           "pretrained_fingerprint": base_fingerprint(load_vlm(pretrained).model),
                           "vqa_questions": len(probe_vqa),
                           "vqa_majority_baseline": majority_baseline(train, probe_vqa),
                           "held_out_demos": len(held), "every": every,
                           "settings": recorded(m), "methods": {}}
    for method in methods:
        probes: list[FrontierProbe] = []
        _, _, tr = base_bench.finetune(method, pretrained, lang, m, out, seed, progress,
                                       lambda b, c, got=probes: _probe(b, c, held, probe_vqa, every, got))
        # step 0 is the pre-trained model itself (LoRA's B starts at zero): the baseline of the retention
        pre = probes[0].points[0]["vqa"]
        res.setdefault("vqa_pretrained", pre)
        points = [{**p, "retention": p["vqa"] / pre if pre > 0 else float("nan"),
                   "skill_retained": skill_retained(p["vqa"], pre, res["vqa_majority_baseline"])}
                  for p in probes[0].points]
        res["methods"][method] = {**tr, "points": points}
        (out / "frontier_partial.json").write_text(json.dumps(res, indent=1, default=float))
        log.info("%s done (%.0f s elapsed)", method, time.perf_counter() - t0)
    res["seconds"] = time.perf_counter() - t0
    return res


def _probe(bundle: Any, codec: Any, held: list[Any], vqa: list[Any], every: int, got: list[Any]) -> Any:
    """The frontier probe of one fine-tune, measured once before its first step."""
    from training.vla.frontier import FrontierProbe
    from training.vla.samples import build_samples

    probe = FrontierProbe(bundle, codec, vqa, build_samples(held, codec, aux=False), every,
                          max_new_tokens=4 if codec.name == "binned" else 96)
    probe.measure(bundle.model, 0)
    got.append(probe)
    return probe


def retention_at(points: list[dict[str, Any]], err: float) -> float | None:
    """Retention where the method's action error first reaches ``err`` (linear between probes), else None."""
    prev = None
    for p in points:
        if p["rel_err"] <= err:
            if prev is None:
                return p["retention"]
            w = (prev["rel_err"] - err) / max(prev["rel_err"] - p["rel_err"], 1e-12)
            return prev["retention"] + w * (p["retention"] - prev["retention"])
        prev = p
    return None


def report(res: dict[str, Any], docs: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meths, st = res["methods"], res["settings"]
    lines = [f"# VLM2VLA forgetting frontier (benchmarks/vlm2vla_frontier.py, {res['mode']} mode, seed {res['seed']})",
             "",
             f"Pre-trained VQA accuracy {res['vqa_pretrained']:.3f} on {res['vqa_questions']} held-out questions"
             f"{_prior(st.get('spatial'))}; "
             f"action error on {res['held_out_demos']} held-out Lift demonstrations; LoRA r 16 / alpha 32 on "
             f"{'every linear layer' if st.get('lora_targets') == 'all-linear' else 'the language model'}, "
             f"{st['ft_steps']} steps of batch {st['batch']} at lr {st['ft_lr']:g} "
             f"({st['ft_schedule']}); a probe every {res['every']} steps; {res['seconds'] / 60:.1f} min.",
             "",
             "Skill kept: VQA accuracy above the majority-answer baseline "
             f"({res.get('vqa_majority_baseline', float('nan')):.3f}) / the pre-trained model's above it "
             "(`training.vla.evaluate.skill_retained`; 0 = no better than constant answers).", "",
             "| method | step | VQA retained | skill kept | answers in vocabulary | action error (rel.) | error (cm) | "
             "malformed | gripper right |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in meths.items():
        for p in r["points"]:
            voc, skill = p.get("vqa_in_vocabulary"), p.get("skill_retained")
            lines.append(f"| {name} | {p['step']} | {100 * p['retention']:.0f} % | "
                         f"{'-' if skill is None or skill != skill else f'{100 * skill:.0f} %'} | "
                         f"{'-' if voc is None else f'{voc:.2f}'} | {p['rel_err']:.2f} | "
                         f"{p['disp_err_cm']:.2f} | {p['malformed']:.2f} | {p['gripper_acc']:.2f} |")
    best = max(min(p["rel_err"] for p in r["points"]) for r in meths.values()) if meths else float("nan")
    lines += ["", f"Retention where each method's action error first reaches {best:.2f} (the lowest error every "
              "method reaches):", "", "| method | VQA retained |", "|---|---|"]
    for name, r in meths.items():
        v = retention_at(r["points"], best)
        lines.append(f"| {name} | {'-' if v is None else f'{100 * v:.0f} %'} |")
    md = "\n".join(lines) + "\n"
    fig, ax = plt.subplots(1, 2, figsize=(9.5, 3.6))
    for name, r in meths.items():
        pts = r["points"]
        ax[0].plot([min(p["rel_err"], CLIP) for p in pts], [100 * p["retention"] for p in pts], "o-", label=name,
                   ms=3)
        ax[1].plot([p["step"] for p in pts], [100 * p["retention"] for p in pts], "o-", label=name, ms=3)
    ax[0].set_xlabel(f"open-loop action error (relative; 1 = no motion; clipped at {CLIP:g})")
    ax[0].invert_xaxis()
    ax[1].set_xlabel("fine-tuning step")
    for a in ax:
        a.set_ylabel("VQA retained (%)")
        a.axhline(85, color="grey", lw=0.8, ls="--")
        a.grid(alpha=0.3)
    ax[0].legend(fontsize=7)
    ax[0].set_title("frontier (right = better actions)", fontsize=9)
    ax[1].set_title("retention along the fine-tune", fontsize=9)
    fig.tight_layout()
    docs.mkdir(parents=True, exist_ok=True)
    fig.savefig(docs / "vlm2vla_frontier.png", dpi=110)
    plt.close(fig)
    (docs / "vlm2vla_frontier.md").write_text(md)
    (docs / "vlm2vla_frontier.json").write_text(json.dumps(res, indent=1, default=float))
    return md


def _prior(spatial: Any) -> str:
    if not spatial:
        return ""
    digits = "VLM2VLA-AT's rare digit tokens" if spatial == "action_tokens" else "the action language's digits"
    return f" (pre-trained with the spatial-prior questions too, offsets in {digits})"


def merge(paths: list[str]) -> dict[str, Any]:
    """Combine runs that fine-tuned different methods from the same pre-trained model (e.g. parallel processes,
    each pre-training its own deterministic copy: the same model is the same fingerprint, else the same path)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    first = runs[0]
    same = "pretrained_fingerprint" if all("pretrained_fingerprint" in r for r in runs) else "pretrained"
    for r in runs[1:]:
        for key in (same, "seed", "every", "held_out_demos", "vqa_questions", "settings"):
            if r[key] != first[key]:
                raise ValueError(f"runs to merge must share {key}: {first[key]!r} against {r[key]!r}")
    return {**first, "methods": {m: v for r in runs for m, v in r["methods"].items()},
            "seconds": max(r["seconds"] for r in runs), "merged_from": list(paths)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny settings, flow check (< 1 minute)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pretrained", default=None, help="a pre-trained VQA model directory to reuse")
    p.add_argument("--methods", default=",".join(base_bench.METHODS), help="comma-separated method names")
    p.add_argument("--every", type=int, default=None, help="fine-tuning steps between probes (quick 4, full 50)")
    p.add_argument("--held-out", type=int, default=None, help="held-out demonstrations (quick 1, full 16)")
    p.add_argument("--vqa-limit", type=int, default=0, help="probe on the first N held-out questions (0: all)")
    add_finetune_args(p)
    add_pretraining_args(p)
    p.add_argument("--cache", default="runs/vla_cache", help="demonstration / VQA cache (vlm2vla.py's default)")
    p.add_argument("--out", default=None, help="run directory (default: runs/bench_vlm2vla_frontier/<mode>)")
    p.add_argument("--docs", default=None, help="where the report goes (default: docs/ in full mode, the run dir "
                                                "in quick mode)")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="combine vlm2vla_frontier.json files of runs of different methods into one report")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(asctime)s %(message)s")
    mode = "quick" if a.quick else "full"
    methods = [x for x in a.methods.split(",") if x]
    bad = [x for x in methods if x not in base_bench.METHODS]
    if not methods or bad:
        p.error(f"--methods: names of {list(base_bench.METHODS)}, got {a.methods!r}")
    m = settings(p, a, base_bench.MODES[mode])
    if a.pretrained and not a.merge:
        if not (Path(a.pretrained) / "config.json").is_file():
            p.error(f"--pretrained {a.pretrained}: not a model directory (no config.json)")
        try:  # a model pre-trained with other settings (seed, patch size, spatial questions, demos) is refused
            if not base_bench.reusable_pretrained(Path(a.pretrained), m, a.seed):
                log.warning("%s has no pre-training key: it is used as given, unchecked", a.pretrained)
        except ValueError as exc:
            p.error(str(exc))
    out = Path(a.out) if a.out else ROOT / "runs" / "bench_vlm2vla_frontier" / mode
    out.mkdir(parents=True, exist_ok=True)
    res = merge(a.merge) if a.merge else run(mode, out, ROOT / a.cache, a.seed, a.every or EVERY[mode],
              a.held_out or HELD_OUT[mode], Path(a.pretrained) if a.pretrained else None, methods, a.vqa_limit,
              progress=not a.quick, m=m)
    mode = res["mode"]
    docs = Path(a.docs) if a.docs else (ROOT / "docs" if mode == "full" else Path(tempfile.mkdtemp(prefix="vf_")))
    print(report(res, docs))
    summary = {"benchmark": "vlm2vla_frontier", "mode": mode, "seconds": round(res["seconds"], 1),
               "frontier": {name: [[p["step"], round(p["retention"], 3), round(p["rel_err"], 3)]
                                   for p in r["points"]] for name, r in res["methods"].items()}}
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
