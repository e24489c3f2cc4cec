"""Source 1: robosuite demonstrations recorded from the scripted experts of :mod:`sim.manip`.

Each episode records the camera image before every action, the expert's end-effector delta (metres, base frame),
its gripper command and its phase label. With ``noise_m > 0`` the executed step is the expert's plus Gaussian noise
(DART, Laskey et al. 2017) while the recorded label stays the expert's clean action, so the demonstrations visit
states off the expert's path and show how it corrects from them. Episodes are cached to ``cache_dir`` (one ``.npz``
per task, image size, camera, noise and seed), so a second call with the same arguments reads the disk instead of
simulating.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from training.vla.data.episode import Episode, load_episode, save_episode

log = logging.getLogger(__name__)


def _cache_name(task: str, image_size: int, seed: int, max_step_m: float, camera: str = "agentview",
                noise_m: float = 0.0) -> str:
    # "world<N>": recorded in the robosuite model built with ManipTaskConfig.model_seed N (earlier caches are not);
    # the default camera and no noise keep the names of earlier caches
    from sim.manip.env import ManipTaskConfig

    world = ManipTaskConfig().model_seed
    view = "" if camera == "agentview" else f"_{camera}"
    dart = f"_dart{noise_m * 1000:g}mm" if noise_m > 0 else ""
    return f"{task}_{image_size}px{view}_step{round(max_step_m * 1000)}mm{dart}_world{world}_seed{seed}.npz"


def _check_noise(noise_m: float) -> float:
    noise_m = float(noise_m)
    if not 0.0 <= noise_m <= 0.05:  # NaN fails too
        raise ValueError(f"noise_m (sd of the executed step's noise, metres) must be in [0, 0.05], got {noise_m}")
    return noise_m


def record_episode(env: Any, task: str, seed: int, max_steps: int = 200, max_step_m: float = 0.03,
                   noise_m: float = 0.0) -> Episode:
    """Roll the scripted expert of ``task`` out in ``env`` (a :class:`sim.manip.ManipTask`) from ``seed``; with
    ``noise_m`` the executed steps get Gaussian noise of that sd per axis (seeded by ``seed``; the labels stay the
    expert's)."""
    from sim.manip import make_expert
    from sim.manip.action import EEDeltaAction

    noise_m = _check_noise(noise_m)
    expert = make_expert(task, max_step_m=max_step_m)
    obs = env.reset(seed)
    expert.reset()
    if obs.get("rgb") is None:
        raise ValueError("the ManipTask must render (render=True) to record frames")
    rng = np.random.default_rng([seed, 0xDA27])
    frames, deltas, grip, phases = [], [], [], []
    objects0 = {k: np.round(v, 4).tolist() for k, v in obs["objects"].items()}
    success = False
    for _ in range(max_steps):
        a = EEDeltaAction.parse(expert.act(obs))
        frames.append(obs["rgb"])
        deltas.append(a.delta)
        grip.append(a.gripper)
        phases.append(a.phase)
        executed = np.asarray(a.delta)
        if noise_m > 0:
            executed = np.clip(executed + rng.normal(0.0, noise_m, 3), -max_step_m, max_step_m)
        obs = env.step(executed, a.gripper)
        if obs["success"]:
            success = True
            break
    return Episode(np.stack(frames), np.asarray(deltas, np.float32), np.asarray(grip, np.float32), phases,
                   env.instruction, task,
                   {"source": "robosuite", "seed": int(seed), "success": bool(success), "steps": len(frames),
                    "objects_initial": objects0, "image_size": int(env.config.image_size),
                    "camera": str(env.config.camera), "noise_m": noise_m})


def _cached(path: Path, max_steps: int) -> Episode | None:
    """The cached demonstration at ``path`` if it is what recording with ``max_steps`` would give (the expert is
    deterministic: a success within the limit, or a failure that ran exactly that long); None to record it again
    (missing, unreadable, or recorded under another step limit)."""
    if not path.is_file():
        return None
    try:
        ep = load_episode(path)
    except ValueError as exc:
        log.warning("unreadable cached demonstration, recording it again: %s", exc)
        return None
    steps = int(ep.meta.get("steps", len(ep.frames)))
    if (steps <= max_steps) if ep.meta.get("success", False) else (steps == max_steps):
        return ep
    log.info("%s was recorded under another step limit (%d steps, success %s); recording it again with %d", path,
             steps, ep.meta.get("success", False), max_steps)
    return None


def record_robosuite(task: str, n_episodes: int, image_size: int = 64, seed: int = 0,
                     cache_dir: str | Path | None = None, max_steps: int = 200, max_step_m: float = 0.03,
                     only_success: bool = True, progress: bool = True, camera: str = "agentview",
                     noise_m: float = 0.0) -> list[Episode]:
    """``n_episodes`` expert demonstrations of ``task`` (seeds ``seed``, ``seed + 1``, ...), cached in ``cache_dir``,
    seen through robosuite's ``camera`` (``agentview``, ``robot0_eye_in_hand``, ...); ``noise_m``: DART noise on
    the executed steps (see :func:`record_episode`).

    With ``only_success`` failed rollouts are skipped and further seeds tried (at most ``3 * n_episodes`` seeds).
    """
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
    if not 16 <= image_size <= 512:
        raise ValueError(f"image_size must be in 16..512, got {image_size}")
    noise_m = _check_noise(noise_m)
    cache = Path(cache_dir) if cache_dir is not None else None
    episodes: list[Episode] = []
    env = None
    bar = tqdm(total=n_episodes, desc=f"record {task}", disable=not progress, leave=False)
    try:
        s = seed
        while len(episodes) < n_episodes and s < seed + 3 * n_episodes:
            path = cache / _cache_name(task, image_size, s, max_step_m, camera, noise_m) if cache else None
            ep = _cached(path, max_steps) if path is not None else None
            if ep is None:
                if env is None:
                    from sim.manip import ManipTask

                    env = ManipTask(task=task, image_size=image_size, camera=camera)
                ep = record_episode(env, task, s, max_steps, max_step_m, noise_m)
                if path is not None:
                    save_episode(ep, path)
            s += 1
            if only_success and not ep.meta.get("success", False):
                log.warning("%s seed %d: the expert failed; skipped", task, s - 1)
                continue
            episodes.append(ep)
            bar.update(1)
    finally:
        bar.close()
        if env is not None:
            env.close()
    if len(episodes) < n_episodes:
        raise RuntimeError(f"{task}: only {len(episodes)} of {n_episodes} expert episodes succeeded")
    return episodes
