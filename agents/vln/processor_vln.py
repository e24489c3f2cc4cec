"""Prompt, image and tensor preparation of the AlldayWalker navigator (family-agnostic via ``agents.vlm``).

One model call sees one image: the current frame and ``num_history`` past frames tiled into a square grid
(current frame top-left, then older frames), so every VLM family takes it without multi-image support. The prompt
holds the (shortened) instruction and the previous actions as words; the answer is the next actions as words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from agents.core.types import NavAction
from agents.vln.actions import ACTION_WORDS
from agents.vln.configuration_vln import VLNAgentConfig


def check_instruction(instruction: Any) -> str:
    """The instruction stripped; TypeError/ValueError naming ``instruction`` for a non-str or empty one."""
    if not isinstance(instruction, str):
        raise TypeError(f"instruction must be a str, got {type(instruction).__name__}")
    text = " ".join(instruction.split())
    if not text:
        raise ValueError("instruction is empty: the navigator needs an instruction to follow")
    return text


def shorten_instruction(text: str, max_words: int) -> str:
    """Keep the first and last words of a long instruction (the goal sits at the end of R2R-style text)."""
    words = text.split()
    if len(words) <= max_words:
        return " ".join(words)
    head = max_words // 3
    return " ".join(words[:head] + ["..."] + words[len(words) - (max_words - head):])


def build_prompt(instruction: str, prev_actions: Sequence[int | NavAction], cfg: VLNAgentConfig) -> str:
    """``"<instruction> past: forward left. next:"`` (the past part only when ``cfg.action_history > 0``)."""
    text = shorten_instruction(check_instruction(instruction), cfg.max_instruction_words)
    if cfg.action_history:
        past = [ACTION_WORDS[NavAction.parse(a)] for a in list(prev_actions)[-cfg.action_history:]]
        text += " past: " + (" ".join(past) if past else "none") + "."
    return text + " next:"


def _resize(frame: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image

    if frame.shape[0] == size and frame.shape[1] == size:
        return frame
    return np.asarray(Image.fromarray(frame).resize((size, size), Image.BILINEAR))


def tile_frames(frames: Sequence[np.ndarray], num_history: int, size: int) -> np.ndarray:
    """Tile ``frames`` (newest first; the oldest is repeated when fewer than ``1 + num_history``) into a
    ``size`` x ``size`` uint8 RGB grid of ``ceil(sqrt(1 + num_history))`` columns."""
    if not frames:
        raise ValueError("frames must hold at least the current frame")
    for f in frames:
        if not isinstance(f, np.ndarray) or f.ndim != 3 or f.shape[2] != 3 or f.dtype != np.uint8:
            raise ValueError(f"frames must be HxWx3 uint8 arrays, got {getattr(f, 'shape', type(f))}")
    n = 1 + num_history
    frames = list(frames[:n]) + [frames[min(len(frames), n) - 1]] * max(0, n - len(frames))
    if n == 1:
        return _resize(frames[0], size)
    cols = math.ceil(math.sqrt(n))
    cell = size // cols
    out = np.zeros((size, size, 3), dtype=np.uint8)
    for i, f in enumerate(frames):
        r, c = divmod(i, cols)
        out[r * cell:(r + 1) * cell, c * cell:(c + 1) * cell] = _resize(f, cell)
    return out


class VLNProcessor:
    """Turns (frames, instruction, past actions[, target]) into model inputs for one VLM family."""

    def __init__(self, processor: Any, family: str, image_size: int, cfg: VLNAgentConfig) -> None:
        from agents.vlm.families import get_family

        self.processor = processor
        self.spec = get_family(family)
        self.image_size = int(image_size)
        self.cfg = cfg

    @property
    def tokenizer(self) -> Any:
        return getattr(self.processor, "tokenizer", self.processor)

    def image(self, frames: Sequence[np.ndarray]) -> Any:
        from PIL import Image

        return Image.fromarray(tile_frames(frames, self.cfg.num_history, self.image_size))

    def _texts(self, prompts: Sequence[str]) -> list[str]:
        return [self.spec.prefix_text(p, 1) for p in prompts]

    def _extra(self, batch: dict[str, Any], bundle: Any) -> dict[str, Any]:
        if self.spec.extra_inputs is not None:
            batch.update(self.spec.extra_inputs(batch, bundle))
        return batch

    def generation_inputs(self, images: Sequence[Any], prompts: Sequence[str], bundle: Any = None) -> dict[str, Any]:
        """Tensors for ``model.generate`` (left padding, so every row ends where generation starts)."""
        tok = self.tokenizer
        old = tok.padding_side
        tok.padding_side = "left"
        try:
            batch = self.processor(images=list(images), text=self._texts(prompts), return_tensors="pt",
                                   padding="longest")
        finally:
            tok.padding_side = old
        return self._extra(dict(batch), bundle)

    def training_inputs(self, images: Sequence[Any], prompts: Sequence[str], targets: Sequence[str],
                        bundle: Any = None) -> dict[str, Any]:
        """Tensors with ``labels`` on the answer tokens only (and the EOS that ends the answer)."""
        if not (len(images) == len(prompts) == len(targets)) or not prompts:
            raise ValueError(f"images, prompts and targets must be non-empty and of one length, got "
                             f"{len(images)}, {len(prompts)}, {len(targets)}")
        tok = self.tokenizer
        old = tok.padding_side
        tok.padding_side = "right"
        try:
            if self.spec.uses_suffix:
                batch = dict(self.processor(images=list(images), text=self._texts(prompts), suffix=list(targets),
                                            return_tensors="pt", padding="longest"))
            else:
                batch = self._manual_labels(images, prompts, targets)
        finally:
            tok.padding_side = old
        return self._extra(batch, bundle)

    def _manual_labels(self, images: Sequence[Any], prompts: Sequence[str], targets: Sequence[str]) -> dict[str, Any]:
        import torch

        tok = self.tokenizer
        eos = tok.eos_token or ""
        texts = self._texts(prompts)
        full = dict(self.processor(images=list(images), text=[t + " " + a + eos for t, a in zip(texts, targets)],
                                   return_tensors="pt", padding="longest"))
        labels = full["input_ids"].clone()
        for i, (t, img) in enumerate(zip(texts, images)):
            n_prefix = int(self.processor(images=[img], text=[t], return_tensors="pt")["input_ids"].shape[1])
            labels[i, :n_prefix] = -100
        labels[full["attention_mask"] == 0] = -100
        full["labels"] = labels.to(torch.long)
        return full

    def pixel_values(self, frames_batch: Sequence[np.ndarray]) -> Any:
        """Pixel values of single frames (for routing features), via the family's image processor."""
        from PIL import Image

        imgs = [Image.fromarray(_resize(f, self.image_size)) for f in frames_batch]
        return self.processor.image_processor(images=imgs, return_tensors="pt")["pixel_values"]
