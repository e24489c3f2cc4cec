"""VLA demonstration data: one :class:`Episode` format, three sources (robosuite experts, rosbag2, plain folders).

``SOURCES`` maps a source type (the ``data.source`` field of a training config) to a loader
``(spec: dict) -> list[Episode]``; heavy imports (robosuite, rosbags) happen inside the loaders.
"""

from __future__ import annotations

from training.vla.data.episode import Episode, load_episode, load_episodes, save_episode
from training.vla.data.sources import SOURCES, load_source

__all__ = ["SOURCES", "Episode", "load_episode", "load_episodes", "load_source", "save_episode"]
