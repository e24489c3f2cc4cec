#!/usr/bin/env python
"""Does this machine train and render bit for bit like another? (issue #6, docs/alldaywalker.md "A twentieth look")

The base navigator of one config and seed came out different on two machines (SR 0.37 against 0.13 on its own
episodes). This measures the two things a rebuild depends on, under the CPU numerics of
``--pin-numerics`` (:func:`agents.core.numerics.pin_choice`):

- ``frames``: SHA-256 of the first frames of the config's first evaluation episodes, rendered by MuJoCo (EGL) in
  normal light and at night;
- ``weights_sha``: SHA-256 of a tiny VLM's weights (the config's backbone architecture, seed 0) after ``--steps``
  AdamW steps on fixed random image-question examples; ``init_weights_sha`` the same before training;
- ``ops``: hashes of single operations on fixed inputs drawn by numpy, one per library path (MKL's GEMM, oneDNN's
  convolution, torch's reductions, vectorised maths and normal sampler), to say where two machines part.

``--variants`` trains again in subprocesses, each with one setting changed (the same settings as a control, one
thread, torch's / MKL's / oneDNN's baseline ISA path), and reports whether the weights stay bit-identical and their
largest difference. Compare ``frames`` and ``weights_sha`` with another machine's (docs/results.md lists this
box's). Last stdout line: one JSON object. ``--quick``: fewer steps (< 1 minute).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
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

from agents.core.numerics import PIN_CHOICES, PIN_HELP, numerics_info, pin_choice  # noqa: E402  (imports no torch)

#: variant name -> (environment changes, threads or None for --threads); the control changes nothing
VARIANTS: dict[str, tuple[dict[str, str], int | None]] = {
    "same settings (control)": ({}, None),
    "1 thread": ({}, 1),
    "torch kernels: baseline ISA": ({"ATEN_CPU_CAPABILITY": "default"}, None),
    "MKL GEMMs: compatible path": ({"MKL_CBWR": "COMPATIBLE"}, None),
    "oneDNN convolutions: SSE4.1": ({"ONEDNN_MAX_CPU_ISA": "SSE41"}, None),
}


def sha(arrays: list[Any]) -> str:
    """SHA-256 (first 16 hex digits) of the arrays' bytes, in order."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def frame_hashes(cfg: Any, episodes: int) -> dict[str, str]:
    """Per condition, the hash of the first frames of the first ``episodes`` evaluation episodes."""
    from training.vln.navigator import make_env, make_episodes

    eps, gts = make_episodes(cfg, "eval")
    out = {}
    for cond in ("normal", "low_light"):
        env = make_env(cfg, cond, eps[:episodes], gts)
        try:
            out[cond] = sha([env.reset(options={"episode_index": i})[0]["rgb"] for i in range(min(episodes, len(eps)))])
        finally:
            env.close()
    return out


