"""Tiny random-weight transformers models for the TuKA / EWC-LoRA tests (offline, CPU)."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def tiny_qwen(seed: int = 0, dtype: torch.dtype = torch.float32) -> Qwen2ForCausalLM:
    """A 2-layer Qwen2 (hidden 32) with deterministic random weights, in eval mode."""
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(cfg).to(dtype).eval()


@pytest.fixture
def make_base():
    return tiny_qwen


@pytest.fixture
def ids() -> torch.Tensor:
    return torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(1))
