"""EWC-LoRA: the Fisher of the full-size delta W read through peft's low-rank layers, accumulate, merge, reset."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch import nn

from training.peft.ewc_lora import (
    ContinualPenalty,
    EWCLoRA,
    EWCLoRAConfig,
    NoPenalty,
    estimate_delta_fisher,
    lora_delta,
    lora_layers,
)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def _lora_mlp(seed: int = 0):
    torch.manual_seed(seed)
    model = get_peft_model(MLP().double(), LoraConfig(r=2, lora_alpha=4, target_modules=["fc1", "fc2"]))
    with torch.no_grad():  # non-zero B, so delta W != 0 and both layers' gradients depend on it
        for layer in lora_layers(model).values():
            layer.lora_B["default"].weight.normal_(0, 0.3)
    return model


def _loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def _batches(sizes=(5, 3, 4), seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 6, generator=g, dtype=torch.float64), torch.randint(0, 4, (n,), generator=g))
            for n in sizes]


def _brute_force(model, batches, mode):
    """Explicit delta W parameters: W_eff = W + D with D = current s B A; square the gradient w.r.t. D."""
    layers = lora_layers(model)
    ws = {n.split(".")[-1]: lay.get_base_layer() for n, lay in layers.items()}
    deltas = {n.split(".")[-1]: lora_delta(lay).detach().double().clone().requires_grad_(True)
              for n, lay in layers.items()}

    def fwd(x):
        h = torch.tanh(F.linear(x, ws["fc1"].weight + deltas["fc1"], ws["fc1"].bias))
        return F.linear(h, ws["fc2"].weight + deltas["fc2"], ws["fc2"].bias)

    fisher = {k: torch.zeros_like(d) for k, d in deltas.items()}
    n_total = 0
    for x, y in batches:
        if mode == "batch":
            grads = torch.autograd.grad(F.cross_entropy(fwd(x), y), list(deltas.values()))
            for k, g in zip(deltas, grads):
                fisher[k] += g**2 * len(x)
        else:
            for i in range(len(x)):
                grads = torch.autograd.grad(F.cross_entropy(fwd(x[i : i + 1]), y[i : i + 1]), list(deltas.values()))
                for k, g in zip(deltas, grads):
                    fisher[k] += g**2
        n_total += len(x)
    return {k: f / n_total for k, f in fisher.items()}


@pytest.mark.parametrize("mode", ["batch", "sample"])
def test_low_rank_fisher_matches_brute_force(mode) -> None:
    model = _lora_mlp()
    batches = _batches()
    got = estimate_delta_fisher(model, lora_layers(model), batches, _loss, mode=mode)
    want = _brute_force(model, batches, mode)
    for name, f in got.items():
        key = name.split(".")[-1]
        assert f.shape == want[key].shape == lora_layers(model)[name].get_base_layer().weight.shape
        assert float(f.sum()) > 0
        assert torch.allclose(f.double(), want[key], rtol=1e-5, atol=1e-12), (mode, name)
    # the two modes genuinely differ (batch-level Fisher under-estimates)
    other = estimate_delta_fisher(model, lora_layers(model), batches, _loss,
                                  mode="sample" if mode == "batch" else "batch")
    assert not all(torch.allclose(got[n], other[n]) for n in got)


def test_after_task_merges_resets_and_penalty_is_zero_at_anchor() -> None:
    model = _lora_mlp()
    x = torch.randn(7, 6, dtype=torch.float64)
    ewc = EWCLoRA(model, EWCLoRAConfig(lam=10.0))
    assert isinstance(ewc, ContinualPenalty)
    ewc.before_task(0)
    assert float(ewc.penalty()) == 0.0
    want = model(x).detach()
    ewc.after_task(model, _batches(), loss_fn=_loss)
    assert torch.allclose(model(x), want, atol=1e-12)  # delta W folded into W
    for layer in ewc.layers.values():
        assert torch.count_nonzero(layer.lora_B["default"].weight) == 0
        assert torch.count_nonzero(layer.lora_A["default"].weight) > 0
    ewc.before_task(1)
    assert float(ewc.penalty().detach()) == 0.0  # at the anchor
    with torch.no_grad():
        for layer in ewc.layers.values():
            layer.lora_B["default"].weight.normal_(0, 0.1)
    pen = ewc.penalty()
    hand = 0.5 * 10.0 * sum((ewc.fisher[n] * lora_delta(lay) ** 2).sum() for n, lay in ewc.layers.items())
    assert float(pen) > 0 and torch.allclose(pen, hand)
    pen.backward()  # differentiable through A and B
    assert all(lay.lora_B["default"].weight.grad.abs().sum() > 0 for lay in ewc.layers.values())
    with torch.no_grad():
        for layer in ewc.layers.values():
            layer.lora_B["default"].weight.mul_(2.0)
    assert float(ewc.penalty()) == pytest.approx(4 * float(pen))


def test_fisher_accumulates_with_gamma_and_state_roundtrip() -> None:
    model = _lora_mlp()
    ewc = EWCLoRA(model, EWCLoRAConfig(gamma=0.5, merge_after_task=False))
    names = list(ewc.layers)
    f1 = {n: torch.rand(lay.out_features, lay.in_features) for n, lay in ewc.layers.items()}
    f2 = {n: torch.rand(lay.out_features, lay.in_features) for n, lay in ewc.layers.items()}
    ewc.after_task(model, fisher=f1)
    ewc.after_task(model, fisher=f2)
    for n in names:
        assert torch.allclose(ewc.fisher[n], 0.5 * f1[n] + f2[n])
    other = EWCLoRA(model, EWCLoRAConfig(gamma=0.5, merge_after_task=False))
    other.load_state_dict(ewc.state_dict())
    assert other.tasks_done == 2 and float(ewc.penalty().detach()) > 0
    assert torch.equal(other.penalty(), ewc.penalty())
    bad = {"fisher": {names[0]: torch.zeros(2, 2)}, "tasks_done": 1}
    with pytest.raises(ValueError, match="does not match the model"):
        other.load_state_dict(bad)
    with pytest.raises(ValueError, match="needs Fisher batches"):
        ewc.after_task(model)


def test_config_and_model_errors(make_base) -> None:
    with pytest.raises(ValueError, match="fisher_mode"):
        EWCLoRAConfig(fisher_mode="exact")
    with pytest.raises(ValueError, match="lam"):
        EWCLoRAConfig(lam=-1.0)
    with pytest.raises(ValueError, match="no vanilla peft LoRA"):
        EWCLoRA(make_base())


def test_ewc_lora_limits_forgetting_of_the_first_task() -> None:
    """Two conflicting tasks: with EWC the second task raises the first task's loss less than without."""
    t1, t2 = _batches((16, 16), seed=5), _batches((16, 16), seed=6)

    def run(lam: float) -> float:
        model = _lora_mlp(seed=2)
        ewc = EWCLoRA(model, EWCLoRAConfig(lam=lam))
        for task, data in ((0, t1), (1, t2)):
            ewc.before_task(task)
            opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=5e-2)
            for _ in range(60):
                opt.zero_grad()
                ewc.combine(sum(_loss(model, b) for b in data)).backward()
                opt.step()
            if task == 0:
                loss_t1 = float(sum(_loss(model, b) for b in t1))
                ewc.after_task(model, data, loss_fn=_loss)
        return float(sum(_loss(model, b) for b in t1)) - loss_t1

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 240 tiny steps: intra-op threads only add contention on a shared 2-core box
    try:
        plain, ewc = run(lam=0.0), run(lam=50.0)
    finally:
        torch.set_num_threads(threads)
    assert plain > 0.1 and ewc < 0.5 * plain


def test_ewc_lora_on_a_transformers_model(make_base, ids) -> None:
    model = get_peft_model(make_base(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    ewc = EWCLoRA(model)
    assert len(ewc.layers) == 4
    ewc.before_task((0, 0))
    ewc.after_task(model, [{"input_ids": ids, "labels": ids}])  # default_loss_fn: model(**batch).loss
    assert all(float(f.sum()) > 0 for f in ewc.fisher.values())
    with torch.no_grad():
        for layer in ewc.layers.values():
            layer.lora_B["default"].weight.normal_(0, 0.1)
    assert float(ewc.penalty().detach()) > 0


def test_no_penalty_is_sequential_lora() -> None:
    pen = NoPenalty()
    pen.before_task((0, 0))
    loss = torch.tensor(1.5, requires_grad=True)
    assert pen.combine(loss) is loss and float(pen.penalty()) == 0.0
    pen.after_task()
    assert pen.state_dict() == {"tasks_done": 1}
    assert isinstance(pen, ContinualPenalty)
    _ = copy.deepcopy(pen)
