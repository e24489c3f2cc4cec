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
def tuka_model():
    """Factory: a TuKA model on ``q_proj``/``v_proj`` of a tiny Qwen2 (ranks 4,4,3,2; 3 scenes, 2 envs) whose
    expert rows are N(0, 0.3^2) (not near zero), so every term of DKIL sees them; ``**kw`` overrides TuKAConfig."""
    from training.peft.tucker import TuKAConfig, apply_tuka, iter_tuka

    def build(**kw):
        cfg = dict(r1=4, r2=4, r3=3, r4=2, alpha=8.0, target_modules=["q_proj", "v_proj"], num_scenes=3, num_envs=2)
        cfg.update(kw)
        model = apply_tuka(tiny_qwen(), TuKAConfig(**cfg))
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for _, layer in iter_tuka(model):
                for p in (layer.lora_scene["default"], layer.lora_env["default"]):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        return model
    return build


@pytest.fixture
def ids() -> torch.Tensor:
    return torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(1))
