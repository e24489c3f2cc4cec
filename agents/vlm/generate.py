"""Text generation (greedy or sampled) and sequence log-likelihoods for a :class:`VLMBundle`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.vlm.inputs import IGNORE_INDEX, collate, prefix_inputs, training_example

if TYPE_CHECKING:
    from agents.vlm.bundle import VLMBundle


@dataclass(frozen=True)
class GenerationSettings:
    """``temperature`` 0 means greedy; otherwise nucleus sampling with ``top_p`` (paper: 0.95).
    ``seed`` makes sampling repeatable without touching the global RNG state."""

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or not 1 <= self.max_new_tokens <= 8192:
            raise ValueError(f"max_new_tokens must be an int in [1, 8192], got {self.max_new_tokens!r}")
        if not (math.isfinite(self.temperature) and 0.0 <= self.temperature <= 10.0):
            raise ValueError(f"temperature must be in [0, 10], got {self.temperature!r}")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class Generation:
    """One generated continuation: ``text`` (special tokens removed) and the new ``token_ids`` (eos excluded)."""

    text: str
    token_ids: tuple[int, ...]


def generate(bundle: "VLMBundle", images: Sequence[Any], prompts: Sequence[str],
             settings: GenerationSettings | None = None, **generate_kwargs: Any) -> list[Generation]:
    """Generate one continuation per (image, prompt); extra ``generate_kwargs`` go to ``model.generate``
    (e.g. ``bad_words_ids``, ``logits_processor``)."""
    import torch

    s = settings or GenerationSettings()
    batch = prefix_inputs(bundle, images, prompts)
    tok = bundle.tokenizer
    kw: dict[str, Any] = {"max_new_tokens": s.max_new_tokens, "pad_token_id": tok.pad_token_id,
                          "eos_token_id": tok.eos_token_id}
    if s.greedy:
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kw.update(do_sample=True, temperature=s.temperature, top_p=s.top_p, top_k=0)
    kw.update(generate_kwargs)
    n_prefix = batch["input_ids"].shape[1]
    with torch.random.fork_rng(devices=[] if bundle.device.type == "cpu" else [bundle.device]):
        if s.seed is not None:
            torch.manual_seed(s.seed)
        with torch.inference_mode():
            out = bundle.model.generate(**batch, **kw)
    results = []
    special = set(tok.all_special_ids)
    for row in out[:, n_prefix:].tolist():
        ids = []
        for i in row:
            if i == tok.eos_token_id:
                break
            if i != tok.pad_token_id:
                ids.append(i)
        text = tok.decode([i for i in ids if i not in special], skip_special_tokens=True)
        results.append(Generation(text=text, token_ids=tuple(ids)))
    return results


def generate_text(bundle: "VLMBundle", image: Any, prompt: str, settings: GenerationSettings | None = None,
                  **generate_kwargs: Any) -> str:
    """One generated string for one (image, prompt)."""
    return generate(bundle, [image], [prompt], settings, **generate_kwargs)[0].text


def sequence_logprob(bundle: "VLMBundle", images: Sequence[Any], prompts: Sequence[str],
                     targets: Sequence[str | Sequence[int]], normalize: bool = False) -> list[float]:
    """Sum (or mean, ``normalize``) of the target tokens' log-probabilities (eos included) under the model."""
    import torch

    exs = [training_example(bundle, im, p, t) for im, p, t in zip(images, prompts, targets, strict=True)]
    batch = collate(bundle, exs)
    labels = batch.pop("labels")
    with torch.inference_mode():
        logits = bundle.model(**batch).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    tgt = labels[:, 1:]
    mask = tgt != IGNORE_INDEX
    picked = logp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask
    total = picked.sum(-1)
    if normalize:
        total = total / mask.sum(-1).clamp(min=1)
    return [float(v) for v in total]
