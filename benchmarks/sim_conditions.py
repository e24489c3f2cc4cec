#!/usr/bin/env python
"""How much each all-day condition shifts the rendered images: mean brightness and contrast (std) of the
first frames of generated episodes, relative to `normal`, with and without the physical lighting.
Last line: one JSON object."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("MUJOCO_GL", "egl")


def measure(episodes, gts, condition: str, physical: bool, size: int) -> tuple[float, float]:
    import numpy as np

    from sim.core.env import NavEnvConfig
    from sim.nav.env import MujocoNavEnv

    env = MujocoNavEnv(NavEnvConfig(width=size, height=size, quality="fast", condition=condition,
                                    physical_conditions=physical), episodes, gts)
    means, stds = [], []
    try:
        for i in range(len(episodes)):
            obs, _ = env.reset(options={"episode_index": i})
            rgb = obs["rgb"].astype(np.float32)
            means.append(float(rgb.mean()))
            stds.append(float(rgb.std()))
    finally:
        env.close()
    return statistics.median(means), statistics.median(stds)


def plot_conditions(episodes, gts, path: str) -> None:
    """One episode's first frame (224 px) under every condition, physical lighting + camera model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.core.env import NavEnvConfig
    from sim.nav.conditions import available_conditions
    from sim.nav.env import MujocoNavEnv

    probe = MujocoNavEnv(NavEnvConfig(), episodes, gts)
    try:  # the start view that sees furthest (not a wall)
        depth = [float(probe.reset(options={"episode_index": i})[0]["depth"].mean()) for i in range(len(episodes))]
        best = max(range(len(episodes)), key=depth.__getitem__)
    finally:
        probe.close()
    conds = available_conditions()
    fig, axes = plt.subplots(1, len(conds), figsize=(3.2 * len(conds), 3.6))
    for ax, cond in zip(axes, conds):
        env = MujocoNavEnv(NavEnvConfig(condition=cond), episodes, gts)
        try:
            obs, _ = env.reset(options={"episode_index": best})
        finally:
            env.close()
        ax.imshow(obs["rgb"])
        ax.set_title(f"{cond} (mean {obs['rgb'].mean():.0f})", fontsize=9)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="few episodes (under a minute)")
    ap.add_argument("--episodes", type=int, default=None, help="episodes (default 40, quick 8)")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--plot", default=None, help="write a PNG of one frame under every condition (e.g. docs/...)")
    args = ap.parse_args()
    from sim.nav.conditions import available_conditions
    from sim.nav.episode_gen import generate_episodes, scene_list

    n = args.episodes or (8 if args.quick else 40)
    episodes, gts, _ = generate_episodes(scene_list(max(1, n // 4)), 4, progress=False)
    episodes = episodes[:n]
    rows = {}
    for physical in (True, False):
        base_m, base_s = measure(episodes, gts, "normal", physical, args.size)
        for cond in available_conditions():
            m, s = measure(episodes, gts, cond, physical, args.size)
            rows[f"{cond}{'' if physical else '/camera_only'}"] = {
                "mean": round(m, 1), "std": round(s, 1), "brightness_ratio": round(m / base_m, 3),
                "contrast_ratio": round(s / base_s, 3)}
            print(f"{cond:>13} physical={physical!s:5}  mean {m:6.1f} ({m / base_m:5.2f}x)  "
                  f"std {s:5.1f} ({s / base_s:5.2f}x)", flush=True)
    if args.plot:
        plot_conditions(episodes, gts, args.plot)
    print(json.dumps({"benchmark": "sim_conditions", "date": time.strftime("%Y-%m-%d"), "episodes": len(episodes),
                      "size": args.size, "conditions": rows}))


if __name__ == "__main__":
    main()
