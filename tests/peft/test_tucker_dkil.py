"""DKIL: EWC on the shared factors with the online Fisher, consistency, gradient masking, separability."""

from __future__ import annotations

import pytest
import torch

from training.peft.tucker import (
    DKIL,
    DKILConfig,
    add_scene,
    estimate_fisher,
    get_active,
    iter_tuka,
)

TARGETS = ["q_proj", "v_proj"]


def _nav_batches(ids, n=2):
    return [{"input_ids": ids, "labels": ids} for _ in range(n)]


def _finish(dkil: DKIL, ids) -> None:
    dkil.after_task(dkil.model, _nav_batches(ids))


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="omega"):
        DKILConfig(omega=1.0)
    with pytest.raises(ValueError, match="w_es"):
        DKILConfig(w_es=-0.1)
    with pytest.raises(ValueError, match="fisher_norm"):
        DKILConfig(fisher_norm="l2")
    with pytest.raises(ValueError, match="w_ewc"):  # a flag is not a weight
        DKILConfig(w_ewc=True)
    c = DKILConfig()
    assert (c.w_nav, c.w_ewc, c.w_co, c.w_es, c.omega, c.fisher_norm) == (0.5, 0.2, 0.2, 0.1, 0.95, "mean")


def test_first_task_penalty_zero_and_combine_weights(tuka_model, ids) -> None:
    model = tuka_model()
    dkil = DKIL(model)
    dkil.before_task((1, 0))
    assert get_active(model) == (1, 0)
    assert float(dkil.penalty()) == 0.0
    nav = model(ids, labels=ids).loss
    assert torch.allclose(dkil.combine(nav), 0.5 * nav)
    with pytest.raises(ValueError, match="scene 5 out of range"):
        dkil.before_task((5, 0))
    with pytest.raises(ValueError, match="pair of ints"):
        dkil.before_task(3)
    with pytest.raises(ValueError, match="different model"):
        dkil.penalty(tuka_model())


@pytest.mark.parametrize("norm", ["none", "mean"])
def test_ewc_zero_at_anchor_then_matches_hand_formula(tuka_model, ids, norm) -> None:
    model = tuka_model()
    dkil = DKIL(model, DKILConfig(fisher_norm=norm))
    dkil.before_task((0, 0))
    _finish(dkil, ids)
    dkil.before_task((1, 0))
    assert float(dkil.terms()["ewc"].detach()) == 0.0  # right after the snapshot
    shared = dkil.shared_params()
    assert len(shared) == 3 * 2 * len(TARGETS)
    assert all(float(f.sum()) > 0 for f in dkil.fisher.values())
    with torch.no_grad():
        for p in shared.values():
            p.add_(0.01 * torch.randn_like(p))
    fisher = {k: f / f.mean() if norm == "mean" else f for k, f in dkil.fisher.items()}
    want = sum((fisher[k] * (p.detach() - dkil.anchor[k]) ** 2).sum() for k, p in shared.items())
    got = dkil.terms()["ewc"]
    assert float(got) > 0 and torch.allclose(got, want, rtol=1e-5)
    # bigger deviation -> bigger penalty
    with torch.no_grad():
        for p in shared.values():
            p.add_(0.05 * torch.randn_like(p))
    assert float(dkil.terms()["ewc"]) > float(got)


def test_online_fisher_ema_matches_hand_computation(tuka_model) -> None:
    model = tuka_model()
    dkil = DKIL(model)
    keys = list(dkil.shared_params())
    # loss = sum_k <c_b,k , theta_k>: its gradient is c_b, so the per-task Fisher is mean_b c_b^2
    def loss_fn(m, batch):
        params = dkil.shared_params()
        return sum((batch[k] * params[k]).sum() for k in keys)

    def batches(seed):
        g = torch.Generator().manual_seed(seed)
        return [{k: torch.randn(p.shape, generator=g) for k, p in dkil.shared_params().items()} for _ in range(3)]

    b1, b2, b3 = batches(1), batches(2), batches(3)
    f1 = {k: torch.stack([b[k] ** 2 for b in b1]).mean(0) for k in keys}
    f2 = {k: torch.stack([b[k] ** 2 for b in b2]).mean(0) for k in keys}
    f3 = {k: torch.stack([b[k] ** 2 for b in b3]).mean(0) for k in keys}
    est = estimate_fisher(model, dkil.shared_params(), b1, loss_fn)
    assert all(torch.allclose(est[k], f1[k], rtol=1e-6) for k in keys)
    for task, b in (((0, 0), b1), ((1, 0), b2), ((1, 1), b3)):
        dkil.before_task(task)
        dkil.after_task(model, b, loss_fn=loss_fn)
    for k in keys:
        want = 0.95 * (0.95 * f1[k] + 0.05 * f2[k]) + 0.05 * f3[k]
        assert torch.allclose(dkil.fisher[k], want, rtol=1e-5), k


