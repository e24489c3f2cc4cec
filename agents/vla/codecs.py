"""Action codecs: how an action chunk becomes a generation target and back (a registry, one interface).

* ``language`` (VLM2VLA): the chunk as grammar-v1 text, ordinary tokens.
* ``action_tokens`` (VLM2VLA-AT): the same text, but the digits 0-9 are written with the 10 least-likely tokens of
  the vocabulary (the paper's ablation maps actions to Gemma's 10 least-likely tokens).
* ``binned`` (OpenVLA-style): each of dx, dy, dz, g quantised into 256 uniform bins, one reserved (least-used)
  token per bin, 4 tokens per element; non-hierarchical (the prompt goes straight from instruction to actions).

Least-likely / least-used tokens are ranked by unigram counts over a corpus (:func:`rare_tokens`); the chosen ids
are saved with the policy (``to_dict``) so a trained policy decodes with the same map.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from agents.core.registry import Registry
from agents.vla.action_language import (
    DEFAULT_LIMITS,
    ChunkLimits,
    MalformedActionError,
    clamp_chunk,
    format_chunk,
    parse_chunk,
)


class ActionCodec(Protocol):
    """Encodes a K x 4 chunk (cm, gripper 1 open / 0 closed) into a target and decodes generations back."""

    name: str
    hierarchical: bool
    limits: ChunkLimits

    def encode(self, chunk_cm: np.ndarray) -> str | list[int]: ...

    def decode(self, text: str, token_ids: Sequence[int]) -> np.ndarray: ...

    def to_dict(self) -> dict[str, Any]: ...


#: codec name -> factory(tokenizer, limits=ChunkLimits(), **saved_state) -> ActionCodec
CODECS: Registry[Any] = Registry("action codec")


def rare_tokens(tokenizer: Any, n: int, corpus: Iterable[str] | None = None) -> list[int]:
    """The ``n`` least-used non-special token ids: fewest occurrences in ``corpus`` (default: the tokenizer's
    training text), ties broken by the highest id (reserved / added tokens sit at the end of vocabularies)."""
    from agents.vlm.tokenizer import DEFAULT_CORPUS

    texts = list(corpus) if corpus is not None else list(DEFAULT_CORPUS)
    counts: Counter[int] = Counter()
    for t in texts:
        counts.update(tokenizer(t, add_special_tokens=False)["input_ids"])
    special = set(tokenizer.all_special_ids)
    candidates = [i for i in range(len(tokenizer)) if i not in special]
    if len(candidates) < n:
        raise ValueError(f"the vocabulary has {len(candidates)} non-special tokens, fewer than the {n} needed")
    return sorted(candidates, key=lambda i: (counts[i], -i))[:n]


@CODECS.register("language")
class LanguageCodec:
    """VLM2VLA: the chunk written as ordinary text (grammar v1)."""

    name = "language"

    def __init__(self, tokenizer: Any = None, limits: ChunkLimits = DEFAULT_LIMITS, hierarchical: bool = True) -> None:
        self.limits, self.hierarchical = limits, bool(hierarchical)

    def encode(self, chunk_cm: np.ndarray) -> str:
        return format_chunk(clamp_chunk(np.asarray(chunk_cm, dtype=np.float64).reshape(-1, 4), self.limits))

    def decode(self, text: str, token_ids: Sequence[int] = ()) -> np.ndarray:
        return parse_chunk(text, self.limits)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "hierarchical": self.hierarchical}


@CODECS.register("action_tokens")
class ActionTokenCodec:
    """VLM2VLA-AT: grammar-v1 text whose digits 0-9 are the vocabulary's 10 least-likely tokens."""

    name = "action_tokens"

    def __init__(self, tokenizer: Any, limits: ChunkLimits = DEFAULT_LIMITS, hierarchical: bool = True,
                 digit_ids: Sequence[int] | None = None) -> None:
        if tokenizer is None:
            raise ValueError("the action_tokens codec needs the model's tokenizer")
        self.tokenizer, self.limits, self.hierarchical = tokenizer, limits, bool(hierarchical)
        ids = list(digit_ids) if digit_ids is not None else rare_tokens(tokenizer, 10)
        if len(ids) != 10 or len(set(ids)) != 10 or any(not 0 <= i < len(tokenizer) for i in ids):
            raise ValueError(f"digit_ids must be 10 distinct token ids of the vocabulary, got {ids}")
        self.digit_ids = [int(i) for i in ids]
        self._digit_of = {t: str(d) for d, t in enumerate(self.digit_ids)}

    def encode(self, chunk_cm: np.ndarray) -> list[int]:
        return self.encode_text(LanguageCodec(limits=self.limits).encode(chunk_cm))

    def encode_text(self, text: str) -> list[int]:
        """Token ids of any text with its digits written as this codec's digit tokens."""
        out: list[int] = []
        for run in re.findall(r"\d|[^\d]+", text):
            if run.isdigit():
                out.append(self.digit_ids[int(run)])
            else:
                out.extend(self.tokenizer(run, add_special_tokens=False)["input_ids"])
        return out

    def decode(self, text: str, token_ids: Sequence[int]) -> np.ndarray:
        return parse_chunk(self.to_text(token_ids), self.limits)

    def to_text(self, token_ids: Sequence[int]) -> str:
        """The chunk text of generated ``token_ids`` (digit tokens read as digits, the rest decoded)."""
        parts: list[str] = []
        plain: list[int] = []
        for t in token_ids:
            if t in self._digit_of:
                if plain:
                    parts.append(self.tokenizer.decode(plain))
                    plain = []
                parts.append(self._digit_of[t])
            else:
                plain.append(int(t))
        if plain:
            parts.append(self.tokenizer.decode(plain))
        return "".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "hierarchical": self.hierarchical, "digit_ids": self.digit_ids}


