"""Slow: the toy lifelong check quoted in docs/tuka.md (MLP, 4 conflicting (scene, env) tasks, 3 task orders).

Run: ``.venv/bin/python -m pytest -q -m slow tests/peft/test_tucker_toy_lifelong.py -s`` (about 1-2 minutes).
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch import nn

from training.peft.ewc_lora import EWCLoRA, EWCLoRAConfig, NoPenalty
from training.peft.multi_lora import OracleMultiLoRA
from training.peft.tucker import DKIL, DKILConfig, TuKAConfig, apply_tuka, set_active

log = logging.getLogger(__name__)
D, C, H, S, E = 16, 8, 64, 2, 2
TARGET = ["fc1", "fc2", "fc3"]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(D, H), nn.Linear(H, H), nn.Linear(H, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _world():
    g = torch.Generator().manual_seed(0)
    protos = torch.randn(C, D, generator=g) * 1.5
    perm_s = [torch.randperm(C, generator=g) for _ in range(S)]
    perm_e = [torch.randperm(C, generator=g) for _ in range(E)]
    shift = [torch.zeros(D)] + [torch.randn(D, generator=g) for _ in range(E - 1)]
    scale = [1.0] + [0.5 + torch.rand(1, generator=g).item() for _ in range(E - 1)]

    def data(task, n, seed):
        gg = torch.Generator().manual_seed(seed)
        c = torch.randint(0, C, (n,), generator=gg)
        if task is None:  # pre-training: plain classes, normal environment
            return protos[c] + 0.5 * torch.randn(n, D, generator=gg), c
        s, e = task
        x = (protos[c] + 0.5 * torch.randn(n, D, generator=gg)) * scale[e] + shift[e]
        return x, perm_s[s][perm_e[e][c]]

    torch.manual_seed(0)
    base = MLP()
    opt = torch.optim.Adam(base.parameters(), 1e-2)
    x, y = data(None, 2000, 1)
    for _ in range(300):
        opt.zero_grad()
        F.cross_entropy(base(x), y).backward()
        opt.step()
    tasks = [(s, e) for s in range(S) for e in range(E)]
    train = {t: data(t, 512, 100 + 10 * t[0] + t[1]) for t in tasks}
    test = {t: data(t, 512, 900 + 10 * t[0] + t[1]) for t in tasks}
    return base, tasks, train, test


def _loss(model, batch):
    return F.cross_entropy(model(batch[0]), batch[1])


def _run(method: str, order, base, train, test, steps: int = 150) -> tuple[float, float]:
    model = copy.deepcopy(base)
    ml = None
    if method in ("seq", "ewc"):
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=TARGET))
        pen = NoPenalty(model) if method == "seq" else EWCLoRA(model, EWCLoRAConfig(lam=1e7))
    elif method == "multi":
        ml, pen = OracleMultiLoRA(model, LoraConfig(r=4, lora_alpha=8, target_modules=TARGET)), NoPenalty()
    else:
        model = apply_tuka(model, TuKAConfig(r1=4, r2=4, r3=4, r4=4, alpha=8, target_modules=TARGET,
                                             num_scenes=S, num_envs=E))
        pen = DKIL(model, DKILConfig(fisher_norm=method.split("_")[1]))
    acc = torch.zeros(len(order), len(order))
    for i, t in enumerate(order):
        if ml is not None:
            ml.add_task(t)
            model = ml.model
        pen.before_task(t)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], 1e-2)
        x, y = train[t]
        for _ in range(steps):
            opt.zero_grad()
            pen.combine(F.cross_entropy(model(x), y)).backward()
            opt.step()
        pen.after_task(model, [(x[j : j + 64], y[j : j + 64]) for j in range(0, 512, 64)], loss_fn=_loss)
        for j, u in enumerate(order[: i + 1]):
            if ml is not None:
                ml.select(u)
            elif method.startswith("tuka"):
                set_active(model, *u)
            with torch.no_grad():
                acc[i, j] = (model(test[u][0]).argmax(1) == test[u][1]).float().mean()
    n = len(order)
    forgetting = sum(float((acc[j, j] - acc[-1, j]) / acc[j, j].clamp_min(1e-9)) for j in range(n - 1)) / (n - 1)
    return float(acc[-1].mean()), forgetting


@pytest.mark.slow
def test_tuka_dkil_forgets_less_than_sequential_lora() -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        base, tasks, train, test = _world()
        results: dict[str, list[tuple[float, float]]] = {}
        for seed in (3, 4, 5):
            order = [tasks[i] for i in torch.randperm(len(tasks), generator=torch.Generator().manual_seed(seed))]
            for method in ("seq", "ewc", "tuka_none", "tuka_mean", "multi"):
                results.setdefault(method, []).append(_run(method, order, base, train, test))
    finally:
        torch.set_num_threads(threads)
    mean = {m: (sum(a for a, _ in r) / len(r), sum(f for _, f in r) / len(r)) for m, r in results.items()}
    for m, (a, f) in mean.items():
        print(f"{m:10s} avg final acc {a:.3f}  forgetting {f:.3f}")
    assert mean["tuka_mean"][1] < mean["seq"][1] - 0.1
    assert mean["tuka_mean"][0] > mean["seq"][0] + 0.05
    assert mean["multi"][0] > 0.95
