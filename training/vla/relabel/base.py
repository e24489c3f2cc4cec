"""Relabelling D_rob -> D_lan: an episode becomes N language steps (subtask, motion plan, action chunk).

A relabeller maps an :class:`~training.vla.data.Episode` to a :class:`LanguageEpisode`. Relabellers are looked
up by name in :data:`RELABELLERS` (the ``relabeller`` field of a training config):

* ``scripted``: deterministic, from phase labels and deltas (:mod:`training.vla.relabel.scripted`);
* ``vlm``: asks a VLM for the subtask names of real (unlabelled) data (:mod:`training.vla.relabel.vlm`).

The action chunk of a step is kept as the raw per-step actions (metres, -1 open / +1 close); the codec of the
policy being trained turns it into text (VLM2VLA's merged centimetre lists, action tokens, bins).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.core.registry import Registry
from training.vla.data.episode import Episode


@dataclass
class LanguageStep:
    """One relabelled step i: frames ``start..end-1`` of the episode, their actions, subtask l_i and plan m_i."""

    start: int
    end: int
    subtask: str
    motion: str
    direction: str = "none"

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"a language step needs 0 <= start < end, got {self.start}..{self.end}")
        for name in ("subtask", "motion"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"language step {self.start}..{self.end}: {name} is empty")


@dataclass
class LanguageEpisode:
    """An episode with its N language steps (``steps`` cover the episode in order, without gaps)."""

    episode: Episode
    steps: list[LanguageStep]
    relabeller: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.steps:
            raise ValueError("a language episode needs at least one step")
        pos = 0
        for s in self.steps:
            if s.start != pos:
                raise ValueError(f"language steps must tile the episode: step starts at {s.start}, expected {pos}")
            pos = s.end
        if pos != len(self.episode):
            raise ValueError(f"language steps end at {pos} but the episode has {len(self.episode)} frames")

    @property
    def subtasks(self) -> list[str]:
        return [s.subtask for s in self.steps]

    def actions(self, i: int) -> np.ndarray:
        """``n x 4`` per-step actions of step ``i`` (metres, gripper -1 open .. +1 close)."""
        s = self.steps[i]
        return self.episode.actions()[s.start:s.end]

    def chunk(self, i: int, start: int | None = None) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The action chunk of step ``i`` by the paper's merging rule: ``(K x 4 [dx, dy, dz] cm + g (1 open,
        0 closed), element spans as episode frame indices)`` (:func:`agents.vla.action_language.merge_deltas`);
        ``start`` (a frame inside the step): the rest of the step from that frame (what a policy that plans again
        mid-step has left to do)."""
        from agents.vla.action_language import gripper_states, merge_deltas

        s = self.steps[i]
        a0 = s.start if start is None else int(start)
        if not s.start <= a0 < s.end:
            raise ValueError(f"start {a0} is outside step {i} (frames {s.start}..{s.end - 1})")
        states = gripper_states(self.episode.gripper, initial=1.0)
        chunk, spans = merge_deltas(self.episode.deltas[a0:s.end], states[a0:s.end])
        return chunk, [(a0 + a, a0 + b) for a, b in spans]

    def rest(self, i: int, start: int) -> tuple[np.ndarray, str]:
        """``(chunk, motion plan)`` of the rest of step ``i`` from frame ``start`` (the motion plan described as the
        relabeller describes a whole step's)."""
        from agents.vla.action_language import gripper_states, motion_plan

        chunk, _ = self.chunk(i, start)
        before = float(gripper_states(self.episode.gripper, initial=1.0)[start - 1]) if start > 0 else 1.0
        return chunk, motion_plan(chunk, previous_gripper=before)


class Relabeller(ABC):
    """Turns an episode into language steps."""

    name = "relabeller"

    @abstractmethod
    def relabel(self, episode: Episode) -> LanguageEpisode:
        """The language steps of ``episode``."""

    def relabel_all(self, episodes: list[Episode]) -> list[LanguageEpisode]:
        return [self.relabel(ep) for ep in episodes]


RELABELLERS: Registry[Callable[..., Relabeller]] = Registry("relabeller")


def make_relabeller(name: str, **kwargs: Any) -> Relabeller:
    """A relabeller by registry name (``scripted``, ``vlm``)."""
    return RELABELLERS.get(name)(**kwargs)
