"""Imitation data in the simulator: oracle demonstrations and DAgger relabelling of the learner's own states.

A sample is what one model call sees plus the teacher's answer: the tiled frame image (current + history, uint8),
the prompt (instruction + past actions) and the target action words (the teacher's next ``num_future_steps`` actions
from that pose, ending at ``stop``: the shortest-path follower or the ``sightline`` one; with ``goal_prefix``, after
where the goal object is in the frame, from the simulator's segmentation). States visited by the learner (DAgger) are
labelled by the same teacher, so off-path states get corrective labels.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from agents.core.types import NavAction
from agents.vln.actions import format_answer
from agents.vln.configuration_vln import VLNAgentConfig
from agents.vln.modeling_vln import AlldayWalkerPolicy
from agents.vln.processor_vln import build_prompt, tile_frames
from sim.core.frames import habitat_to_mj, theta_to_phi
from sim.nav.env import MujocoNavEnv
from sim.nav.follower import FOLLOWERS, make_follower

log = logging.getLogger(__name__)


@dataclass
class Sample:
    """One supervised model call: tiled image (HxWx3 uint8), prompt, target action words, task ids and (optionally)
    the raw current frame (routing features)."""

    image: np.ndarray
    prompt: str
    target: str
    scene: int = 0
    env: int = 0
    frame: np.ndarray | None = None


def teacher_actions(env: MujocoNavEnv, k: int, teacher: str = "geodesic") -> list[NavAction]:
    """The teacher's next ``k`` actions from the env's current pose (kinematic rollout, no rendering); ``teacher``
    names a follower of ``sim.nav.follower.FOLLOWERS`` (``sightline`` steers at the goal point: steering at the
    goal object's centre made the labels less predictable from the frame, ``docs/alldaywalker.md``); teachers with
    ``object_aim`` (``search``) are given the goal object's centre."""
    aim = None
    if getattr(FOLLOWERS.get(teacher), "object_aim", False) and hasattr(env, "goal_item"):
        item = env.goal_item()
        aim = None if item is None else (env.house.furniture[item].x, env.house.furniture[item].y)
    follower = make_follower(teacher, env.grid, env.motion, env.config.hfov_deg, aim)
    x, y, _ = habitat_to_mj(env.pose.position)
    gx, gy, _ = habitat_to_mj(env.episode.goals[0].position)
    _, actions, _ = follower.rollout(x, y, theta_to_phi(env.pose.heading), gx, gy, max_steps=k)
    return [NavAction(a) for a in actions]


def goal_location(env: MujocoNavEnv) -> str:
    """Where the episode's goal object is in the current frame (``agents.vln.actions.GOAL_WORDS``), from the
    simulator's segmentation: the label of ``goal_prefix`` answers."""
    from training.vln.scene_grounding import where_answer

    if not hasattr(env, "item_masks"):
        raise ValueError(f"goal_prefix needs an env with segmentation (MujocoNavEnv), got {type(env).__name__}")
    return where_answer(env.item_masks().get(env.goal_item()), 1) or "none"


def collect(env: MujocoNavEnv, episode_indices: Sequence[int], cfg: VLNAgentConfig, image_size: int,
            policy: AlldayWalkerPolicy | None = None, beta: float = 1.0, seed: int = 0, condition: str | None = None,
            task_ids: tuple[int, int] = (0, 0), progress: bool = False, keep_frames: bool = False,
            on_state: Callable[[MujocoNavEnv], None] | None = None, teacher: str = "geodesic") -> list[Sample]:
    """Roll out episodes and label every visited state with the ``teacher`` follower (``on_state(env)`` is called
    at each one, before its sample is added).

    ``policy=None`` or ``beta=1``: the teacher drives (behaviour cloning). Otherwise DAgger: at each step the
    teacher's action is executed with probability ``beta`` and the learner's otherwise; all states are labelled.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if policy is None and beta < 1.0:
        raise ValueError("DAgger (beta < 1) needs a learner policy")
    rng = np.random.default_rng(seed)
    out: list[Sample] = []
    for idx in tqdm(episode_indices, desc="collect" if beta >= 1 else f"dagger b={beta:.2f}", disable=not progress):
        options = {"episode_index": int(idx)}
        if condition:
            options["condition"] = condition
        obs, _ = env.reset(options=options)
        if policy is not None:
            policy.reset()
        frames: deque[np.ndarray] = deque(maxlen=1 + cfg.num_history)
        prev: list[NavAction] = []
        done = False
        while not done:
            frames.appendleft(obs["rgb"])
            labels = teacher_actions(env, cfg.num_future_steps, teacher)
            if on_state is not None:
                on_state(env)
            goal = goal_location(env) if cfg.goal_prefix else None
            out.append(Sample(tile_frames(list(frames), cfg.num_history, image_size),
                              build_prompt(obs["instruction"], prev, cfg), format_answer(labels, goal), *task_ids,
                              frame=obs["rgb"] if keep_frames else None))
            action = labels[0]
            if policy is not None and beta < 1.0:
                learner = NavAction.parse(policy.act(env.to_observation(obs)))
                if rng.random() >= beta:
                    action = learner
                else:
                    policy.override(action)
            prev.append(action)
            obs, _, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
    return out
