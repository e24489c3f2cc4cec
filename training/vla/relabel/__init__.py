"""Relabelling robot episodes into language steps (subtask, direction-only motion plan, action chunk)."""

from __future__ import annotations

from training.vla.relabel.base import RELABELLERS, LanguageEpisode, LanguageStep, Relabeller, make_relabeller
from training.vla.relabel.scripted import ScriptedRelabeller
from training.vla.relabel.vlm import VLMRelabeller

__all__ = ["RELABELLERS", "LanguageEpisode", "LanguageStep", "Relabeller", "ScriptedRelabeller", "VLMRelabeller",
           "make_relabeller"]
