"""DKIL's ``core_fisher="pair"``: EWC on each learned pair's contraction ``G x3 U3[s] x4 U4[e]``."""

from __future__ import annotations

import math

import pytest
import torch

from training.peft.tucker import DKIL, DKILConfig, iter_tuka
from training.peft.tucker.pair_ewc import contract, core_grad_to_pair, pair_freedom, pair_key


def _finish(dkil: DKIL, ids) -> None:
    dkil.after_task(dkil.model, [{"input_ids": ids, "labels": ids} for _ in range(2)])


def _learn_first_pair(tuka_model, ids, mode: str) -> DKIL:
    """Task (0, 0) learned; the current task (1, 0) reuses env row 0."""
    dkil = DKIL(tuka_model(), DKILConfig(core_fisher=mode))
    dkil.before_task((0, 0))
    _finish(dkil, ids)
    dkil.before_task((1, 0))
    return dkil


def test_core_grad_to_pair_is_the_gradient_in_the_contraction() -> None:
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(3, 4, 5, 2, generator=gen, requires_grad=True)
    u3, u4 = torch.randn(5, generator=gen), torch.randn(2, generator=gen)
    w = torch.randn(3, 4, generator=gen)
    c = contract(g, u3, u4)
    loss = (w * c).sum() + (c ** 2).sum()  # dL/dC = w + 2C
    (grad_g,) = torch.autograd.grad(loss, g)
    assert torch.allclose(core_grad_to_pair(grad_g, u3, u4), w + 2 * c.detach(), atol=1e-5)


def test_config_rejects_unknown_core_fisher() -> None:
    with pytest.raises(ValueError, match="core_fisher"):
        DKILConfig(core_fisher="kfac")
    assert DKILConfig().core_fisher == "diagonal"  # the paper's


def test_pair_fisher_replaces_the_core_diagonal(tuka_model, ids) -> None:
    dkil = _learn_first_pair(tuka_model, ids, "pair")
    layers = [n for n, _ in iter_tuka(dkil.model)]
    assert not any(f"{ln}.G" in dkil.fisher for ln in layers)
    for ln in layers:
        f = dkil.fisher[pair_key(ln, (0, 0))]
        assert f.shape == (4, 4) and float(f.sum()) > 0  # (r1, r2)
        assert f"{ln}.U1" in dkil.fisher and f"{ln}.U2T" in dkil.fisher  # U1, U2 keep the diagonal
    assert float(dkil.terms()["ewc"]) == 0.0  # right after the snapshot


def _perturb(dkil: DKIL, change) -> None:
    with torch.no_grad():
        for _, layer in iter_tuka(dkil.model):
            change(layer)


def test_core_change_no_learned_pair_sees_is_free_only_under_pair(tuka_model, ids) -> None:
    def orthogonal(layer):  # delta G = A (x) v3 (x) u4[0], v3 orthogonal to u3[0]: C_00 unchanged
        g, u3, u4 = layer.lora_core["default"], layer.lora_scene["default"], layer.lora_env["default"]
        v3 = torch.randn(g.shape[2], generator=torch.Generator().manual_seed(5))
        v3 = v3 - (v3 @ u3[0]) / (u3[0] @ u3[0]) * u3[0]
        g += 0.5 * torch.einsum("ij,k,l->ijkl", torch.randn(g.shape[:2]), v3, u4[0])

    pair, diag = _learn_first_pair(tuka_model, ids, "pair"), _learn_first_pair(tuka_model, ids, "diagonal")
    _perturb(pair, orthogonal)
    _perturb(diag, orthogonal)
    assert float(pair.terms()["ewc"]) < 1e-8
    assert float(diag.terms()["ewc"]) > 1e-2


def test_reused_row_is_held_through_the_contraction(tuka_model, ids) -> None:
    dkil = _learn_first_pair(tuka_model, ids, "pair")
    diag = _learn_first_pair(tuka_model, ids, "diagonal")
    for d in (dkil, diag):
        _perturb(d, lambda layer: layer.lora_env["default"][0].add_(0.2))  # the active env row, learned by (0, 0)
    small = float(dkil.terms()["ewc"])
    assert small > 0 and float(diag.terms()["ewc"]) == 0.0 and float(diag.terms()["co"]) == 0.0
    _perturb(dkil, lambda layer: layer.lora_env["default"][0].add_(0.2))  # twice the change: four times the cost
    assert float(dkil.terms()["ewc"]) == pytest.approx(4 * small, rel=1e-4)
    dkil.terms()["ewc"].backward()
    for _, layer in iter_tuka(dkil.model):
        grad = layer.lora_env["default"].grad
        assert grad[0].abs().sum() > 0 and torch.equal(grad[1], torch.zeros_like(grad[1]))  # row 1: never learned
        assert layer.lora_core["default"].grad.abs().sum() > 0


