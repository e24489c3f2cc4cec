"""The deterministic relabeller: language steps from phase labels (scripted experts) and deltas.

Segmentation: one step per run of a phase label (long runs cut every ``max_step_len`` control steps).
Unlabelled episodes (teleoperation, bags without ``/phase``) are split where the gripper command changes sign and
where the dominant direction of motion changes. Subtasks come from :data:`~training.vla.relabel.phrases.
PHASE_SUBTASKS` (or the motion, for unlabelled steps); motion plans are direction-only, from the step's merged
chunk (:func:`agents.vla.action_language.motion_plan`).
"""

from __future__ import annotations

import numpy as np

from training.vla.data.episode import Episode
from training.vla.relabel.base import RELABELLERS, LanguageEpisode, LanguageStep, Relabeller
from training.vla.relabel.phrases import STILL_M, direction_label, subtask_phrase


def _dominant(d: np.ndarray) -> int:
    """Signed dominant axis of one delta (+-1..3), 0 when (nearly) still."""
    if np.abs(d).max() < STILL_M / 4:
        return 0
    i = int(np.argmax(np.abs(d)))
    return (i + 1) * (1 if d[i] > 0 else -1)


def split_unlabelled(ep: Episode, max_step_len: int) -> list[tuple[int, int]]:
    """Segments of an episode without phase labels (see the module docstring)."""
    cuts = [0]
    for t in range(1, len(ep)):
        grip_flip = np.sign(ep.gripper[t]) != np.sign(ep.gripper[t - 1])
        dir_change = _dominant(ep.deltas[t]) != _dominant(ep.deltas[t - 1])
        if grip_flip or dir_change or t - cuts[-1] >= max_step_len:
            cuts.append(t)
    return list(zip(cuts, [*cuts[1:], len(ep)]))


@RELABELLERS.register("scripted")
class ScriptedRelabeller(Relabeller):
    """Deterministic relabelling from phases and deltas (see the module docstring)."""

    name = "scripted"

    def __init__(self, max_step_len: int = 12) -> None:
        if max_step_len < 1:
            raise ValueError(f"max_step_len must be >= 1, got {max_step_len}")
        self.max_step_len = int(max_step_len)

    def segments(self, ep: Episode) -> list[tuple[int, int]]:
        if all(ep.phases):
            out: list[tuple[int, int]] = []
            for _, s, e in ep.segments():
                out += [(a, min(a + self.max_step_len, e)) for a in range(s, e, self.max_step_len)]
            return out
        return split_unlabelled(ep, self.max_step_len)

    def relabel(self, episode: Episode) -> LanguageEpisode:
        from agents.vla.action_language import gripper_states, merge_deltas, motion_plan

        states = gripper_states(episode.gripper, initial=1.0)
        steps = []
        for s, e in self.segments(episode):
            chunk, _ = merge_deltas(episode.deltas[s:e], states[s:e])
            before = float(states[s - 1]) if s > 0 else 1.0
            motion = motion_plan(chunk, previous_gripper=before)
            subtask = subtask_phrase(episode.phases[s], episode.task, motion)
            steps.append(LanguageStep(s, e, subtask, motion, direction_label(episode.deltas[s:e].sum(axis=0))))
        return LanguageEpisode(episode, steps, self.name)