@CODECS.register("binned")
class BinnedTokenCodec:
    """OpenVLA-style: 256 uniform bins per dimension (dx, dy, dz over +-``max_abs_cm``; g over [0, 1]), each bin
    one reserved token (the 256 least-used ones), 4 tokens per chunk element."""

    name = "binned"

    def __init__(self, tokenizer: Any, limits: ChunkLimits = DEFAULT_LIMITS, hierarchical: bool = False,
                 bin_ids: Sequence[int] | None = None, n_bins: int = 256) -> None:
        if tokenizer is None:
            raise ValueError("the binned codec needs the model's tokenizer")
        if not isinstance(n_bins, int) or not 2 <= n_bins <= 1024:
            raise ValueError(f"n_bins must be an int in [2, 1024], got {n_bins!r}")
        self.limits, self.hierarchical, self.n_bins = limits, bool(hierarchical), n_bins
        ids = list(bin_ids) if bin_ids is not None else rare_tokens(tokenizer, n_bins)
        if len(ids) != n_bins or len(set(ids)) != n_bins or any(not 0 <= i < len(tokenizer) for i in ids):
            raise ValueError(f"bin_ids must be {n_bins} distinct token ids of the vocabulary")
        self.bin_ids = [int(i) for i in ids]
        self._bin_of = {t: b for b, t in enumerate(self.bin_ids)}
        m = limits.max_abs_cm
        self.lo = np.array([-m, -m, -m, 0.0])
        self.hi = np.array([m, m, m, 1.0])

    def encode(self, chunk_cm: np.ndarray) -> list[int]:
        arr = clamp_chunk(np.asarray(chunk_cm, dtype=np.float64).reshape(-1, 4), self.limits)
        if not 1 <= len(arr) <= self.limits.max_elements:
            raise ValueError(f"chunk must have 1..{self.limits.max_elements} elements, got {len(arr)}")
        frac = (arr - self.lo) / (self.hi - self.lo)
        bins = np.clip(np.floor(frac * self.n_bins), 0, self.n_bins - 1).astype(int)
        return [self.bin_ids[b] for b in bins.reshape(-1)]

    def decode(self, text: str, token_ids: Sequence[int]) -> np.ndarray:
        ids = list(token_ids)
        if not ids or len(ids) % 4:
            raise MalformedActionError(f"binned actions need a positive multiple of 4 tokens, got {len(ids)}")
        if len(ids) // 4 > self.limits.max_elements:
            raise MalformedActionError(f"binned actions have {len(ids) // 4} elements "
                                       f"(limit {self.limits.max_elements})")
        try:
            bins = np.array([self._bin_of[t] for t in ids], dtype=np.float64).reshape(-1, 4)
        except KeyError as e:
            raise MalformedActionError(f"token {e.args[0]} is not an action bin token") from None
        centres = self.lo + (bins + 0.5) / self.n_bins * (self.hi - self.lo)
        centres[:, 3] = (centres[:, 3] >= 0.5).astype(np.float64)
        return clamp_chunk(centres, self.limits)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "hierarchical": self.hierarchical, "n_bins": self.n_bins, "bin_ids": self.bin_ids}


def make_codec(name: str, tokenizer: Any = None, limits: ChunkLimits = DEFAULT_LIMITS, **state: Any) -> ActionCodec:
    """Build a codec by registry name; ``state`` is a saved ``to_dict()`` (minus ``name``) or constructor options."""
    if name not in CODECS:
        raise ValueError(f"unknown action codec {name!r}; known: {CODECS.names()}")
    return CODECS.get(name)(tokenizer, limits=limits, **state)


def codec_from_dict(d: dict[str, Any], tokenizer: Any, limits: ChunkLimits = DEFAULT_LIMITS) -> ActionCodec:
    """Rebuild a codec saved with ``to_dict()``."""
    state = dict(d)
    return make_codec(state.pop("name", "language"), tokenizer, limits, **state)
