#!/usr/bin/env python
"""How well TuKA's router picks the scene and environment experts without a task id (issue #6), per prototype rule.

The lifelong sequence's tasks ((scene, condition) pairs) are rendered from a cached base navigator as
``benchmarks/lifelong_vln.py`` renders them; the router stores each task's vision features of its training frames
(``training.vln.routing.routing_features``) under its scene and environment, and then routes the first frame of
every held-out episode, as the closed-loop evaluation does. With ``--unseen N`` the lifelong benchmark's held-out
(scene, condition) pairs are routed too (reported apart: their scene was learnt only under other lighting). Rules:

- ``mean-first64``: one mean prototype per expert from the task's first 64 training frames (the benchmark's
  default and the paper's rule);
- ``mean-spread``: one mean prototype from frames spread over the whole task (is the sample the problem?);
- ``memory-N``: N frames spread over each task kept per expert, routed to the expert of the nearest one.

The adaptation does not change routing features that are read before the projector (``--adapt-projector`` in the
lifelong benchmark), so the base navigator's features are the ones a trained TuKA routes on. Writes
``vln_routing.{json,md,png}`` to ``--out``; last stdout line: one JSON object with ``routing`` (scene / env / joint
accuracy per rule). ``--quick``: the lifelong benchmark's tiny base, a few episodes (< 1 minute).
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
sys.path.insert(0, str(ROOT))
log = logging.getLogger("vln_routing")


def first_frames(cfg: Any, data: Any) -> list[Any]:
    """The first frame of each of the task's held-out episodes, under its condition (what routing sees)."""
    from training.vln.navigator import make_env

    env = make_env(cfg.base, data.task.condition, data.eval_episodes, data.eval_gts)
    try:
        return [env.reset(options={"episode_index": i})[0]["rgb"] for i in range(len(data.eval_episodes))]
    finally:
        env.close()


def rules(memories: list[int]) -> dict[str, tuple[int, int]]:
    """Rule name -> (router memory, frames per task spread evenly: 0 for the first 64)."""
    return {"mean-first64": (0, 0), "mean-spread": (0, max(memories)), **{f"memory-{n}": (n, n) for n in memories}}


def _mean_accuracy(router: Any, queries: dict[int, Any], tasks: list[Any]) -> dict[str, float]:
    """Scene / env / joint accuracy of ``router`` on the tasks' queries (mean over tasks) and the episode count."""
    import numpy as np

    from training.peft.tucker import routing_accuracy

    per_task = [routing_accuracy(router, queries[t.index], [t.scene] * len(queries[t.index]),
                                 [t.env] * len(queries[t.index])) for t in tasks]
    out = {k: float(np.mean([r[k] for r in per_task])) for k in ("scene", "env", "joint")}
    out["episodes"] = int(sum(len(queries[t.index]) for t in tasks))
    return out


def route_all(cfg: Any, bundle: Any, data: dict[int, Any], tasks: list[Any], memories: list[int],
              progress: bool = False, unseen: list[Any] | None = None) -> dict[str, dict[str, Any]]:
    """Scene / env / joint routing accuracy of each rule on every task's held-out first frames (mean over tasks);
    with ``unseen`` pairs (never stored in the router), their accuracy under ``"unseen"`` in each rule's entry."""
    from tqdm import tqdm

    from agents.vln.modeling_vln import AlldayWalkerPolicy
    from training.peft.tucker import PrototypeRouter
    from training.vln.routing import frame_features, frame_indices, task_frames

    agent_cfg = cfg.agent_config()
    pol = AlldayWalkerPolicy(bundle, agent_cfg)
    unseen = list(unseen or [])
    queries = {t.index: pol.features(first_frames(cfg, data[t.index])) for t in tqdm(
        tasks + unseen, desc="held-out frames", disable=not progress)}
    # every training frame's features once per task; each rule picks its rows as routing_features picks frames
    train = {t.index: frame_features(bundle, agent_cfg, task_frames(data[t.index].samples)) for t in tqdm(
        tasks, desc="training frames", disable=not progress)}
    out = {}
    for name, (memory, frames) in tqdm(rules(memories).items(), desc="rules", disable=not progress):
        router = PrototypeRouter(memory=memory)
        for t in tasks:
            feats = train[t.index]
            router.add(feats[frame_indices(len(feats), memory=frames)], scene=t.scene, env=t.env)
        out[name] = _mean_accuracy(router, queries, tasks)
        if unseen:
            out[name]["unseen"] = _mean_accuracy(router, queries, unseen)
    return out


def report_md(result: dict[str, dict[str, Any]], n_tasks: int, n_unseen: int = 0) -> str:
    """Markdown table, one row per rule, with the standard error of a proportion on the pooled episodes (seen
    tasks, then the unseen pairs where there are any)."""
    import math

    cells = lambda r: [f"{r[k]:.2f} ± {math.sqrt(r[k] * (1 - r[k]) / r['episodes']):.2f}"  # noqa: E731
                       for k in ("scene", "env", "joint")]
    head = "| rule | scene | env | joint |" + (" unseen: scene | env | joint |" if n_unseen else "")
    pairs = f"; {n_unseen} unseen pair{'s' * (n_unseen != 1)}, never stored in the router" if n_unseen else ""
    lines = [f"Routing accuracy on held-out first frames ({n_tasks} tasks{pairs}):", "",
             head, "|---" * (7 if n_unseen else 4) + "|"]
    for name, r in result.items():
        lines.append(f"| {name} | " + " | ".join(cells(r) + (cells(r["unseen"]) if "unseen" in r else [])) + " |")
    return "\n".join(lines)


