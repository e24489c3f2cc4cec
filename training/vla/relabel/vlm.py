"""A VLM relabeller for real (unlabelled) data: a VLM names each step's subtask from its first frame.

Segmentation and motion plans stay deterministic (:class:`~training.vla.relabel.scripted.ScriptedRelabeller`:
the deltas are known exactly, the model only adds the semantic part). For each step the model sees the step's
first frame and a prompt with the instruction and the step's motion plan, and writes a short subtask name.
Replies that are empty, not English words, or too long are replaced by the scripted subtask and counted in
``LanguageEpisode.meta["fallbacks"]`` (a random-weight tiny model falls back on everything; a real
instruction-tuned VLM such as PaliGemma-mix or Qwen2.5-VL-Instruct writes the names).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from training.vla.data.episode import Episode
from training.vla.relabel.base import RELABELLERS, LanguageEpisode, LanguageStep, Relabeller
from training.vla.relabel.scripted import ScriptedRelabeller

log = logging.getLogger(__name__)

PROMPT = ("robot instruction: {instruction}. the gripper moves: {motion}. "
          "name the current subtask in a few words:")
_WORDS = re.compile(r"[a-z][a-z0-9' -]*")


def clean_subtask(text: str, max_words: int = 10) -> str | None:
    """A usable subtask name from a model reply (first line, lower case, trimmed; grammar-v1 subtask words), or
    None."""
    line = " ".join(text.strip().splitlines()[0].lower().rstrip(".").split()) if text.strip() else ""
    if not line or not _WORDS.fullmatch(line) or len(line.split()) > max_words or len(line) > 80:
        return None
    return line


@RELABELLERS.register("vlm")
class VLMRelabeller(Relabeller):
    """Subtask names from a VLM (``bundle``: an :class:`agents.vlm.VLMBundle`, or ``model``: a checkpoint path)."""

    name = "vlm"

    def __init__(self, bundle: Any = None, model: str | Path | None = None, max_step_len: int = 12,
                 max_new_tokens: int = 16, batch_size: int = 8) -> None:
        if bundle is None and model is None:
            raise ValueError("the vlm relabeller needs a VLM: pass bundle=... or model=<checkpoint dir>")
        if bundle is None:
            from agents.vlm import load_vlm

            bundle = load_vlm(model)
        self.bundle = bundle
        self.segmenter = ScriptedRelabeller(max_step_len)
        self.max_new_tokens = int(max_new_tokens)
        self.batch_size = int(batch_size)
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError("max_new_tokens and batch_size must be >= 1")

    def relabel(self, episode: Episode) -> LanguageEpisode:
        from agents.vlm import GenerationSettings, generate

        base = self.segmenter.relabel(episode)
        images = [episode.frames[s.start] for s in base.steps]
        prompts = [PROMPT.format(instruction=episode.instruction, motion=s.motion) for s in base.steps]
        settings = GenerationSettings(max_new_tokens=self.max_new_tokens)
        replies: list[str] = []
        for i in range(0, len(prompts), self.batch_size):
            gens = generate(self.bundle, images[i:i + self.batch_size], prompts[i:i + self.batch_size], settings)
            replies += [g.text for g in gens]
        steps, fallbacks = [], 0
        for s, reply in zip(base.steps, replies, strict=True):
            name = clean_subtask(reply)
            if name is None:
                fallbacks += 1
                name = s.subtask
            steps.append(LanguageStep(s.start, s.end, name, s.motion, s.direction))
        if fallbacks:
            log.info("vlm relabeller: %d of %d subtasks fell back to the scripted names", fallbacks, len(steps))
        return LanguageEpisode(episode, steps, self.name, {"fallbacks": fallbacks, "replies": replies})
