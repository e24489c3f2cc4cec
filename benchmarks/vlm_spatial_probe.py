#!/usr/bin/env python
"""Can a tiny random-init VLM learn *where* a small object is? The diagnostic behind issues #5 and #6.

Task (``training.vlm.grounding``): one coloured square of ``size`` px on a dark noisy 64 px image, "which side
is the red square on?" / "is the red square at the top or the bottom?" (chance 0.5). Per size the script measures

* ``probe_flat`` / ``probe_mean``: a linear probe (logistic regression) on the random-init vision tower's
  projected features for the side questions, tokens flattened or mean-pooled: whether the information is *there*;
* ``direct``: held-out exact-match accuracy after fine-tuning the whole VLM on that size alone;
* ``curriculum``: the same model trained through the sizes from the largest down (``pretrain_grounding``), with
  the same total number of steps as each direct run, accuracy after the stage of that size.

``--binding`` runs the binding recipe instead (``GroundingConfig(stages="bind")``: colour of one square -> colour of
the square on a named side -> side of a named colour among two, 24 -> 12 px) from fresh models of several seeds and
reports the held-out accuracy after every stage (chance: 0.5 for sides, 1/8 for colours).

Full mode writes ``docs/vlm_spatial_probe.{json,md}`` (``--binding``: ``docs/vlm_binding.{json,md}``). Last stdout
line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
log = logging.getLogger("vlm_spatial_probe")

from training.vln.config import TINY_BACKBONE  # noqa: E402 - after the sys.path insert

#: the navigator's tiny backbone (LM 128 x 3, SigLIP 96 x 2; training.vln.config.TINY_BACKBONE) with a smaller
#: tokenizer for the few question words
SIZES = {**TINY_BACKBONE, "bpe_vocab_size": 300}
MODES = {"quick": {"sizes": [24, 8], "direct": [8], "stage_steps": 150, "batch": 16, "patch": 16, "train": 800,
                   "bind_steps": 40, "bind_seeds": [0]},
         "full": {"sizes": [24, 16, 12, 8, 6], "direct": [24, 8, 6], "stage_steps": 300, "batch": 32, "patch": 16,
                  "train": 2000, "bind_steps": 450, "bind_seeds": [0, 1, 2]}}


def linear_probe(train_x, train_y, test_x, test_y, steps: int = 300) -> float:
    """Held-out accuracy of a full-batch logistic regression (Adam, standardised inputs)."""
    import torch

    mu, sd = train_x.mean(0), train_x.std(0) + 1e-6
    a, b = (train_x - mu) / sd, (test_x - mu) / sd
    lin = torch.nn.Linear(a.shape[1], 1)
    opt = torch.optim.Adam(lin.parameters(), lr=1e-2, weight_decay=1e-4)
    y = torch.tensor(train_y, dtype=torch.float32)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(lin(a).squeeze(1), y).backward()
        opt.step()
    with torch.no_grad():
        return round(float(((lin(b).squeeze(1) > 0).long() == torch.tensor(test_y)).float().mean()), 3)


def _fresh_vlm(work: Path, mode: dict, name: str, seed: int) -> object:
    import torch

    from agents.vlm.bundle import build_tiny_vlm, load_vlm
    from training.vlm import grounding_corpus

    torch.manual_seed(seed)
    return load_vlm(build_tiny_vlm(work / name, image_size=64, overwrite=True, corpus=grounding_corpus(), seed=seed,
                                   patch_size=mode["patch"], **SIZES))


def probes(bundle: object, size: int, seed: int = 0) -> dict:
    """Linear probes on the random-init vision features (side questions only: the label is in the image)."""
    import torch
    from PIL import Image

    from training.vlm import make_grounding_set

    def data(n: int, s: int) -> tuple:
        items = [it for it in make_grounding_set(n, size, 64, 1, s) if "side" in it[1]]
        pv = bundle.processor.image_processor(images=[Image.fromarray(i) for i, _, _ in items], return_tensors="pt")
        with torch.no_grad():
            f = bundle.model.get_image_features(pixel_values=pv["pixel_values"])
        f = (f if isinstance(f, torch.Tensor) else f.pooler_output).float()
        return f, [int(a == "right") for _, _, a in items]

    (ftr, ytr), (fte, yte) = data(1000, seed + 11), data(300, seed + 12)
    return {"image_tokens": int(ftr.shape[1]), "probe_flat": linear_probe(ftr.flatten(1), ytr, fte.flatten(1), yte),
            "probe_mean": linear_probe(ftr.mean(1), ytr, fte.mean(1), yte)}


def run(mode: dict, work: Path, seed: int = 0, progress: bool = False) -> dict:
    from training.vlm import GroundingConfig, pretrain_grounding

    sizes = sorted(mode["sizes"], reverse=True)
    total = mode["stage_steps"] * len(sizes)
    common = dict(samples_per_stage=mode["train"], batch_size=mode["batch"], seed=seed)
    bundle = _fresh_vlm(work, mode, "curriculum", seed)
    res: dict = {str(s): probes(bundle, s, seed) for s in sizes}
    t0 = time.time()
    cur = pretrain_grounding(bundle, GroundingConfig(stages=[[s, 1, 1.0] for s in sizes],
                                                     steps_per_stage=mode["stage_steps"], **common), progress)
    log.info("curriculum %s: %s (%.0f s)", sizes, cur["stages"], time.time() - t0)
    for st in cur["stages"]:
        res[str(st["size"])]["curriculum"] = st["accuracy"]
    for s in mode["direct"]:
        t0 = time.time()
        direct = pretrain_grounding(_fresh_vlm(work, mode, f"direct_{s}", seed),
                                    GroundingConfig(stages=[[s, 1, 1.0]], steps_per_stage=total, **common), progress)
        res[str(s)]["direct"] = direct["final_accuracy"]
        log.info("direct %d px, %d steps: %.3f (%.0f s)", s, total, direct["final_accuracy"], time.time() - t0)
    return {"total_steps": total, "sizes": res}


def run_binding(mode: dict, work: Path, progress: bool = False) -> dict:
    """The ``bind`` preset from a fresh model per seed: held-out accuracy after each stage."""
    from training.vlm import GroundingConfig, pretrain_grounding

    seeds: dict = {}
    for seed in mode["bind_seeds"]:
        t0 = time.time()
        cfg = GroundingConfig(stages="bind", steps_per_stage=mode["bind_steps"], samples_per_stage=mode["train"],
                              batch_size=mode["batch"], seed=seed)
        res = pretrain_grounding(_fresh_vlm(work, mode, f"bind_{seed}", seed), cfg, progress)
        seeds[str(seed)] = [st["accuracy"] for st in res["stages"]]
        log.info("binding seed %d: %s (%.0f s)", seed, seeds[str(seed)], time.time() - t0)
    return {"stages": cfg.stages, "steps_per_stage": mode["bind_steps"], "seeds": seeds}


def binding_table(results: dict, mode: dict) -> str:
    head = [f"{st[3]} {st[0]} px" for st in results["stages"]]
    lines = [f"Binding recipe (`GroundingConfig(stages=\"bind\")`) from a fresh tiny random-init PaliGemma per seed "
             f"(patch {mode['patch']}), {results['steps_per_stage']} steps of batch {mode['batch']} per stage, "
             f"{mode['train']} training and 200 held-out images per stage; held-out exact-match accuracy after each "
             "stage (chance: 1/8 for colour questions, 0.50 for sides).\n",
             "| seed | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for seed, accs in results["seeds"].items():
        lines.append(f"| {seed} | " + " | ".join(f"{a:.2f}" for a in accs) + " |")
    return "\n".join(lines) + "\n"


def table(results: dict, mode: dict) -> str:
    lines = [f"Tiny random-init PaliGemma (LM 128 x 3, SigLIP 96 x 2, patch {mode['patch']}: "
             f"{(64 // mode['patch']) ** 2} image tokens), 64 px "
             f"images with one coloured square, side / top-bottom questions (chance 0.50), {mode['train']} training "
             f"and 200 held-out images per size, batch {mode['batch']}, lr 1e-3. Curriculum: "
             f"{mode['stage_steps']} steps per size from the largest down; direct: {results['total_steps']} steps on "
             "one size.\n",
             "| square | linear probe, flattened tokens | linear probe, mean-pooled | direct fine-tune | "
             "curriculum |", "|---|---|---|---|---|"]
    for s, r in results["sizes"].items():
        d = f"{r['direct']:.2f}" if "direct" in r else "-"
        lines.append(f"| {s} px | {r['probe_flat']:.2f} | {r['probe_mean']:.2f} | {d} | {r['curriculum']:.2f} |")
    return "\n".join(lines) + "\n"


def write_results(out_dir: str | None, stem: str, mode: dict, results: dict, text: str) -> None:
    """``<stem>.json`` and ``<stem>.md`` in ``out_dir`` (default ``docs/``); the table also goes to stdout."""
    out = Path(out_dir) if out_dir else ROOT / "docs"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps({"mode": mode, **results}, indent=1))
    (out / f"{stem}.md").write_text(text)
    print(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="sizes 24 -> 8 px, 150 steps per size (< 1 minute; a smoke run: too short to show the "
                        "curriculum effect reliably)")
    p.add_argument("--stage-steps", type=int, default=None, help="curriculum steps per size (default: the mode's)")
    p.add_argument("--sizes", default=None, help="curriculum square sizes in px, comma-separated (default: the mode's)")
    p.add_argument("--direct", default=None, help="sizes also trained directly, comma-separated (default: the mode's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--binding", action="store_true",
                   help="run the binding recipe (stages='bind') from fresh models instead of the localisation probe")
    p.add_argument("--bind-seeds", default=None, help="binding-run seeds, comma-separated (default: the mode's)")
    p.add_argument("--bind-steps", type=int, default=None, help="steps per binding stage (default: the mode's)")
    p.add_argument("--progress", action="store_true", help="show progress bars")
    p.add_argument("--out", default=None, help="where full mode writes its .json/.md (default docs/)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(message)s")
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    mode = dict(MODES["quick" if a.quick else "full"])
    if a.stage_steps is not None:
        if a.stage_steps < 1:
            p.error("--stage-steps must be >= 1")
        mode["stage_steps"] = a.stage_steps
    if a.bind_steps is not None:
        if a.bind_steps < 1:
            p.error("--bind-steps must be >= 1")
        mode["bind_steps"] = a.bind_steps
    for key in ("sizes", "direct", "bind_seeds"):
        if getattr(a, key):
            try:
                mode[key] = [int(v) for v in getattr(a, key).split(",")]
            except ValueError:
                p.error(f"--{key} must be comma-separated integers")
    if not set(mode["direct"]) <= set(mode["sizes"]) or not all(1 <= v <= 32 for v in mode["sizes"]):
        p.error("--direct sizes must be among --sizes, and sizes in 1..32 px")
    t0 = time.time()
    if a.binding:
        with tempfile.TemporaryDirectory(prefix="binding_") as tmp:
            results = run_binding(mode, Path(tmp), a.progress)
        if not a.quick:
            write_results(a.out, "vlm_binding", mode, results, binding_table(results, mode))
        print(json.dumps({"benchmark": "vlm_spatial_probe", "task": "bind", "mode": "quick" if a.quick else "full",
                          "seconds": round(time.time() - t0, 1), "steps_per_stage": mode["bind_steps"],
                          "final": {k: v[-1] for k, v in results["seeds"].items()}}))
        return 0
    with tempfile.TemporaryDirectory(prefix="spatial_probe_") as tmp:
        results = run(mode, Path(tmp), a.seed, a.progress)
    if not a.quick:
        write_results(a.out, "vlm_spatial_probe", mode, results, table(results, mode))
    sizes = results["sizes"]
    summary = {"benchmark": "vlm_spatial_probe", "mode": "quick" if a.quick else "full",
               "seconds": round(time.time() - t0, 1), "total_steps": results["total_steps"],
               "direct": {k: v["direct"] for k, v in sizes.items() if "direct" in v},
               "curriculum": {k: v["curriculum"] for k, v in sizes.items()},
               "probe_flat": {k: v["probe_flat"] for k, v in sizes.items()},
               "probe_mean": {k: v["probe_mean"] for k, v in sizes.items()}}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
