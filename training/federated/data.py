"""Generated instruction-classification task for federated fine-tuning, with IID and Dirichlet non-IID splits.

Each example is a short robot instruction ("please grab the red mug near the table"). Its class combines the intent
(8 intents, 3 synonymous verbs each) with whether the object is a container (drawer, box, door, lid, can), so 16
classes that need two words of the sentence; colours, places and prefixes are distractors. A byte-level BPE tokenizer is
trained offline on the generated corpus with ``tokenizers``; the class is read from the logits of one label token
per class (``<c0>`` ... ``<c15>``) at the last position, so a causal LM answers it as a next-token prediction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

log = logging.getLogger(__name__)

INTENTS: dict[str, tuple[str, ...]] = {
    "pick": ("grab", "pick up", "take"),
    "place": ("put down", "place", "set down"),
    "open": ("open", "unlatch", "swing open"),
    "close": ("close", "shut", "latch"),
    "push": ("push", "shove", "nudge"),
    "wipe": ("wipe", "clean", "scrub"),
    "find": ("find", "look for", "locate"),
    "bring": ("bring me", "fetch", "deliver"),
}
COLOURS = ("red", "blue", "green", "black", "white", "small", "big", "old")
OBJECTS = ("mug", "bottle", "plate", "towel", "book", "drawer", "box", "door", "lid", "can")
CONTAINERS = frozenset(OBJECTS[5:])
PLACES = ("near the table", "on the shelf", "in the kitchen", "by the sink", "on the left", "over there", "", "")
PREFIXES = ("please", "now", "could you", "robot,", "", "")
NUM_CLASSES = 2 * len(INTENTS)
LABEL_TOKENS = tuple(f"<c{i}>" for i in range(NUM_CLASSES))
PAD, EOS = "<pad>", "<eos>"


def make_examples(n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """``n`` generated instructions and their labels ``2 * intent + is_container`` in ``[0, 16)``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    names = list(INTENTS)
    intents = rng.integers(0, len(names), size=n)
    objects = rng.integers(0, len(OBJECTS), size=n)
    texts, labels = [], []
    for y, o in zip(intents, objects):
        obj = OBJECTS[int(o)]
        words = [rng.choice(PREFIXES), rng.choice(INTENTS[names[int(y)]]), "the", rng.choice(COLOURS), obj,
                 rng.choice(PLACES)]
        texts.append(" ".join(w for w in words if w))
        labels.append(2 * int(y) + int(obj in CONTAINERS))
    return texts, np.asarray(labels, dtype=np.int64)


def build_tokenizer(vocab_size: int = 600, seed: int = 0):
    """A byte-level BPE tokenizer trained on the generated corpus (offline, ~10 ms), with pad/eos/label tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts, _ = make_examples(2000, seed=10_000 + seed)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS, *LABEL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)


@dataclass
class Encoded:
    """Left-padded token ids ending in EOS, attention mask and labels; the class is predicted at the last position."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, idx: np.ndarray | list[int]) -> Encoded:
        i = torch.as_tensor(np.asarray(idx, dtype=np.int64))
        return Encoded(self.input_ids[i], self.attention_mask[i], self.labels[i])


def encode(tokenizer, texts: list[str], labels: np.ndarray, max_len: int = 12) -> Encoded:
    """Tokenise ``texts`` (+ EOS), left-pad/truncate to ``max_len``."""
    ids = np.full((len(texts), max_len), tokenizer.pad_token_id, dtype=np.int64)
    mask = np.zeros((len(texts), max_len), dtype=np.int64)
    for r, t in enumerate(texts):
        toks = tokenizer(t, add_special_tokens=False)["input_ids"][: max_len - 1] + [tokenizer.eos_token_id]
        ids[r, max_len - len(toks):] = toks
        mask[r, max_len - len(toks):] = 1
    return Encoded(torch.from_numpy(ids), torch.from_numpy(mask), torch.as_tensor(labels, dtype=torch.long))


def label_token_ids(tokenizer) -> list[int]:
    """Vocabulary ids of the label tokens ``<c0>`` ... ``<c15>``."""
    return [int(tokenizer.convert_tokens_to_ids(t)) for t in LABEL_TOKENS]


def split_clients(
    labels: np.ndarray, num_clients: int, split: str, *, alpha: float = 0.3, seed: int = 0, min_size: int = 4
) -> list[np.ndarray]:
    """Partition example indices over clients: ``"iid"`` (shuffled, equal shares) or ``"dirichlet"`` (per-class
    proportions ~ Dir(alpha), resampled until every client has ``min_size`` examples)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if len(labels) < num_clients * min_size:
        raise ValueError(f"{len(labels)} examples cannot give {num_clients} clients {min_size} each")
    rng = np.random.default_rng(seed)
    if split == "iid":
        return [np.sort(p) for p in np.array_split(rng.permutation(len(labels)), num_clients)]
    if split != "dirichlet":
        raise ValueError(f"split must be 'iid' or 'dirichlet', got {split!r}")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    classes = np.unique(labels)
    for _attempt in range(1000):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, alpha))) * len(idx)).astype(int)[:-1]
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].extend(chunk.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"dirichlet split (alpha={alpha}) could not give every client {min_size} examples")


@dataclass
class FedData:
    """Train partitions per client, a shared test set and the tokenizer's label-token ids."""

    clients: list[Encoded]
    test: Encoded
    label_ids: list[int]
    vocab_size: int


def build_fed_data(
    num_clients: int, examples_per_client: int, split: str, *, alpha: float = 0.3, seed: int = 0,
    test_size: int = 400, max_len: int = 12,
) -> FedData:
    """The whole federated dataset, deterministic in ``seed`` (every client process rebuilds the same one)."""
    tok = build_tokenizer(seed=seed)
    texts, labels = make_examples(num_clients * examples_per_client, seed=seed)
    t_texts, t_labels = make_examples(test_size, seed=seed + 1)
    train = encode(tok, texts, labels, max_len)
    parts = split_clients(labels, num_clients, split, alpha=alpha, seed=seed)
    return FedData(
        clients=[train.subset(p) for p in parts],
        test=encode(tok, t_texts, t_labels, max_len),
        label_ids=label_token_ids(tok),
        vocab_size=len(tok),
    )
