"""Fed-PLoRA math: Select-N-Fold exactness, per-module aggregation, update validation, local training."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from training.peft.plora import (
    ClientRound,
    ClientUpdate,
    PLoRALinear,
    aggregate,
    aggregation_noise,
    apply_plora,
    client_rng,
    extract_update,
    init_noise,
    iter_plora,
    load_plora_state,
    plora_state,
    prepare_client,
    select_modules,
    split_valid,
)


def _global_model(rank: int = 8, seed: int = 0) -> nn.Module:
    """Tiny MLP with PLoRA on both linears and non-zero B (as after a few rounds)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    apply_plora(model, r"^[02]$", rank=rank, alpha=16.0)
    with torch.no_grad():
        for _, layer in iter_plora(model):
            layer.lora_B.normal_(0.0, 0.2)
    return model.eval()


def _layer_state(rank: int = 4, d_in: int = 3, d_out: int = 2, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"l": (torch.randn(rank, d_in, generator=g), torch.randn(d_out, rank, generator=g))}


def _update(cid: str, n: int, idx: list[int], seed: int, d_in: int = 3, d_out: int = 2) -> ClientUpdate:
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(len(idx), d_in, generator=g), torch.randn(d_out, len(idx), generator=g)
    return ClientUpdate(client_id=cid, num_samples=n, indices=idx, modules={"l": (a, b)})


# ---------------------------------------------------------------------------------------------------- layer / fold
def test_layer_starts_equal_to_base_and_delta_matches_forward() -> None:
    torch.manual_seed(1)
    base = nn.Linear(5, 4)
    ref = copy.deepcopy(base)
    layer = PLoRALinear(base, rank=4, alpha=8.0)
    x = torch.randn(7, 5)
    torch.testing.assert_close(layer(x), ref(x))  # B = 0 at init
    with torch.no_grad():
        layer.lora_B.normal_()
    expected = ref(x) + x @ layer.delta_weight().T
    torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)
    assert layer.scale == pytest.approx(2.0)
    assert not layer.base.weight.requires_grad


