#!/usr/bin/env python
"""Closed-loop SR / SPL / OSR of trained navigators against the blind floor, per condition, on the same episodes.

``--run DIR [DIR ...]``: finished navigators (a ``base_navigator`` cache entry ``runs/cache/vln/base-<hash>`` or an
``allday train vln`` output: ``metrics.json`` with the config, and ``final/vlm`` or ``checkpoint/model``). Every run
is rolled out on the held-out episodes of the first run's config (``--per-scene`` per house; the runs must share its
houses and episode settings) under each of ``--conditions``; VLN-CE's blind policy (forward N times, then stop, for
each N of ``--blind``) on the same episodes is the floor a navigator must beat for its SR to come from what it sees.
``--execute-steps`` lists how many of the actions of each model call are executed before the model is called again
(0: all it wrote, the default; 1: re-plan at every step). ``--camera-only`` renders a condition as the camera model
on the normally lit scene (the lifelong benchmark's ``--camera-only``).

``--quick``: an untrained tiny backbone and the blind policy on two episodes, a smoke run (< 1 minute).
Last stdout line: one JSON object (``rows``: one per run, condition and execute_steps; ``blind``: per condition, the
best N's row; ``margin``: per run and condition, its best SR minus the best blind SR).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
log = logging.getLogger("vln_closed_loop")

from vln_first_action import load_run, quick_backbone  # noqa: E402 - the same run layout and --quick set-up

#: config keys that define the held-out episodes: runs compared on one episode set must agree on them
EPISODE_KEYS = ("n_scenes", "scene_seed", "seed", "min_distance", "max_distance", "max_steps", "success_distance",
                "same_room", "goal_side", "image_size")


def check_same_episodes(cfgs: list[Any], names: list[str]) -> None:
    """ValueError when two runs would be scored on different held-out episodes."""
    for cfg, name in zip(cfgs[1:], names[1:]):
        diff = [k for k in EPISODE_KEYS if getattr(cfg, k) != getattr(cfgs[0], k)]
        if diff:
            raise ValueError(f"{name} differs from {names[0]} in {diff}: the runs are not scored on the same episodes")


def score(policy: Any, cfg: Any, episodes: Any, gts: Any, condition: str) -> dict[str, float]:
    """SR / SPL / OSR / NE and the standard error of the SR over the episodes."""
    from training.vln.navigator import evaluate_policy

    agg = evaluate_policy(policy, cfg, episodes, gts, condition)
    n, sr = len(episodes), float(agg["sr"])
    return {**{k: round(float(agg[k]), 3) for k in ("sr", "spl", "osr", "ne")}, "episodes": n,
            "sr_se": round(math.sqrt(sr * (1 - sr) / n), 3)}


def evaluate(runs: list[tuple[str, Any, Any]], cfg: Any, conditions: list[str], per_scene: int | None,
             blind: list[int], execute_steps: list[int], progress: bool = False) -> dict[str, Any]:
    """Rows for every (run, condition, execute_steps) and every (blind N, condition); ``runs``: (name, bundle,
    agent config). ``cfg`` gives the episodes and the rendering."""
    from tqdm import tqdm

    from agents.core.baselines import ForwardPolicy
    from agents.vln.modeling_vln import AlldayWalkerPolicy
    from training.vln.navigator import make_episodes

    episodes, gts = make_episodes(cfg, "eval", per_scene)
    if not episodes:
        raise ValueError("no held-out episodes could be sampled with this config")
    jobs = [(name, c, ex) for name, _, _ in runs for c in conditions for ex in execute_steps]
    rows, models = [], {name: (bundle, agent) for name, bundle, agent in runs}
    for name, cond, ex in tqdm(jobs, desc="navigators", disable=not progress):
        bundle, agent = models[name]
        policy = AlldayWalkerPolicy(bundle, replace(agent, execute_steps=min(ex, agent.num_future_steps)))
        rows.append({"run": name, "condition": cond, "execute_steps": ex,
                     **score(policy, cfg, episodes, gts, cond)})
        log.info("%s", rows[-1])
    floor = []
    for cond in conditions:
        for n in blind:
            floor.append({"run": f"blind{n}", "condition": cond, **score(ForwardPolicy(n), cfg, episodes, gts, cond)})
    best = {c: max((r for r in floor if r["condition"] == c), key=lambda r: r["sr"]) for c in conditions} \
        if floor else {}
    margin = {name: {c: round(max(r["sr"] for r in rows if r["run"] == name and r["condition"] == c)
                              - best[c]["sr"], 3) for c in conditions} for name, _, _ in runs} if best else {}
    return {"rows": rows, "blind_rows": floor, "blind": best, "margin": margin}


def _ints(text: str, name: str) -> list[int]:
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} must be comma-separated integers, got {text!r}") from None
    if any(v < 0 for v in out):
        raise argparse.ArgumentTypeError(f"{name} must be >= 0, got {text!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--run", nargs="+", default=[], help="finished navigator runs (cache entries or train outputs)")
    p.add_argument("--conditions", default="normal,low_light", help="comma-separated conditions to roll out under")
    p.add_argument("--per-scene", type=int, default=0, help="held-out episodes per house (0: the config's)")
    p.add_argument("--blind", type=lambda t: _ints(t, "--blind"), default=[4, 6, 8],
                   help="forward steps of the blind policies (comma-separated)")
    p.add_argument("--execute-steps", type=lambda t: _ints(t, "--execute-steps"), default=[0],
                   help="actions executed per model call (comma-separated; 0: all it wrote)")
    p.add_argument("--camera-only", action="store_true", help="conditions change the camera model only")
    p.add_argument("--quick", action="store_true", help="untrained tiny backbone, 2 episodes (smoke run)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--out", default=None, help="also write the JSON report here")
    p.add_argument("--progress", action="store_true", help="show progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="log every row")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(message)s")
    if bool(a.run) == a.quick:
        p.error("give --run DIR [DIR ...] (trained navigators) or --quick")
    if a.per_scene < 0:
        p.error("--per-scene must be >= 0")
    conditions = [c.strip() for c in a.conditions.split(",") if c.strip()]
    from sim.nav.conditions import available_conditions

    unknown = [c for c in conditions if c not in available_conditions()]
    if not conditions or unknown:
        p.error(f"--conditions: unknown {unknown or 'none given'}; known: {sorted(available_conditions())}")
    import torch

    import training.vln  # noqa: F401 - preloads triton's LLVM before any EGL context
    from agents.vlm.bundle import load_vlm

    if a.threads:
        torch.set_num_threads(a.threads)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="vln_closed_loop_") as tmp:
        if a.quick:
            cfg, model_dir = quick_backbone(Path(tmp))
            runs = [("untrained", load_vlm(model_dir), cfg.agent_config())]
            names = ["untrained"]
        else:
            try:
                loaded = [load_run(Path(r)) for r in a.run]
                check_same_episodes([c for c, _ in loaded], a.run)
            except ValueError as exc:
                p.error(str(exc))
            cfg = loaded[0][0]
            runs = [(r, load_vlm(m), c.agent_config()) for r, (c, m) in zip(a.run, loaded)]
            names = list(a.run)
        if a.camera_only:
            cfg = replace(cfg, physical_conditions=False)
        report = evaluate(runs, cfg, conditions, a.per_scene or None, a.blind, a.execute_steps, a.progress)
    out = {"benchmark": "vln_closed_loop", "mode": "quick" if a.quick else "runs", "runs": names,
           "conditions": conditions, "camera_only": a.camera_only, "seconds": round(time.time() - t0, 1), **report}
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
