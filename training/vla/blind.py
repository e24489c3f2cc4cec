"""The blind floor of a manipulation benchmark: replay the average demonstration open loop, without looking.

A learnt policy that does not beat this replay has learnt the average trajectory, not where the object is; the
VLM2VLA benchmark reports it next to the fine-tuned methods (as the VLN benchmark reports its forward-then-stop
floor).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Trajectory:
    """An open-loop action sequence: ``deltas`` (T, 3) in metres and ``gripper`` (T,) in {-1, +1}."""

    deltas: np.ndarray
    gripper: np.ndarray

    def __post_init__(self) -> None:
        if self.deltas.ndim != 2 or self.deltas.shape[1] != 3 or len(self.deltas) == 0:
            raise ValueError(f"deltas must be (T>0, 3), got {self.deltas.shape}")
        if self.gripper.shape != (len(self.deltas),):
            raise ValueError(f"gripper must be ({len(self.deltas)},), got {self.gripper.shape}")
        if not (np.isfinite(self.deltas).all() and np.isfinite(self.gripper).all()):
            raise ValueError("trajectory holds NaN or inf")


def mean_trajectory(episodes: Sequence[Any]) -> Trajectory:
    """The average of demonstrations (objects with ``deltas`` (T_i, 3) and ``gripper`` (T_i,)), step by step.

    Step ``t`` averages the demonstrations still running at ``t``; the length is the median demonstration
    length; the gripper closes where the mean command is positive (+1 closed, -1 open).
    """
    if not episodes:
        raise ValueError("no demonstrations to average")
    length = int(np.median([len(e.deltas) for e in episodes]))
    deltas = np.zeros((length, 3), np.float64)
    grip = np.zeros(length, np.float64)
    for t in range(length):
        running = [e for e in episodes if len(e.deltas) > t]
        deltas[t] = np.mean([e.deltas[t] for e in running], axis=0)
        grip[t] = np.mean([e.gripper[t] for e in running])
    return Trajectory(deltas.astype(np.float32), np.where(grip > 0, 1.0, -1.0).astype(np.float32))


def replay_rollout(traj: Trajectory, task: Any, seeds: Sequence[int], max_steps: int,
                   progress: bool = False) -> dict[str, Any]:
    """Replay ``traj`` open loop in ``task`` (a :class:`sim.manip.ManipTask`) once per seed, for at most
    ``max_steps`` control steps; after the trajectory ends the arm holds still with the last gripper command.

    Returns ``{"episodes", "success", "steps", "succeeded"}`` like :func:`training.vla.evaluate.rollout` (no model,
    so no malformed outputs and no policy time).
    """
    _check_max_steps(max_steps)
    n = len(traj.deltas)
    hold = np.zeros(3, np.float32)
    actions = [(traj.deltas[t] if t < n else hold, float(traj.gripper[min(t, n - 1)])) for t in range(max_steps)]
    return _open_loop(task, [(int(seed), actions) for seed in seeds], "blind replay", progress)


def language_replay_rollout(lang_episodes: Sequence[Any], codec: Any, task: Any, max_step_m: float,
                            gripper_steps: int, max_steps: int, progress: bool = False) -> dict[str, Any]:
    """The ceiling of a policy that writes the demonstrated action text perfectly: each demonstration's chunks
    (:meth:`training.vla.relabel.LanguageEpisode.chunk`, the paper's merging rule) encoded by ``codec``, decoded
    back and executed open loop from the demonstration's own seed by the policy's executor
    (:func:`agents.vla.policy.expand_chunk`). The demonstrations succeeded; what fails here is lost by merging,
    centimetre rounding and the executor. Returns ``{"episodes", "success", "steps", "succeeded"}``."""
    from agents.vla.policy import expand_chunk

    _check_max_steps(max_steps)
    runs = []
    for lang in lang_episodes:
        seed = lang.episode.meta.get("seed")
        if seed is None:
            raise ValueError("a demonstration without meta['seed'] cannot be replayed from its initial state")
        queue: list[tuple[np.ndarray, float]] = []
        g = 1.0  # open, as the policy starts
        for i in range(len(lang.steps)):
            part, g = expand_chunk(codec.decode(codec.encode(lang.chunk(i)[0])), g, max_step_m, gripper_steps)
            queue += part
        runs.append((int(seed), queue[:max_steps]))
    return _open_loop(task, runs, "language replay", progress)


def _check_max_steps(max_steps: int) -> None:
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")


def _open_loop(task: Any, runs: Sequence[tuple[int, Sequence[tuple[np.ndarray, float]]]], desc: str,
               progress: bool) -> dict[str, Any]:
    """Reset ``task`` to each seed and send its ``(delta_m, gripper)`` actions until the task succeeds."""
    succeeded, steps = [], 0
    for seed, actions in tqdm(runs, desc=desc, disable=not progress, leave=False):
        task.reset(seed)
        for delta, grip in actions:
            obs = task.step(delta, grip)
            steps += 1
            if obs["success"]:
                succeeded.append(int(seed))
                break
    return {"episodes": len(runs), "success": len(succeeded) / len(runs) if runs else float("nan"), "steps": steps,
            "succeeded": succeeded}
