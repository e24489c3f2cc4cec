"""The data-source registry: ``{"source": "robosuite" | "rosbag" | "folder" | "cache", ...}`` -> episodes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.core.registry import Registry
from training.vla.data.episode import Episode, load_episodes

SOURCES: Registry[Callable[[dict[str, Any]], list[Episode]]] = Registry("VLA data source")


def _keys(spec: dict[str, Any], allowed: set[str], required: set[str]) -> None:
    unknown = sorted(set(spec) - allowed - {"source"})
    if unknown:
        raise ValueError(f"data source {spec.get('source')!r}: unknown keys {unknown}; known: {sorted(allowed)}")
    missing = sorted(required - set(spec))
    if missing:
        raise ValueError(f"data source {spec.get('source')!r}: missing keys {missing}")


@SOURCES.register("robosuite")
def _robosuite(spec: dict[str, Any]) -> list[Episode]:
    from training.vla.data.robosuite_source import record_robosuite

    _keys(spec, {"tasks", "episodes", "image_size", "seed", "cache_dir", "max_steps", "max_step_m", "camera",
                 "noise_m"},
          {"tasks"})
    tasks = spec["tasks"]
    if isinstance(tasks, str):
        tasks = [tasks]
    out: list[Episode] = []
    for task in tasks:
        out += record_robosuite(task, int(spec.get("episodes", 10)), int(spec.get("image_size", 64)),
                                int(spec.get("seed", 0)), spec.get("cache_dir", "runs/vla_cache"),
                                int(spec.get("max_steps", 200)), float(spec.get("max_step_m", 0.03)),
                                camera=str(spec.get("camera", "agentview")),
                                noise_m=float(spec.get("noise_m", 0.0)))
    return out


@SOURCES.register("rosbag")
def _rosbag(spec: dict[str, Any]) -> list[Episode]:
    from training.vla.data.rosbag_source import BagTopics, read_bag_episode

    _keys(spec, {"paths", "instruction", "image_size", "topics", "task"}, {"paths"})
    paths = spec["paths"]
    if isinstance(paths, str):
        paths = [paths]
    topics = BagTopics(**spec.get("topics", {}))
    return [read_bag_episode(p, topics, spec.get("instruction"), spec.get("image_size"), spec.get("task", ""))
            for p in paths]


@SOURCES.register("folder")
def _folder(spec: dict[str, Any]) -> list[Episode]:
    from training.vla.data.folder_source import load_folder

    _keys(spec, {"path"}, {"path"})
    return load_folder(spec["path"])


@SOURCES.register("cache")
def _cache(spec: dict[str, Any]) -> list[Episode]:
    _keys(spec, {"path"}, {"path"})
    return load_episodes(Path(spec["path"]))


def load_source(spec: dict[str, Any]) -> list[Episode]:
    """Episodes of one data-source spec (``spec["source"]`` is a :data:`SOURCES` key)."""
    if not isinstance(spec, dict) or "source" not in spec:
        raise ValueError(f"a data source must be a mapping with a 'source' key ({SOURCES.names()}), got {spec!r}")
    return SOURCES.get(spec["source"])(dict(spec))