@pytest.mark.parametrize("opt_name", ["adam", "sgd_momentum", "adamw_decay_restore", "adamw_decay"])
def test_gradient_masking_keeps_inactive_rows_through_steps(tuka_model, ids, opt_name) -> None:
    model = tuka_model()
    dkil = DKIL(model)
    dkil.before_task((0, 1))
    _finish(dkil, ids)
    dkil.before_task((2, 0))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = {"adam": lambda: torch.optim.Adam(params, lr=1e-2),
           "sgd_momentum": lambda: torch.optim.SGD(params, lr=1e-2, momentum=0.9),
           "adamw_decay_restore": lambda: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1),
           "adamw_decay": lambda: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)}[opt_name]()
    before = {n: lay.factors() for n, lay in iter_tuka(model)}
    before = {n: {r: p.detach().clone() for r, p in f.items()} for n, f in before.items()}
    for _ in range(3):
        opt.zero_grad()
        dkil.combine(model(ids, labels=ids).loss).backward()
        opt.step()
        if opt_name == "adamw_decay_restore":
            dkil.restore_frozen_rows()
    for name, layer in iter_tuka(model):
        f = layer.factors()
        for role, active, n_rows in (("U3", 2, 3), ("U4", 0, 2)):
            for i in range(n_rows):
                same = torch.equal(f[role][i], before[name][role][i])
                # weight decay shrinks masked rows too: that is why restore_frozen_rows exists
                assert same == (i != active and opt_name != "adamw_decay"), (name, role, i)
        assert not torch.equal(f["G"], before[name]["G"])  # shared parts do train


def test_consistency_penalises_old_rows_only(tuka_model, ids) -> None:
    model = tuka_model()
    dkil = DKIL(model)
    dkil.before_task((0, 0))
    _finish(dkil, ids)
    dkil.before_task((1, 0))  # scene 0 is old; env 0 is the active one again
    assert float(dkil.terms()["co"]) == 0.0
    with torch.no_grad():
        for _, layer in iter_tuka(model):
            layer.lora_scene["default"][0] += 0.1  # old scene row drifts
            layer.lora_scene["default"][1] += 5.0  # active row: free
            layer.lora_scene["default"][2] += 5.0  # never learned: free
            layer.lora_env["default"][0] += 5.0  # active env row: free
    n_layers = len(list(iter_tuka(model)))
    assert float(dkil.terms()["co"]) == pytest.approx(n_layers * 3 * 0.1**2, rel=1e-4)
    # anchor_reused: the active env row 0 (r4 = 2) was learned by task 1, so it is held too; the new scene row is not
    dkil.config.anchor_reused = True
    assert float(dkil.terms()["co"]) == pytest.approx(n_layers * (3 * 0.1**2 + 2 * 5.0**2), rel=1e-4)


def test_anchor_reused_is_validated() -> None:
    with pytest.raises(ValueError, match="anchor_reused"):
        DKILConfig(anchor_reused=1)


def test_separability_nonzero_and_pushes_new_row_away(tuka_model, ids) -> None:
    model = tuka_model()
    dkil = DKIL(model)
    dkil.before_task((0, 0))
    _finish(dkil, ids)
    with torch.no_grad():  # a new scene initialised from the old one (the growth rule): overlapping rows
        for _, layer in iter_tuka(model):
            u3 = layer.lora_scene["default"]
            u3[1] = u3[0] + 0.05 * torch.randn(u3.shape[1])
    dkil.before_task((1, 0))
    es = dkil.terms()["es"]
    n_layers = len(list(iter_tuka(model)))
    assert float(es) > 0.8 * n_layers  # cos^2 close to 1 per layer
    u3s = [layer.lora_scene["default"] for _, layer in iter_tuka(model)]
    es.backward()
    for u3 in u3s:
        assert u3.grad[1].abs().sum() > 0 and torch.equal(u3.grad[0], torch.zeros(3))  # only the new row moves

    def cos2():
        return [float(torch.nn.functional.cosine_similarity(u[0], u[1], dim=0) ** 2) for u in u3s]

    start = cos2()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
    for _ in range(20):
        opt.zero_grad()
        dkil.terms()["es"].backward()
        opt.step()
    end = cos2()
    assert all(e < s for s, e in zip(start, end)) and sum(end) < 0.5 * sum(start)


def test_growth_after_before_task_is_detected(tuka_model, ids) -> None:
    model = tuka_model()
    dkil = DKIL(model)
    dkil.before_task((0, 0))
    add_scene(model, init_from=0)
    with pytest.raises(RuntimeError, match="call before_task again"):
        dkil.penalty()
    dkil.before_task((3, 0))
    assert float(dkil.penalty()) == 0.0


def test_state_dict_roundtrip(tuka_model, ids) -> None:
    model = tuka_model()
    dkil = DKIL(model)
    dkil.before_task((0, 1))
    _finish(dkil, ids)
    other = DKIL(model)
    other.load_state_dict(dkil.state_dict())
    other.before_task((1, 1))
    dkil.before_task((1, 1))
    with torch.no_grad():
        for p in dkil.shared_params().values():
            p.add_(0.01)
    assert torch.equal(other.penalty(), dkil.penalty()) and float(dkil.penalty()) > 0
    with pytest.raises(ValueError, match="corrupt DKIL state"):
        other.load_state_dict({"fisher": {}})
