"""Tiny transformers causal LM (random weights, built from a config offline) with PLoRA adapters on its projections.

Every process (server, each client) rebuilds the identical frozen base from ``seed``, so only adapter tensors travel.
The class of an instruction is the argmax of the label tokens' logits at the last position (a next-token answer).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch import nn

from training.peft.plora import apply_plora

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSpec:
    """Shape of the tiny Llama-family LM and where the rank-R PLoRA adapters go."""

    vocab_size: int
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    rank: int = 16
    alpha: float = 32.0
    target: str = r"\.(q_proj|k_proj|v_proj|o_proj)$"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden", "layers", "heads", "kv_heads", "ffn", "rank"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ModelSpec.{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"ModelSpec: hidden {self.hidden}, heads {self.heads}, kv_heads {self.kv_heads} mismatch")
        if not self.alpha > 0:
            raise ValueError(f"ModelSpec.alpha must be > 0, got {self.alpha}")


class LabelTokenClassifier(nn.Module):
    """Wraps a causal LM: ``forward(input_ids, attention_mask) -> [batch, n_classes]`` label-token logits."""

    def __init__(self, lm: nn.Module, label_ids: list[int]) -> None:
        super().__init__()
        self.lm = lm
        self.register_buffer("label_ids", torch.as_tensor(label_ids, dtype=torch.long), persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.lm(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits[:, -1, :].index_select(-1, self.label_ids)


def build_model(spec: ModelSpec, label_ids: list[int]) -> LabelTokenClassifier:
    """The frozen random-weight LM (deterministic in ``spec.seed``) with rank-``spec.rank`` PLoRA layers."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden, num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads, intermediate_size=spec.ffn,
        max_position_embeddings=64, tie_word_embeddings=True, attn_implementation="eager",
    )
    torch.manual_seed(spec.seed)
    lm = LlamaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(spec.seed + 1)
    apply_plora(lm, spec.target, rank=spec.rank, alpha=spec.alpha, generator=gen)
    return LabelTokenClassifier(lm, label_ids).eval()
