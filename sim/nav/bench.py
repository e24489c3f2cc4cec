"""Throughput of the embedded simulator: env steps/s with RGB-D vs the raw renderer rate."""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from agents.core.baselines import RandomPolicy
from sim.core.env import NavEnvConfig
from sim.core.frames import habitat_to_mj, theta_to_phi
from sim.nav.env import MujocoNavEnv
from sim.nav.episode_gen import generate_episodes, scene_list


def bench_sim(size: int = 128, frames: int = 200, quality: str = "default", condition: str = "normal",
              repeats: int = 3, seed: int = 0) -> dict[str, Any]:
    """Median over ``repeats`` blocks of ``frames`` steps: env fps, raw RGB-D render fps and their ratio."""
    if frames < 1 or repeats < 1:
        raise ValueError("frames and repeats must be >= 1")
    episodes, gts, _ = generate_episodes(scene_list(1, seed=seed), 4, seed=seed, progress=False)
    env = MujocoNavEnv(NavEnvConfig(width=size, height=size, quality=quality, condition=condition), episodes, gts)
    policy = RandomPolicy(seed=seed, probs=(0.0, 0.6, 0.2, 0.2))
    try:
        obs, _ = env.reset()
        env_rates, raw_rates = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(frames):
                obs, _, term, trunc, _ = env.step(policy.act(env.to_observation(obs)))
                if term or trunc:
                    obs, _ = env.reset()  # rare with no STOP; counted in the env rate like a real rollout
            env_rates.append(frames / (time.perf_counter() - t0))
            poses = [habitat_to_mj(p) for p in env.trajectory[-min(len(env.trajectory), 50):]]
            phi = theta_to_phi(env.pose.heading)
            t0 = time.perf_counter()
            for i in range(frames):
                x, y, _ = poses[i % len(poses)]
                env._renderer.render(x, y, phi + 0.26 * (i % 24), depth=True)
            raw_rates.append(frames / (time.perf_counter() - t0))
    finally:
        env.close()
    fps, raw = statistics.median(env_rates), statistics.median(raw_rates)
    return {"fps": round(fps, 1), "raw_fps": round(raw, 1), "ratio": round(fps / raw, 3), "size": size,
            "quality": quality, "condition": condition, "frames": frames, "repeats": repeats,
            "fps_blocks": [round(r, 1) for r in env_rates], "raw_blocks": [round(r, 1) for r in raw_rates],
            "rgb_mean": float(np.mean(obs["rgb"]))}
