"""Fed-PLoRA on the VLA/VLN backbone: a tiny PaliGemma (agents.vlm) with PLoRA on every language-model linear.
Select-N-Fold starts the client at the global function; a local step on a language-action example trains only
the selected modules; aggregation of the client's modules reproduces the client's model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="needs the vlm extra")

from agents.vlm import (  # noqa: E402
    MICRO_SIZES,
    TinyVLMConfig,
    build_tiny_vlm,
    collate,
    load_vlm,
    lora_target_regex,
    training_example,
)
from training.peft.plora import (  # noqa: E402
    aggregate,
    apply_plora,
    client_rng,
    extract_update,
    iter_plora,
    load_plora_state,
    plora_state,
    prepare_client,
)

MICRO = dict(MICRO_SIZES)


def test_select_n_fold_and_aggregation_on_a_tiny_paligemma(tmp_path) -> None:
    torch.manual_seed(0)
    bundle = load_vlm(build_tiny_vlm(tmp_path / "vlm", config=TinyVLMConfig(**MICRO)))
    model = bundle.model.float().eval()
    names = apply_plora(model, lora_target_regex("paligemma"), rank=8, alpha=16.0)
    assert names and not any("vision" in n for n in names)  # the language model only, as the paper's LoRA
    for _, layer in iter_plora(model):  # a non-trivial global state (B = 0 would make every check vacuous)
        with torch.no_grad():
            layer.lora_B.normal_(0.0, 0.05)
    img = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    batch = collate(bundle, [training_example(bundle, img, "pick up the red cube", "descend; lift")])
    with torch.no_grad():
        ref = model(**batch).logits
    client = prepare_client(model, 2, client_rng(0, 0, "robot-1"))
    with torch.no_grad():
        start = client.model(**batch).logits
    assert float((start - ref).abs().max()) < 1e-4  # Select-N-Fold: no initialisation noise
    trainable = [p for p in client.model.parameters() if p.requires_grad]
    assert len(trainable) == 2 * len(names)  # A and B of each PLoRA layer, nothing of the VLM
    opt = torch.optim.AdamW(trainable, lr=1e-2)
    client.model.train()
    losses = []
    for _ in range(5):
        loss = client.model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    client.model.eval()
    assert losses[-1] < losses[0]
    new = aggregate(plora_state(model), [extract_update(client, "robot-1", num_samples=1)])
    load_plora_state(model, new)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, client.model(**batch).logits, atol=1e-4, rtol=1e-4)
