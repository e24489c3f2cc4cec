#!/usr/bin/env python
"""AML-VLN at small scale (issue #6): sequential LoRA, EWC-LoRA, oracle multi-LoRA and TuKA + DKIL learn a
sequence of (scene, condition) navigation tasks one at a time, all from the same cached base navigator.

Reports after the last task: SR / SPL / OSR per task and averaged, forgetting F-SR (relative drop from each
task's SR right after it was learned), SR on unseen (scene, condition) pairs, routing accuracy (TuKA) and adapter
parameters; writes a JSON, a markdown table and the SR-matrix plot (full mode: docs/lifelong_vln.{json,md,png}).
``--quick``: 2 scenes x 2 conditions, tiny model and settings. Last stdout line: one JSON object with ``avg_sr``
and ``forgetting`` per method.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling lifelong_report, also when imported as a module

# the report helpers lifelong_pool.py shares; sr_se is also part of this script's report API (tests)
from lifelong_report import clean_json as _clean  # noqa: E402
from lifelong_report import protocol_differences, reference_avg, resolve_base, sr_se, summary_line  # noqa: E402,F401
from lifelong_report import report_references as _references  # noqa: E402

QUICK_BASE = {
    "out_dir": "runs/vln/quick", "image_size": 32, "n_scenes": 2, "episodes_per_scene": 3, "eval_per_scene": 1,
    "min_distance": 1.5, "max_distance": 4.0, "max_steps": 16, "steps": 30, "batch_size": 8, "dagger_rounds": 0,
    "eval_conditions": ["normal"], "cache_dir": "runs/cache/vln", "num_threads": 1,
    "agent": {"num_history": 1, "num_future_steps": 4, "action_history": 2, "max_instruction_words": 16},
    "tiny": {"hidden_size": 64, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "intermediate_size": 128,
             "patch_size": 16, "vision_hidden_size": 32, "vision_layers": 1, "vision_heads": 2,
             "vision_intermediate_size": 64, "bpe_vocab_size": 400},
}


REFERENCE_ROWS = {"base": "base, no adaptation", "blind": "blind: forward {n} then stop"}


def routing_cell(r: dict) -> str:
    """Joint routing accuracy, with the scene and environment parts where the run recorded them."""
    if r.get("routing_acc") is None:
        return "-"
    parts = [r.get("routing_scene_acc"), r.get("routing_env_acc")]
    split = f" ({parts[0]:.2f} / {parts[1]:.2f})" if None not in parts else ""
    by = [(part, r.get(f"routing_scene_acc_{part}"), r.get(f"routing_env_acc_{part}")) for part in ("seen", "unseen")]
    by = [f"{part} {s:.2f} / {e:.2f}" for part, s, e in by if s is not None and e is not None]
    return f"{r['routing_acc']:.2f}{split}" + (f"; {', '.join(by)}" if by else "")


def table(results: dict, tasks, unseen, references: dict | None = None, n_eval: int | None = None,
          blind_steps: int = 6) -> str:
    """Markdown: one row per method (and per reference policy that no task changes), then final SR per task."""
    head = ("| method | avg SR | avg SPL | avg OSR | F-SR (rel.) | F-SR (abs.) | unseen SR | routing acc. "
            "(scene / env; seen tasks, unseen pairs) | "
            "adapter params | time (s) |")
    lines = [head, "|" + "---|" * 10]
    f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    pm = lambda srs: f" ± {sr_se(srs, n_eval):.2f}" if n_eval else ""  # noqa: E731
    for name, r in results.items():
        lines.append(f"| {name} | {f(r['avg']['sr'])}{pm(r['final']['sr'])} | {f(r['avg']['spl'])} | "
                     f"{f(r['avg']['osr'])} | "
                     f"{f(r['forgetting']['sr']['relative'])} | {f(r['forgetting']['sr']['absolute'])} | "
                     f"{f(r['unseen']['sr'])} | {routing_cell(r)} | {r['adapter_params']:,} | {r['seconds']} |")
    for name, r in results.items():
        o = r.get("oracle_route")
        if o:  # a routed method on the same episodes with each task's own experts
            lines.append(f"| {name}, oracle experts (no routing) | {f(o['avg']['sr'])}{pm(o['final']['sr'])} | "
                         f"{f(o['avg']['spl'])} | {f(o['avg']['osr'])} | - | - | "
                         f"{f(o.get('unseen', {}).get('sr'))} | - | {r['adapter_params']:,} | - |")
    refs = {REFERENCE_ROWS.get(k, k).format(n=blind_steps): v for k, v in (references or {}).items()}
    for name, on in refs.items():
        srs = [on[t.name]["sr"] for t in tasks]
        lines.append(f"| {name} | {f(reference_avg(on, tasks))}{pm(srs)} | {f(reference_avg(on, tasks, 'spl'))} | "
                     f"{f(reference_avg(on, tasks, 'osr'))} | - | - | {f(reference_avg(on, unseen))} | - | 0 | - |")
    lines += ["", "Final SR per task (order of learning): " + ", ".join(t.name for t in tasks)
              + (f"; unseen: {', '.join(u.name for u in unseen)}" if unseen else "")
              + (f". ± is the standard error of the average over {n_eval} held-out episodes per task." if n_eval
                 else ""), "",
              "| method | " + " | ".join(t.name for t in tasks) + " |", "|---|" + "---|" * len(tasks)]
    for name, r in results.items():
        lines.append(f"| {name} | " + " | ".join(f(v) for v in r["final"]["sr"]) + " |")
        if r.get("oracle_route"):
            lines.append(f"| {name}, oracle experts | " + " | ".join(f(v) for v in r["oracle_route"]["final"]["sr"])
                         + " |")
    for name, on in refs.items():
        lines.append(f"| {name} | " + " | ".join(f(on[t.name]["sr"]) for t in tasks) + " |")
    return "\n".join(lines)


def offline_table(results: dict, tasks, references: dict | None = None) -> str:
    """Markdown of the offline metrics (teacher-forced answers on held-out demonstrations, each task with its own
    adapter or experts): means right after learning each task and at the end, forgetting; '' if none were run."""
    rows = {n: r["offline"] for n, r in results.items() if r.get("offline")}
    if not rows:
        return ""
    mean = lambda v: None if v is None else sum(v) / len(v)  # noqa: E731
    f = lambda v, p=3: "-" if v is None else f"{v:.{p}f}"  # noqa: E731
    lines = ["| method | token acc. right after (mean) | final | F (rel.) | whole-answer acc. right after | final | "
             "F (rel.) | loss right after | final | rise |", "|" + "---|" * 10]
    for name, o in rows.items():
        cells = []
        for key in ("token_acc", "answer_acc", "loss"):  # reports before answer_acc lack it
            cells += [f(mean(o["right_after"].get(key))), f(o["avg"].get(key)),
                      f(o["forgetting"].get("loss_rise" if key == "loss" else key))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    base = (references or {}).get("base", {})
    has_base = bool(tasks) and all("token_acc" in base.get(t.name, {}) for t in tasks)
    if has_base:
        ref = {k: (reference_avg(base, tasks, k) if all(k in base[t.name] for t in tasks) else None)
               for k in ("token_acc", "answer_acc", "loss")}
        lines.append(f"| {REFERENCE_ROWS['base']} | - | {f(ref['token_acc'])} | - | - | {f(ref['answer_acc'])} | - | "
                     f"- | {f(ref['loss'])} | - |")
    lines += ["", "Token accuracy right after learning each task -> at the end (order of learning):", "",
              "| method | " + " | ".join(t.name for t in tasks) + " |", "|---|" + "---|" * len(tasks)]
    for name, o in rows.items():
        pairs = zip(o["right_after"]["token_acc"], o["final"]["token_acc"])
        lines.append(f"| {name} | " + " | ".join(f"{f(a)} -> {f(b)}" for a, b in pairs) + " |")
    if has_base:
        lines.append(f"| {REFERENCE_ROWS['base']} | " + " | ".join(f(base[t.name]["token_acc"]) for t in tasks) + " |")
    return "\n".join(lines)


def report_md(results: dict, tasks, unseen, references: dict | None, n_eval: int | None, blind_steps: int) -> str:
    """The closed-loop table, then the offline one where the run has it."""
    off = offline_table(results, tasks, references)
    md = table(results, tasks, unseen, references, n_eval, blind_steps)
    return md + ("\n\nOffline (teacher-forced on each task's held-out demonstrations, its own adapter/experts):\n\n"
                 + off if off else "")


def plot(results: dict, tasks, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(results), figsize=(3.4 * len(results), 3.4), squeeze=False)
    for i, (ax, (name, r)) in enumerate(zip(axes[0], results.items())):
        m = np.array(r["matrices"]["sr"], dtype=float)
        im = ax.imshow(np.ma.masked_invalid(m), vmin=0, vmax=1, cmap="viridis")
        ax.set_title(f"{name}\navg SR {r['avg']['sr']:.2f}", fontsize=9)
        ax.set_xlabel("evaluated task")
        ax.set_xticks(range(len(tasks)), [t.name for t in tasks], rotation=90, fontsize=6)
        ax.set_yticks(range(len(tasks)), [t.name for t in tasks] if i == 0 else [], fontsize=6)
        if i == 0:
            ax.set_ylabel("after training task")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="SR")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


class _T:
    def __init__(self, name: str) -> None:
        self.name = name


def merge(paths: list[str], out: Path) -> int:
    """Combine runs of the same sequence that trained different methods (e.g. two processes)."""
    from agents.core.io import read_json_object

    reports = [read_json_object(p, required=("tasks", "unseen", "config", "results")) for p in paths]
    first = reports[0]
    for path, r in zip(paths[1:], reports[1:]):
        if r["tasks"] != first["tasks"] or r["unseen"] != first["unseen"]:
            raise ValueError(f"{path}: runs to merge must share the task sequence and unseen pairs")
        diff = protocol_differences(first, r, ignore=("methods",))
        if diff:  # e.g. steps_per_task, lr, the base navigator's settings: the methods would not be comparable
            raise ValueError(f"{path}: runs to merge must share their settings (all but methods); they differ in "
                             f"{', '.join(diff)}")
    results = {m: res for r in reports for m, res in r["results"].items()}
    references = {k: v for r in reports for k, v in _references(r).items()}
    merged = {**first, "results": results, "references": references, "seconds": max(r["seconds"] for r in reports),
              "merged_from": paths}
    out.mkdir(parents=True, exist_ok=True)
    (out / "lifelong_vln.json").write_text(json.dumps(_clean(merged), indent=1))
    tasks, unseen = [_T(n) for n in first["tasks"]], [_T(n) for n in first["unseen"]]
    md = report_md(results, tasks, unseen, references, first["config"]["eval_per_task"],
                   first["config"].get("blind_forward_steps", 6))
    (out / "lifelong_vln.md").write_text(md + "\n")
    plot(results, tasks, out / "lifelong_vln.png")
    print(md)
    print(json.dumps(_clean({"avg_sr": {m: r["avg"]["sr"] for m, r in results.items()},
                             "forgetting": {m: r["forgetting"]["sr"]["relative"] for m, r in results.items()}})))
    return 0


def _configs(p: argparse.ArgumentParser, a: argparse.Namespace, shared: dict[str, Any]) -> Any:
    """The run's ``LifelongConfig``, the base navigator's config in ``.base`` (tiny in --quick; raise on bad
    settings)."""
    from training.vln.config import VLNTrainConfig
    from training.vln.lifelong import LifelongConfig

    if a.quick:
        base = VLNTrainConfig.from_dict(dict(QUICK_BASE))
        return LifelongConfig(base=base, n_scenes=2, conditions=["normal", "low_light"], n_unseen=1,
                              train_per_task=2, eval_per_task=1, steps_per_task=4, batch_size=4,
                              fisher_batches=1, lora_rank=4, tuka_ranks=(4, 4, 2, 2), full_matrix=False,
                              offline_samples=min(a.offline_samples, 16), **shared)
    base = VLNTrainConfig.from_yaml(a.base_config)
    return LifelongConfig(base=base, n_scenes=a.scenes, conditions=a.conditions.split(","), n_unseen=a.unseen,
                          order_seed=a.order_seed, train_per_task=a.train_per_task,
                          eval_per_task=a.eval_per_task, steps_per_task=a.steps_per_task,
                          batch_size=a.batch_size, lr=a.lr, full_matrix=not a.diagonal_only,
                          ewc_lambda=a.ewc_lambda, tuka_ranks=_ranks(p, a.tuka_ranks),
                          offline_samples=a.offline_samples, **shared)


def _ranks(p: argparse.ArgumentParser, text: str) -> tuple[int, int, int, int]:
    """``--tuka-ranks R1,R2,R3,R4`` as four positive ints (an argparse error otherwise)."""
    try:
        ranks = tuple(int(v) for v in text.split(","))
    except ValueError:
        ranks = ()
    if len(ranks) != 4 or min(ranks) < 1:
        p.error(f"--tuka-ranks: four positive ints R1,R2,R3,R4, got {text!r}")
    return ranks  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    from agents.core.numerics import PIN_CHOICES, PIN_HELP, numerics_info, pin_choice  # imports no torch

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2 scenes x 2 conditions, tiny settings (< 1 minute)")
    p.add_argument("--base-config", default=str(ROOT / "configs/vln/base.yaml"), help="base navigator config")
    p.add_argument("--base-dir", default=None, metavar="DIR",
                   help="start from this exported base (scripts/export_vln_base.py) instead of the cache; it must "
                        "have been built from --base-config (checked, with every file's SHA-256)")
    p.add_argument("--scenes", type=int, default=3)
    p.add_argument("--conditions", default="normal,low_light,overexposure,scattering")
    p.add_argument("--unseen", type=int, default=2, help="(scene, condition) pairs held out of the sequence")
    p.add_argument("--order-seed", type=int, default=0)
    p.add_argument("--train-per-task", type=int, default=8, help="training episodes per task")
    p.add_argument("--eval-per-task", type=int, default=4, help="held-out episodes per task")
    p.add_argument("--steps-per-task", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--success-distance", type=float, default=None,
                   help="evaluation success radius in m (default: the base config's); evaluation only")
    p.add_argument("--camera-only", action="store_true",
                   help="conditions change the frame only (camera model on the normally lit scene, as the paper's "
                        "noise models in Habitat), not the MuJoCo lighting too; the cached base is reused")
    p.add_argument("--only-tasks", default=None, metavar="NAMES",
                   help="learn only these tasks of the sequence, in this order (e.g. S0-low_light: one task alone, "
                        "to measure what adaptation gains); the others are not evaluated")
    p.add_argument("--ewc-lambda", type=float, default=1e7, help="EWC-LoRA's lambda (the released code's 1e7)")
    p.add_argument("--tuka-ranks", default="8,8,4,4", metavar="R1,R2,R3,R4",
                   help="TuKA's Tucker ranks: shared output/input (r1, r2), scene (r3) and environment (r4) experts")
    p.add_argument("--dkil-ewc", type=float, default=0.2,
                   help="TuKA: weight of DKIL's EWC term on the shared factors G/U1/U2 (default 0.2, the paper's)")
    p.add_argument("--dkil-anchor-reused", action="store_true",
                   help="TuKA: DKIL's consistency term also holds an expert row an earlier task learned when a new "
                        "task reuses it (e.g. the night expert for a second building's night); default: it is free")
    p.add_argument("--dkil-core-fisher", choices=("diagonal", "pair"), default="diagonal",
                   help="TuKA: DKIL's EWC on the core G: 'diagonal' (the paper's, G's own coordinates) or 'pair' "
                        "(each learned (scene, env) pair's contraction G x3 U3[s] x4 U4[e], through the live rows)")
    p.add_argument("--cotrain", type=float, default=0.0, metavar="F",
                   help="fraction of every adaptation batch that is scene questions about the task's own frames, "
                        "under its condition (the base navigator's data mix); 0: imitation only (the paper's)")
    p.add_argument("--offline-samples", type=int, default=256, metavar="N",
                   help="teacher-driven model calls per task on its held-out episodes, scored teacher-forced after "
                        "every task (token accuracy and loss: learning and forgetting without rollout noise); 0: off")
    p.add_argument("--routing-memory", type=int, default=0, metavar="N",
                   help="TuKA: keep N vision features per expert (spread over each task's training frames) and route "
                        "to the expert of the nearest one; 0: one mean prototype per expert (the paper's rule)")
    p.add_argument("--tuka-init-jitter", type=float, default=0.0, metavar="F",
                   help="TuKA: a new expert row copied from the nearest one gets a random part orthogonal to it, of "
                        "F times its norm (0: an exact copy, the paper's rule)")
    p.add_argument("--adapt-projector", action="store_true",
                   help="every method adapts the multimodal projector too (the paper's targets); TuKA then routes on "
                        "vision-tower features")
    p.add_argument("--diagonal-only", action="store_true",
                   help="evaluate each task right after it is learnt and all tasks after the last one (what SR, "
                        "forgetting and the final row need) instead of the whole SR matrix: affords more episodes")
    p.add_argument("--methods", default="seq_lora,ewc_lora,oracle_multi_lora,tuka_dkil",
                   help="comma-separated methods; '' for the reference rows only (base, blind)")
    p.add_argument("--served-dir", default="runs/vln/alldaywalker_tuka",
                   help="where TuKA's served checkpoint is written and checked (full mode; one per parallel run)")
    p.add_argument("--progress-dir", default=None, metavar="DIR",
                   help="save each method's state after every task to DIR/<method>.pt (default OUT/progress, or "
                        "runs/lifelong_vln/progress without --out; off in quick mode; 'none': off); removed once the "
                        "report is written. Parallel runs need their own")
    p.add_argument("--resume", action="store_true",
                   help="go on from the progress files in --progress-dir (same settings and task order); without it "
                        "an existing progress file is an error, never overwritten")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared 2-core box)")
    p.add_argument("--out", default=None, help="output directory (default: docs/ in full mode, a temp dir in quick)")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="only combine lifelong_vln.json files of runs that split --methods (same tasks) into --out")
    p.add_argument("--pin-numerics", default="auto", choices=PIN_CHOICES,
                   help=PIN_HELP)
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    if a.merge:
        try:
            return merge(a.merge, Path(a.out or ROOT / "docs"))
        except (FileNotFoundError, ValueError) as exc:
            p.error(str(exc))
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING)
    pinned = pin_choice(a.pin_numerics)  # before torch loads: a cached base rebuilt elsewhere comes out the same
    import torch

    from training.vln.lifelong import (
        evaluate_base,
        evaluate_blind,
        prepare_data,
        resume_identity,
        run_method,
    )
    from training.vln.resume import DirLock, ResumeError, progress_files, remove_progress

    torch.set_num_threads(max(1, a.threads))
    os.chdir(ROOT)
    t0 = time.time()
    # the settings --quick keeps from the command line
    shared = dict(methods=[m for m in a.methods.split(",") if m.strip()], adapt_projector=a.adapt_projector,
                  cotrain=a.cotrain, dkil_w_ewc=a.dkil_ewc, dkil_anchor_reused=a.dkil_anchor_reused,
                  dkil_core_fisher=a.dkil_core_fisher, routing_memory=a.routing_memory,
                  tuka_init_jitter=a.tuka_init_jitter)
    try:  # a bad config or setting is a usage error, not a traceback
        cfg = _configs(p, a, shared)
    except (OSError, TypeError, ValueError) as exc:
        p.error(str(exc))
    base_dir, base_result = resolve_base(p, a.base_dir, cfg.base, progress=not a.quick)
    if a.success_distance is not None:  # an evaluation-only setting: the cached base is reused
        cfg.base = dataclasses.replace(cfg.base, success_distance=a.success_distance)
    if a.camera_only:  # how the tasks render their conditions; the base trained in normal light is reused
        cfg.base = dataclasses.replace(cfg.base, physical_conditions=False)
    tasks, unseen = cfg.tasks()
    if a.only_tasks:
        by_name = {t.name: t for t in tasks + unseen}
        names = [n for n in a.only_tasks.split(",") if n]
        if not names or any(n not in by_name for n in names):
            p.error(f"--only-tasks: names of tasks of this sequence ({sorted(by_name)}), got {a.only_tasks!r}")
        tasks, unseen = [by_name[n] for n in names], []
    out = Path(a.out) if a.out else (Path(tempfile.mkdtemp(prefix="lifelong_vln_")) if a.quick else ROOT / "docs")
    if a.progress_dir:
        prog_dir = None if a.progress_dir == "none" else Path(a.progress_dir)
    else:  # quick runs keep no progress unless asked
        prog_dir = None if a.quick else (Path(a.out) if a.out else ROOT / "runs/lifelong_vln") / "progress"
    lock = None
    try:
        try:  # before the task data: a run that cannot go on says so at once
            lock = DirLock(prog_dir) if prog_dir is not None else None  # released when this run ends, however
            prog = progress_files(prog_dir, {m: resume_identity(m, cfg, tasks, unseen) for m in cfg.methods}, a.resume)
        except ResumeError as exc:
            p.error(str(exc))
        data = prepare_data(cfg, tasks + unseen, progress=not a.quick)
        references = {"base": evaluate_base(cfg, base_dir, tasks + unseen, data),
                      "blind": evaluate_blind(cfg, tasks + unseen, data)}
        out.mkdir(parents=True, exist_ok=True)
        if not a.quick:
            served = ROOT / a.served_dir
        else:
            served = out / "served" if a.out else Path(tempfile.mkdtemp(prefix="alldaywalker_served_"))
        results = {m: run_method(m, cfg, base_dir, tasks, unseen, data, progress=not a.quick, export_dir=served,
                                 progress_file=prog[m]) for m in cfg.methods}
        base_metrics = {c: {k: round(float(m[k]), 3) for k in ("sr", "spl", "osr", "ne")}
                        for c, m in base_result["metrics"].items()}
        report = {"config": cfg.to_dict(), "tasks": [t.name for t in tasks], "unseen": [u.name for u in unseen],
                  "base_navigator": {"dir": str(base_dir), "metrics": base_metrics,
                                     "numerics": base_result.get("numerics")},
                  "numerics": {**numerics_info(), "pinned": pinned}, "references": references,
                  "success_distance": cfg.base.success_distance, "physical_conditions": cfg.base.physical_conditions,
                  "results": results,
                  "seconds": round(time.time() - t0, 1)}
        (out / "lifelong_vln.json").write_text(json.dumps(_clean(report), indent=1))
        for f in prog.values():  # the report holds every result now
            if f is not None:
                remove_progress(f)
        md = report_md(results, tasks, unseen, references, cfg.eval_per_task, cfg.blind_forward_steps)
        (out / "lifelong_vln.md").write_text(md + "\n")
        if results:
            plot(results, tasks, out / "lifelong_vln.png")
        print(md)
        print(f"base navigator (after pre-training, normal light only): {json.dumps(base_metrics)}")
        summary = {**summary_line(results, references, tasks), "seconds": round(time.time() - t0, 1),
                   "out": str(out)}
        print(json.dumps(_clean(summary)))
        return 0
    finally:
        if lock is not None:
            lock.release()


if __name__ == "__main__":
    raise SystemExit(main())
