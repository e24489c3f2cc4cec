"""Render one episode rollout: MP4 of [RGB | depth | map] frames, sampled PNGs and a top-down plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2

from sim.core.env import NavEnvConfig
from sim.core.episodes import Episode, GroundTruth
from sim.nav.env import MujocoNavEnv
from sim.nav.evaluate import EVAL_AGENTS, run_episode
from sim.nav.video import draw_paths, frame_strip, save_topdown_plot, topdown_map, write_video


def render_episode(episodes: Sequence[Episode], gts: dict[str, GroundTruth], index: int, out: str | Path,
                   agent: str = "oracle", condition: str | None = None, size: int = 224,
                   quality: str = "default", png_every: int = 10, fps: float = 8.0) -> list[Path]:
    """Roll out ``agent`` on episode ``index`` and write ``episode_<id>.mp4``, PNG frames and a map plot."""
    if not 0 <= index < len(episodes):
        raise ValueError(f"episode index {index} out of range 0..{len(episodes) - 1}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = MujocoNavEnv(NavEnvConfig(width=size, height=size, quality=quality), episodes, gts)
    frames = []
    ep = episodes[index]
    gt = gts.get(str(ep.episode_id))
    reference = gt.locations if gt else ep.reference_path
    state: dict[str, Any] = {}

    def on_step(obs: dict[str, Any], info: dict[str, Any]) -> None:
        if "base" not in state:
            state["base"] = topdown_map(env.house, env.grid)
        td = draw_paths(state["base"], env.grid, env.trajectory, reference, ep.goals[0].position, env.pose.heading)
        cap = f"ep {ep.episode_id} [{info['condition']}] step {info['steps']} d={info['distance_to_goal']:.2f}m"
        frames.append(frame_strip(obs["rgb"], obs.get("depth"), td, cap))

    try:
        policy = EVAL_AGENTS.get(agent)(env, 0)
        result = run_episode(env, policy, index, condition, on_step=on_step)
        written = [write_video(frames, out / f"episode_{ep.episode_id}.mp4", fps)]
        if png_every > 0:
            for i in list(range(0, len(frames), png_every)) + [len(frames) - 1]:
                p = out / f"episode_{ep.episode_id}_frame{i:04d}.png"
                cv2.imwrite(str(p), frames[i][..., ::-1])
                written.append(p)
        title = (f"{ep.instruction_text}\n{agent}: SR={result['sr']:.0f} SPL={result['spl']:.2f} "
                 f"NE={result['ne']:.2f} m")
        written.append(save_topdown_plot(env.house, env.grid, env.trajectory, reference, ep.goals[0].position,
                                         out / f"episode_{ep.episode_id}_topdown.png", title))
    finally:
        env.close()
    return written