def op_hashes() -> dict[str, str]:
    """Hashes of single operations on fixed inputs, one per library whose CPU path the pin sets: when two machines'
    weights differ, these say where the float reductions part (MKL's GEMM, oneDNN's convolution, torch's own
    reductions and vectorised maths, torch's normal sampler that initialises weights)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    # inputs from numpy, not torch's sampler: its vectorised path differs between pins, and each probe must see one op
    rng = np.random.default_rng(0)
    a, b, img, kern, x = (torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
                          for shape in ((257, 384), (384, 129), (2, 3, 64, 64), (32, 3, 8, 8), (64, 1000)))
    probes = {
        "gemm (MKL)": lambda: a @ b,
        "conv2d (oneDNN)": lambda: F.conv2d(img, kern, stride=8),
        "softmax, layer_norm, sum (torch)": lambda: torch.cat([x.softmax(-1), F.layer_norm(x, (1000,)),
                                                                 x.sum(-1, keepdim=True)], 1),
        # apart: under one pin GELU differs between torch's kernels, exp does not (docs/alldaywalker.md "A
        # twenty-second look")
        "gelu (torch)": lambda: F.gelu(x),
        "exp (torch)": lambda: x.exp(),
        "normal init (torch)": lambda: torch.empty(4096).normal_(generator=torch.Generator().manual_seed(1)),
    }
    with torch.no_grad():
        return {name: sha([f().contiguous().numpy()]) for name, f in probes.items()}


def train_weights(cfg: Any, steps: int) -> tuple[Any, Any]:
    """The tiny VLM's weights (flat float32 arrays) as initialised and after ``steps`` steps on fixed random
    examples."""
    import numpy as np
    import torch

    from agents.vlm import training_example
    from agents.vlm.bundle import load_vlm
    from training.vlm.grounding import fit_examples, grounding_corpus
    from training.vln.backbone import BASE_WORDS, _tiny
    from training.vln.scene_grounding import scene_grounding_corpus

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        bundle = load_vlm(_tiny(cfg, Path(d), grounding_corpus() + scene_grounding_corpus() + BASE_WORDS, 0))
        rng = np.random.default_rng(0)
        answers = ["left.", "right.", "ahead.", "none."]
        examples = [training_example(bundle, rng.integers(0, 256, (cfg.image_size, cfg.image_size, 3), np.uint8),
                                     f"where is object {i}?", answers[i % 4]) for i in range(32)]
        def flat() -> Any:
            state = bundle.model.state_dict()
            return np.concatenate([state[k].detach().float().reshape(-1).numpy() for k in sorted(state)])

        initial = flat()
        opt = torch.optim.AdamW(bundle.model.parameters(), lr=1e-3, weight_decay=0.0)
        fit_examples(bundle, opt, examples, steps, 8, np.random.default_rng(0), "steps", progress=False)
        return initial, flat()


def run_variants(a: argparse.Namespace, ref: Any) -> dict[str, dict[str, Any]]:
    """Train in a subprocess per variant; compare its weights with ``ref``."""
    import numpy as np

    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name, (env_change, threads) in VARIANTS.items():
            path = Path(d) / "w.npy"
            cmd = [sys.executable, __file__, "--config", a.config, "--steps", str(a.steps), "--pin-numerics", "none",
                   "--threads", str(threads or a.threads), "--worker", str(path)]
            subprocess.run(cmd, env={**os.environ, **env_change}, check=True, capture_output=True, text=True)
            w = np.load(path)
            out[name] = {"same": bool(np.array_equal(w, ref)), "max_abs_diff": float(np.abs(w - ref).max()),
                         "weights_sha": sha([w])}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs/vln/search_fine_patches.yaml"),
                   help="navigator config (its backbone architecture, image size and episodes)")
    p.add_argument("--pin-numerics", default="auto", choices=PIN_CHOICES,
                   help=PIN_HELP)
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--steps", type=int, default=20, help="training steps")
    p.add_argument("--episodes", type=int, default=4, help="evaluation episodes whose first frames are hashed")
    p.add_argument("--variants", action="store_true", help="also train with one setting changed at a time")
    p.add_argument("--quick", action="store_true", help="5 steps, 2 episodes")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # a variant's subprocess: weights to this .npy
    a = p.parse_args(argv)
    if a.steps < 1 or a.threads < 1 or a.episodes < 1:
        p.error("--steps, --threads and --episodes must be positive")
    if a.quick:
        a.steps, a.episodes = min(a.steps, 5), min(a.episodes, 2)
    try:
        pinned = pin_choice(a.pin_numerics)
    except ValueError as exc:
        p.error(str(exc))
    import numpy as np
    import torch

    from training.vln.config import VLNTrainConfig

    torch.set_num_threads(a.threads)
    cfg = VLNTrainConfig.from_yaml(a.config)
    t0 = time.time()
    w0, w = train_weights(cfg, a.steps)
    if a.worker:
        np.save(a.worker, w)
        return 0
    result: dict[str, Any] = {"config": str(Path(a.config).name), "steps": a.steps, "pinned": pinned,
                              "numerics": numerics_info(), "weights_sha": sha([w]),
                              "init_weights_sha": sha([w0]), "ops": op_hashes(),
                              "frames": frame_hashes(cfg, a.episodes)}
    if a.variants:
        result["variants"] = run_variants(a, w)
    result["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(result, default=float), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