def test_fold_then_unfold_restores_modules() -> None:
    model = _global_model(rank=6)
    before = plora_state(model)
    w0 = [layer.base.weight.clone() for _, layer in iter_plora(model)]
    layer = dict(iter_plora(model))["0"]
    layer.fold([1, 4])
    assert layer.folded_indices == [1, 4] and layer.active_indices == [0, 2, 3, 5]
    assert (
        float(layer.lora_A.detach()[[1, 4]].abs().sum()) == 0.0
        and float(layer.lora_B.detach()[:, [1, 4]].abs().sum()) == 0.0
    )
    with pytest.raises(ValueError, match="already folded"):
        layer.fold([4])
    torch.testing.assert_close(plora_state(model)["0"], before["0"])  # state reports pre-fold values
    assert layer.unfold() == [1, 4]
    torch.testing.assert_close(layer.base.weight, w0[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(plora_state(model)["0"], before["0"])


@pytest.mark.parametrize("seed", range(6))
def test_select_n_fold_has_zero_init_noise(seed: int) -> None:
    rank = 8
    model = _global_model(rank=rank, seed=seed)
    rng = client_rng(seed=123, round_idx=seed, client_id=f"c{seed}")
    budget = int(rng.integers(1, rank + 1))
    client = prepare_client(model, budget, rng)
    x = torch.randn(32, 6)
    assert init_noise(model, client.model, x) < 1e-6
    torch.testing.assert_close(client.model(x), model(x), atol=1e-6, rtol=0)
    assert len(client.indices) == budget
    for _, layer in iter_plora(client.model):
        assert layer.active_indices == client.indices
    for _, layer in iter_plora(model):  # the global model is untouched
        assert layer.folded_indices == [] and layer.active_indices == list(range(rank))


def test_selection_is_seeded_uniform_and_validated() -> None:
    a = select_modules(8, 3, client_rng(0, 2, "c1"))
    assert a == select_modules(8, 3, client_rng(0, 2, "c1")) and a == sorted(set(a)) and len(a) == 3
    counts = np.zeros(8)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        counts[select_modules(8, 2, rng)] += 1
    assert np.all(np.abs(counts / 2000 - 0.25) < 0.04)  # each index with probability r/R
    with pytest.raises(ValueError, match="budget"):
        select_modules(4, 5, rng)
    with pytest.raises(ValueError, match="budget"):
        prepare_client(_global_model(rank=4), 5, rng)


# ----------------------------------------------------------------------------------------------------- aggregation
def test_per_module_aggregation_matches_hand_computation() -> None:
    g = _layer_state()
    u1, u2, u3 = _update("c1", 1, [0, 1], 1), _update("c2", 3, [1, 2], 2), _update("c3", 2, [1], 3)
    new = aggregate(g, [u1, u2, u3])
    (a1, b1), (a2, b2), (a3, b3) = u1.modules["l"], u2.modules["l"], u3.modules["l"]
    na, nb = new["l"]
    torch.testing.assert_close(na[0], a1[0]) and torch.testing.assert_close(nb[:, 0], b1[:, 0])
    torch.testing.assert_close(na[1], (1 * a1[1] + 3 * a2[0] + 2 * a3[0]) / 6)
    torch.testing.assert_close(nb[:, 1], (1 * b1[:, 1] + 3 * b2[:, 0] + 2 * b3[:, 0]) / 6)
    torch.testing.assert_close(na[2], a2[1]) and torch.testing.assert_close(nb[:, 2], b2[:, 1])
    assert torch.equal(na[3], g["l"][0][3]) and torch.equal(nb[:, 3], g["l"][1][:, 3])  # nobody trained 3
    uni = aggregate(g, [u1, u2, u3], weighting="uniform")["l"]
    torch.testing.assert_close(uni[0][1], (a1[1] + a2[0] + a3[0]) / 3)
    shuffled = aggregate(g, [u3, u1, u2])["l"]
    assert torch.equal(shuffled[0], na) and torch.equal(shuffled[1], nb)  # order independent, bitwise
    assert aggregation_noise(new, [u1, u2, u3]) > 0.0
    assert aggregation_noise(aggregate(g, [u1]), [u1]) == pytest.approx(0.0, abs=1e-6)


def test_unselected_modules_unchanged_and_empty_round_is_identity() -> None:
    g = _layer_state(rank=6)
    new = aggregate(g, [_update("a", 5, [2], 4), _update("b", 1, [2, 5], 5)])["l"]
    for j in (0, 1, 3, 4):
        assert torch.equal(new[0][j], g["l"][0][j]) and torch.equal(new[1][:, j], g["l"][1][:, j])
    same = aggregate(g, [])["l"]
    assert torch.equal(same[0], g["l"][0]) and torch.equal(same[1], g["l"][1])


def _nan_update() -> ClientUpdate:
    u = _update("bad", 2, [0, 1], 7)
    u.modules["l"][0][0, 0] = float("nan")
    return u


def _inf_update() -> ClientUpdate:
    u = _update("bad", 2, [0, 1], 7)
    u.modules["l"][1][0, 1] = float("inf")
    return u


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (_nan_update, "non-finite"),
        (_inf_update, "non-finite"),
        (lambda: _update("bad", 2, [0, 1], 7, d_in=4), "shapes"),
        (lambda: ClientUpdate("bad", 2, [0, 1], {"l": _update("x", 1, [0], 7).modules["l"]}), "shapes"),
        (lambda: _update("bad", 2, [1, 4], 7), "out of range"),
        (lambda: _update("bad", 2, [-1], 7), "out of range"),
        (lambda: _update("bad", 2, [1, 1], 7), "duplicate"),
        (lambda: _update("bad", 0, [1], 7), "num_samples"),
        (lambda: ClientUpdate("bad", 2, [0], {"other": _update("x", 1, [0], 7).modules["l"]}), "layer mismatch"),
    ],
)
def test_bad_updates_raise_naming_client(make, match: str) -> None:
    g = _layer_state(rank=4)
    good = _update("good", 1, [0], 9)
    with pytest.raises(ValueError, match=rf"client 'bad'.*{match}"):
        aggregate(g, [good, make()])
    valid, rejected = split_valid(g, [good, make()])
    assert [u.client_id for u in valid] == ["good"] and set(rejected) == {"bad"}


def test_load_state_round_trip_and_mismatch() -> None:
    src, dst = _global_model(seed=1), _global_model(seed=2)
    load_plora_state(dst, plora_state(src), indices=[0, 3])
    s, d = plora_state(src)["0"], plora_state(dst)["0"]
    torch.testing.assert_close(d[0][[0, 3]], s[0][[0, 3]])
    assert not torch.equal(d[0][1], s[0][1])
    with pytest.raises(ValueError, match="shapes"):
        load_plora_state(_global_model(rank=4), plora_state(src))


# ---------------------------------------------------------------------------------------------------- local training
def test_client_training_lowers_loss_and_round_trips() -> None:
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    x = torch.randn(128, 6)
    y = teacher(x).detach()
    global_model = _global_model(rank=8, seed=3)
    client: ClientRound = prepare_client(global_model, 3, client_rng(0, 0, "c0"))
    trainable = [p for p in client.model.parameters() if p.requires_grad]
    assert len(trainable) == 4  # A and B of the two PLoRA layers, nothing of the base
    opt = torch.optim.SGD(trainable, lr=0.05)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = nn.functional.mse_loss(client.model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    for _, layer in iter_plora(client.model):  # folded modules stayed at zero
        folded = layer.folded_indices
        assert (
            float(layer.lora_A.detach()[folded].abs().sum()) == 0.0
            and float(layer.lora_B.detach()[:, folded].abs().sum()) == 0.0
        )
    update = extract_update(client, "c0", num_samples=128)
    g_state = plora_state(global_model)
    new = aggregate(g_state, [update])
    load_plora_state(global_model, new)
    # single client: global model now equals the trained client (fold vs. explicit modules, up to rounding)
    torch.testing.assert_close(global_model(x), client.model(x), atol=1e-5, rtol=1e-5)
    unselected = [j for j in range(8) if j not in client.indices]
    assert torch.equal(new["0"][0][unselected], g_state["0"][0][unselected])
