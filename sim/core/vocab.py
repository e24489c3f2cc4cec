"""R2R instruction vocabulary: the word split, the vocab dict of R2R-CE files and tokenisation."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from typing import Any

__all__ = ["PAD_INDEX", "PAD_TOKEN", "UNK_INDEX", "UNK_TOKEN", "build_vocab", "split_words", "tokenize"]

PAD_TOKEN, UNK_TOKEN = "<PAD>", "<UNK>"
PAD_INDEX, UNK_INDEX = 0, 1
_SPLIT_RE = re.compile(r"(\W+)")  # R2R Tokenizer.SENTENCE_SPLIT_REGEX


def split_words(text: str) -> list[str]:
    """R2R word split: lowercase, split on non-alphanumerics; punctuation runs become single-char tokens
    (except runs of dots, kept whole)."""
    toks: list[str] = []
    for word in (s.strip().lower() for s in _SPLIT_RE.split(text.strip())):
        if not word:
            continue
        if all(c in string.punctuation for c in word) and not all(c == "." for c in word):
            toks.extend(c for c in word if not c.isspace())
        else:
            toks.append(word)
    return toks


def build_vocab(texts: Iterable[str]) -> dict[str, Any]:
    """R2R ``instruction_vocab``: index 0 ``<PAD>``, 1 ``<UNK>``, then the sorted distinct words."""
    words = sorted({w for t in texts for w in split_words(t)} - {PAD_TOKEN.lower(), UNK_TOKEN.lower()})
    word_list = [PAD_TOKEN, UNK_TOKEN, *words]
    index = {w: i for i, w in enumerate(word_list)}
    return {"word_list": word_list, "word2idx_dict": index, "itos": list(word_list), "stoi": dict(index),
            "num_vocab": len(word_list), "UNK_INDEX": UNK_INDEX, "PAD_INDEX": PAD_INDEX}


def tokenize(text: str, vocab: dict[str, Any], max_length: int | None = None) -> list[int]:
    """Vocab ids for ``text`` (UNK for unknown words); with ``max_length``, truncate and pad with PAD."""
    w2i = vocab.get("word2idx_dict") or vocab.get("stoi")
    if not isinstance(w2i, dict):
        raise ValueError("vocab has no 'word2idx_dict' / 'stoi' mapping")  # noqa: TRY004 (bad value, not bad type)
    unk = int(vocab.get("UNK_INDEX", UNK_INDEX))
    ids = [int(w2i.get(w, unk)) for w in split_words(text)]
    if max_length is not None:
        ids = ids[:max_length] + [int(vocab.get("PAD_INDEX", PAD_INDEX))] * max(0, max_length - len(ids))
    return ids