def plot(result: dict[str, dict[str, float]], path: Path) -> None:
    """Scene and environment accuracy against the memory size, the mean prototypes as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mem = sorted((int(k.split("-")[1]), v) for k, v in result.items() if k.startswith("memory-"))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for kind, colour in (("scene", "tab:blue"), ("env", "tab:orange")):
        if mem:
            ax.plot([m for m, _ in mem], [v[kind] for _, v in mem], "o-", color=colour, label=f"{kind}: memory")
            if kind == "scene" and all("unseen" in v for _, v in mem):
                ax.plot([m for m, _ in mem], [v["unseen"]["scene"] for _, v in mem], "s-.", color="tab:red",
                        label="scene, unseen pairs: memory")
        for name, style in (("mean-first64", "--"), ("mean-spread", ":")):
            if name in result:
                ax.axhline(result[name][kind], color=colour, linestyle=style, label=f"{kind}: {name}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("stored features per expert")
    ax.set_ylabel("routing accuracy (held-out first frames)")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _memories(p: argparse.ArgumentParser, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        p.error(f"--memories: comma-separated positive ints, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the lifelong benchmark's tiny base, a few episodes (< 1 min)")
    p.add_argument("--base-config", default=str(ROOT / "configs/vln/search_fine_patches.yaml"),
                   help="base navigator config (its cached base is reused, trained once if missing)")
    p.add_argument("--base-dir", default=None, metavar="DIR",
                   help="use this exported base (scripts/export_vln_base.py) instead of the cache; it must have "
                        "been built from --base-config (checked, as in benchmarks/lifelong_vln.py)")
    p.add_argument("--scenes", type=int, default=2)
    p.add_argument("--conditions", default="normal,low_light")
    p.add_argument("--unseen", type=int, default=0,
                   help="(scene, condition) pairs held out of the router (as --unseen in benchmarks/lifelong_vln.py)")
    p.add_argument("--order-seed", type=int, default=0, help="the lifelong order (which pairs are unseen)")
    p.add_argument("--train-per-task", type=int, default=128, help="training episodes per task (the prototypes)")
    p.add_argument("--eval-per-task", type=int, default=30, help="held-out episodes per task (the queries)")
    p.add_argument("--memories", default="64,256,1024", help="memory sizes (frames per expert) to compare")
    p.add_argument("--camera-only", action="store_true",
                   help="conditions change the frame only (as --camera-only in benchmarks/lifelong_vln.py)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", default=None, help="output directory (default: a temp dir)")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    memories = _memories(p, a.memories)
    if a.unseen < 0:
        p.error(f"--unseen must be >= 0, got {a.unseen}")
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING)
    import torch

    from agents.vlm.bundle import load_vlm
    from training.vln.config import VLNTrainConfig
    from training.vln.lifelong import LifelongConfig, prepare_data

    torch.set_num_threads(max(1, a.threads))
    os.chdir(ROOT)
    t0 = time.time()
    common = dict(n_unseen=a.unseen, order_seed=a.order_seed, steps_per_task=1, adapt_projector=True,
                  offline_samples=0, cotrain=0.0, methods=[])
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from lifelong_report import resolve_base

    try:  # a bad config or setting is a usage error, not a traceback
        if a.quick:
            from lifelong_vln import QUICK_BASE

            base = VLNTrainConfig.from_dict(dict(QUICK_BASE))
            cfg = LifelongConfig(base=base, n_scenes=2, conditions=["normal", "low_light"], train_per_task=2,
                                 eval_per_task=2, **common)
            memories = [4]
        else:
            base = VLNTrainConfig.from_yaml(a.base_config)
            cfg = LifelongConfig(base=base, n_scenes=a.scenes, conditions=a.conditions.split(","),
                                 train_per_task=a.train_per_task, eval_per_task=a.eval_per_task, **common)
    except (OSError, TypeError, ValueError) as exc:
        p.error(str(exc))
    base_dir, _ = resolve_base(p, a.base_dir, base, progress=not a.quick)
    if a.camera_only:
        cfg.base = dataclasses.replace(cfg.base, physical_conditions=False)
    tasks, unseen = cfg.tasks()
    data = prepare_data(cfg, tasks + unseen, progress=not a.quick)
    result = route_all(cfg, load_vlm(Path(base_dir) / "vlm"), data, tasks, memories, progress=not a.quick,
                       unseen=unseen)
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="vln_routing_"))
    out.mkdir(parents=True, exist_ok=True)
    md = report_md(result, len(tasks), len(unseen))
    report = {"config": {"base": base.fingerprint(), "scenes": cfg.n_scenes, "conditions": cfg.conditions,
                         "train_per_task": cfg.train_per_task, "eval_per_task": cfg.eval_per_task,
                         "camera_only": a.camera_only, "memories": memories, "order_seed": cfg.order_seed},
              "tasks": [t.name for t in tasks], "unseen": [t.name for t in unseen], "routing": result,
              "seconds": round(time.time() - t0, 1)}
    (out / "vln_routing.json").write_text(json.dumps(report, indent=1))
    (out / "vln_routing.md").write_text(md + "\n")
    plot(result, out / "vln_routing.png")
    print(md)
    print(json.dumps({"routing": result, "seconds": report["seconds"], "out": str(out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
