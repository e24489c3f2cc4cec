"""The oracle multi-LoRA baseline: one peft LoRA adapter per task, picked by the task id."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig

from training.peft.multi_lora import OracleMultiLoRA, adapter_name


def _cfg() -> LoraConfig:
    return LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"])


def _train_marker(ml: OracleMultiLoRA, value: float) -> None:
    """Set the active adapter's B to a task-specific value (what training would do), only trainable params."""
    with torch.no_grad():
        for n, p in ml.model.named_parameters():
            if p.requires_grad and "lora_B" in n:
                p.fill_(value)


def test_one_adapter_per_task_selected_by_id(make_base, ids, tmp_path) -> None:
    base_out = make_base()(ids).logits
    ml = OracleMultiLoRA(make_base(), _cfg())
    assert ml.add_task((0, 0)) == "task_0_0"
    _train_marker(ml, 0.05)
    ml.add_task((1, 2))
    trainable = {n for n, p in ml.model.named_parameters() if p.requires_grad}
    assert trainable and all(".task_1_2." in n for n in trainable)  # only the new task's adapter trains
    _train_marker(ml, -0.05)
    outs = {}
    for task in [(0, 0), (1, 2)]:
        ml.select(task)
        outs[task] = ml.model(ids).logits.detach()
        assert not torch.allclose(outs[task], base_out, atol=1e-4)
    assert not torch.allclose(outs[(0, 0)], outs[(1, 2)], atol=1e-4)
    assert ml.adapter_params() == 2 * ml.adapter_params((0, 0)) > 0
    with pytest.raises(ValueError, match="unknown task"):
        ml.select((3, 3))
    with pytest.raises(ValueError, match="already has an adapter"):
        ml.add_task((0, 0))
    ml.save(tmp_path / "ml")
    again = OracleMultiLoRA.load(make_base(), tmp_path / "ml")
    assert set(again.tasks.values()) == {(0, 0), (1, 2)}
    for task, want in outs.items():
        again.select(task)
        assert torch.equal(again.model(ids).logits, want)
    with pytest.raises(ValueError, match="not a multi-LoRA checkpoint"):
        OracleMultiLoRA.load(make_base(), tmp_path)


def test_adapter_names() -> None:
    assert adapter_name((2, 3)) == "task_2_3" and adapter_name(4) == "task_4"
    with pytest.raises(ValueError, match="invalid adapter name"):
        adapter_name("a.b")