def test_training_under_pair_ewc_moves_the_held_contraction_less(tuka_model, ids) -> None:
    """Train task (1, 0) on other data with the (default) DKIL loss: the learned pair's C moves less under "pair"."""
    other = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(9))
    moved = {}
    for mode in ("pair", "diagonal"):
        dkil = _learn_first_pair(tuka_model, ids, mode)
        layers = [layer for _, layer in iter_tuka(dkil.model)]
        start = [contract(la.lora_core["default"], la.lora_scene["default"][0], la.lora_env["default"][0]).detach()
                 for la in layers]
        opt = torch.optim.Adam([p for p in dkil.model.parameters() if p.requires_grad], lr=2e-2)
        for _ in range(30):
            opt.zero_grad()
            dkil.combine(dkil.model(other, labels=other).loss).backward()
            opt.step()
        moved[mode] = sum(float((contract(la.lora_core["default"], la.lora_scene["default"][0],
                                          la.lora_env["default"][0]).detach() - s).norm())
                          for la, s in zip(layers, start))
    assert moved["pair"] < 0.5 * moved["diagonal"], moved


def test_pair_state_dict_roundtrip(tuka_model, ids) -> None:
    dkil = _learn_first_pair(tuka_model, ids, "pair")
    other = DKIL(dkil.model, DKILConfig(core_fisher="pair"))
    other.load_state_dict(dkil.state_dict())
    other.before_task((1, 0))
    assert other.pairs == {(0, 0)}
    _perturb(dkil, lambda layer: layer.lora_env["default"][0].add_(0.1))
    assert torch.equal(other.penalty(), dkil.penalty()) and float(dkil.penalty()) > 0
    legacy = {k: v for k, v in dkil.state_dict().items() if k not in ("pairs", "pair_anchor")}
    DKIL(dkil.model).load_state_dict(legacy)  # states saved before "pair" existed still load


def _unit(theta: float, n: int = 4) -> torch.Tensor:
    v = torch.zeros(n)
    v[0], v[1] = math.cos(theta), math.sin(theta)
    return v


def test_pair_freedom_is_the_product_of_the_two_rows_sines() -> None:
    """Pairs (0,0), (0,1), (1,0) held; the new pair (1,1) reuses both rows: only sin(a3) * sin(a4) of its
    direction u3[1] (x) u4[1] lies outside the held pairs' span (scale-free in the rows)."""
    a3, a4 = 0.3, 1.1
    u3 = torch.stack([_unit(0.0), 2.5 * _unit(a3)])
    u4 = torch.stack([0.1 * _unit(0.0, 3), _unit(a4, 3)])
    held = {(0, 0), (0, 1), (1, 0)}
    assert pair_freedom(u3, u4, held, (1, 1)) == pytest.approx(math.sin(a3) * math.sin(a4), rel=1e-6)
    assert pair_freedom(u3, u4, {(0, 0)}, (1, 1)) == pytest.approx(
        math.sqrt(1 - (math.cos(a3) * math.cos(a4)) ** 2), rel=1e-6)  # one held pair: 1 - cos^2 of the angle
    assert pair_freedom(u3, u4, set(), (1, 1)) == 1.0
    assert pair_freedom(u3, u4, held | {(1, 1)}, (1, 1)) == pytest.approx(math.sin(a3) * math.sin(a4), rel=1e-6)
    same = torch.stack([u3[0], u3[0]])  # a row copied from another: no room at all
    assert pair_freedom(same, u4, held, (1, 1)) == pytest.approx(0.0, abs=1e-6)
    assert pair_freedom(torch.zeros(2, 4), u4, held, (1, 1)) == 0.0


def test_dkil_records_the_pair_freedom_of_each_task(tuka_model, ids) -> None:
    from training.peft.tucker import add_scene

    dkil = DKIL(tuka_model(num_scenes=1, num_envs=2), DKILConfig(core_fisher="pair"))
    dkil.before_task((0, 0))
    assert dkil.freedom == 1.0  # nothing held
    _finish(dkil, ids)
    dkil.before_task((0, 1))
    _finish(dkil, ids)
    copy = add_scene(dkil.model, init_from=0)  # an exact copy of scene 0
    dkil.before_task((copy, 0))
    assert dkil.freedom == pytest.approx(0.0, abs=1e-5)
    with torch.no_grad():  # the copy moves off its source: the pair (copy, 1) gains room
        for _, layer in iter_tuka(dkil.model):
            layer.lora_scene["default"][copy] += torch.randn(3, generator=torch.Generator().manual_seed(2))
    _finish(dkil, ids)
    dkil.before_task((copy, 1))
    assert 0.05 < dkil.freedom < 1.0
