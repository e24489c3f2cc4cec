"""Routing helpers of the lifelong benchmark: the features a TuKA router stores for a task, and the accuracy of
the routes a routed method took on a task's held-out episodes."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.vln.configuration_vln import VLNAgentConfig
from training.vln.data import Sample


def task_frames(samples: list[Sample]) -> list[np.ndarray]:
    """A task's raw training frames (the samples collected with ``keep_frames=True``)."""
    frames = [s.frame for s in samples if s.frame is not None]
    if not frames:
        raise ValueError("routing features need training samples that keep their frames (collect(keep_frames=True))")
    return frames


def frame_indices(n_frames: int, memory: int = 0, limit: int = 64) -> np.ndarray:
    """Which of a task's ``n_frames`` training frames give its routing features: the first ``limit`` (the mean
    prototype's estimate) or, for a router with a ``memory``, that many spread evenly over all of them."""
    if memory:
        return np.unique(np.linspace(0, n_frames - 1, min(memory, n_frames)).round().astype(int))
    return np.arange(min(limit, n_frames))


def frame_features(bundle: Any, agent_cfg: VLNAgentConfig, frames: list[np.ndarray], chunk: int = 64) -> Any:
    """Routing features (B, D) of ``frames``, computed ``chunk`` frames at a time."""
    import torch

    from agents.vln.modeling_vln import AlldayWalkerPolicy

    pol = AlldayWalkerPolicy(bundle, agent_cfg)
    return torch.cat([pol.features(frames[i:i + chunk]) for i in range(0, len(frames), chunk)])


def routing_features(bundle: Any, agent_cfg: VLNAgentConfig, samples: list[Sample], memory: int = 0,
                     limit: int = 64) -> Any:
    """Routing features (B, D) of a task: of the training frames :func:`frame_indices` picks."""
    frames = task_frames(samples)
    return frame_features(bundle, agent_cfg, [frames[i] for i in frame_indices(len(frames), memory, limit)])


ROUTING_KEYS = ("routing_acc", "routing_scene_acc", "routing_env_acc")


def routing_accuracy(routes: list[tuple[int, int]], expected: tuple[int | None, int | None]) -> dict[str, float]:
    """Joint and per expert kind (scene, env) share of ``routes`` equal to ``expected``: an environment can be told
    apart where a scene cannot."""
    expected = tuple(expected)
    out = {"routing_acc": float(np.mean([tuple(r) == expected for r in routes]))}
    for i, kind in enumerate(("scene", "env")):
        out[f"routing_{kind}_acc"] = float(np.mean([r[i] == expected[i] for r in routes]))
    return out


def add_routing(acc: dict[str, list[float]], metrics_: dict[str, float]) -> None:
    """Append a task's routing accuracies (joint, scene, env), where it has them, to ``acc``."""
    for key in ROUTING_KEYS:
        if key in metrics_:
            acc[key].append(metrics_[key])
