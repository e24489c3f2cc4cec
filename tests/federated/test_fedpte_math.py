"""FedPTE math: NIW evidence, split/merge decisions, the stability constraint, the prototype losses and FedAvg."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import multigammaln

from training.federated.fedpte.client import fedavg
from training.federated.fedpte.config import ClientConfig, EvolutionConfig
from training.federated.fedpte.evidence import (
    NIWPrior,
    gaussian_js,
    isotropic_prior,
    log_evidence,
    merge_score,
    split_score,
)
from training.federated.fedpte.evolve import ClassUpload, PrototypeSet, bound_drift, evolve, fixed_prototypes
from training.federated.fedpte.losses import proto_contrastive_loss, proto_l2_loss


def _blobs(sep: float, n: int = 12, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(0, 0.05, (n, d)), rng.normal(0, 0.05, (n, d))
    a[:, 0] += 0.5
    b[:, 0] += 0.5 + sep
    return a, b


def test_log_evidence_matches_hand_formula_one_point_1d():
    # d = 1, one point x: κn = κ0 + 1, νn = ν0 + 1, Sn = S0 + κ0/(κ0+1) (x - m0)^2
    k0, n0, s0, m0, x = 2.0, 3.0, 1.5, 0.2, 1.0
    prior = NIWPrior(np.array([m0]), k0, n0, np.array([[s0]]))
    kn, nn = k0 + 1, n0 + 1
    sn = s0 + k0 / kn * (x - m0) ** 2
    want = (-0.5 * math.log(math.pi) + multigammaln(nn / 2, 1) - multigammaln(n0 / 2, 1) + 0.5 * n0 * math.log(s0)
            - 0.5 * nn * math.log(sn) + 0.5 * (math.log(k0) - math.log(kn)))
    assert log_evidence(np.array([[x]]), prior) == pytest.approx(want, rel=1e-12)
    assert log_evidence(np.zeros((0, 1)), prior) == 0.0


def test_log_evidence_is_order_invariant_and_rejects_bad_points():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(9, 3))
    prior = isotropic_prior(x)
    assert log_evidence(x, prior) == pytest.approx(log_evidence(x[::-1], prior), rel=1e-12)
    with pytest.raises(ValueError, match="NaN"):
        log_evidence(np.full((2, 3), np.nan), prior)
    with pytest.raises(ValueError, match="d=2"):
        log_evidence(np.zeros((2, 2)), prior)
    with pytest.raises(ValueError, match="nu0"):
        NIWPrior(np.zeros(3), 1.0, 1.5, np.eye(3))


def test_split_favoured_for_separated_blobs_and_merge_for_one_blob():
    a, b = _blobs(sep=1.0)
    x = np.concatenate([a, b])
    prior = isotropic_prior(x[:, :3])
    assert split_score(a[:, :3], b[:, :3], prior, 1.0) > 5
    assert merge_score(a[:, :3], b[:, :3], prior, 1.5) < -5
    c, d = _blobs(sep=0.0)
    prior = isotropic_prior(np.concatenate([c, d])[:, :3])
    assert split_score(c[:, :3], d[:, :3], prior, 1.0) < 0
    assert merge_score(c[:, :3], d[:, :3], prior, 1.5) > 0


def test_split_penalty_grows_with_imbalance():
    a, b = _blobs(sep=1.0, n=12)
    prior = isotropic_prior(np.concatenate([a, b])[:, :3])
    balanced = split_score(a[:, :3], b[:, :3], prior, 0.0) - split_score(a[:, :3], b[:, :3], prior, 5.0)
    unbalanced = split_score(a[:4, :3], b[:, :3], prior, 0.0) - split_score(a[:4, :3], b[:, :3], prior, 5.0)
    assert balanced == pytest.approx(0.0)
    assert unbalanced == pytest.approx(5.0 * (1 - 4 / 12))


def test_gaussian_js_bounds_and_symmetry():
    mu, cov = np.zeros(2), np.eye(2)
    assert gaussian_js(mu, cov, mu, cov) == pytest.approx(0.0, abs=1e-9)
    far = gaussian_js(mu, cov, mu + 50, cov)
    assert far == pytest.approx(math.log(2), abs=1e-3)
    mid = gaussian_js(mu, cov, mu + 1.0, cov, n_samples=4000)
    assert 0.05 < mid < 0.3
    assert mid == pytest.approx(gaussian_js(mu + 1.0, cov, mu, cov, n_samples=4000), abs=0.02)


def _upload(points: np.ndarray) -> ClassUpload:
    return ClassUpload(points, np.full(len(points), 10.0))


def test_evolve_splits_two_domains_and_keeps_one_domain_whole():
    a, b = _blobs(sep=1.0)
    cfg = EvolutionConfig()
    out = evolve(None, [{0: _upload(a[:6]), 1: _upload(a[6:])}, {0: _upload(b[:6]), 1: _upload(a[:6] + 0.01)}],
                 cfg)
    assert out.num_prototypes() == {0: 2, 1: 1}
    got = sorted(out.centres[0][:, 0])
    assert got == pytest.approx([0.5, 1.5], abs=0.05)  # the two blob centres (first round: no drift bound)
    assert any("split" in e for e in out.events)


def test_evolve_merges_prototypes_whose_points_became_one_blob():
    c, d = _blobs(sep=0.0)
    prev = PrototypeSet({0: np.array([[0.3] + [0.0] * 5, [0.7] + [0.0] * 5])}, {0: np.array([1.0, 1.0])})
    out = evolve(prev, [{0: _upload(c)}, {0: _upload(d)}], EvolutionConfig(max_drift=10.0))
    assert out.num_prototypes() == {0: 1}
    assert out.centres[0][0, 0] == pytest.approx(0.5, abs=0.03)
    assert any("merged" in e for e in out.events)


def test_stability_constraint_bounds_prototype_drift():
    a, _ = _blobs(sep=1.0)
    prev = PrototypeSet({0: np.array([[-2.0] + [0.0] * 5])}, {0: np.array([1.0])})
    for drift in (0.1, 0.4):
        out = evolve(prev, [{0: _upload(a)}], EvolutionConfig(max_drift=drift))
        moves = np.linalg.norm(out.centres[0] - prev.centres[0], axis=1)
        assert (moves <= drift + 1e-9).all() and moves.max() == pytest.approx(drift)
    # an unconstrained jump would land on the blob mean (x ≈ 0.5), 2.5 away
    free = evolve(prev, [{0: _upload(a)}], EvolutionConfig(max_drift=100.0))
    assert free.centres[0][0, 0] == pytest.approx(0.5, abs=0.05)
    old, new = np.zeros((2, 3)), np.array([[3.0, 4.0, 0.0], [0.1, 0.0, 0.0]])
    np.testing.assert_allclose(bound_drift(new, old, 1.0), [[0.6, 0.8, 0.0], [0.1, 0.0, 0.0]])
    np.testing.assert_allclose(bound_drift(new, old, 10.0, momentum=0.5), new / 2)


def test_evolve_caps_prototypes_and_is_deterministic():
    rng = np.random.default_rng(3)
    pts = np.concatenate([rng.normal(0, 0.02, (6, 4)) + 3 * np.eye(4)[i] for i in range(4)])
    cfg = EvolutionConfig(max_prototypes=2)
    r1 = evolve(None, [{0: _upload(pts)}], cfg)
    r2 = evolve(None, [{0: _upload(pts)}], cfg)
    assert r1.num_prototypes()[0] <= 2
    np.testing.assert_array_equal(r1.centres[0], r2.centres[0])
    with pytest.raises(ValueError, match="dimensions disagree"):
        evolve(r1, [{0: _upload(np.zeros((3, 2)))}], cfg)


def test_fixed_prototypes_is_the_count_weighted_class_mean():
    ups = [{0: ClassUpload(np.array([[1.0, 0.0]]), np.array([1.0]))},
           {0: ClassUpload(np.array([[0.0, 1.0]]), np.array([3.0])), 1: ClassUpload(np.ones((2, 2)), np.ones(2))}]
    out = fixed_prototypes(ups)
    np.testing.assert_allclose(out.centres[0], [[0.25, 0.75]])
    np.testing.assert_allclose(out.centres[1], [[1.0, 1.0]])


def test_bad_uploads_and_configs_are_rejected():
    with pytest.raises(ValueError, match="counts"):
        ClassUpload(np.zeros((2, 3)), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match=r"\(k, D\)"):
        ClassUpload(np.zeros((2, 3)), np.ones(3))
    with pytest.raises(ValueError, match="max_drift"):
        EvolutionConfig(max_drift=0.0)
    with pytest.raises(TypeError, match="proj_dim"):
        EvolutionConfig(proj_dim=2.5)
    with pytest.raises(ValueError, match="tau"):
        ClientConfig(tau=0.0)


def test_contrastive_loss_lower_near_own_prototypes_than_near_another_class():
    protos = torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]])
    labels = torch.tensor([0, 0, 1])
    y = torch.tensor([0, 0])
    near_own = torch.tensor([[1.0, 0.05, 0.0], [0.8, 0.62, 0.01]])
    near_other = torch.tensor([[0.05, 0.0, 1.0], [0.0, 0.1, 1.0]])
    lo = proto_contrastive_loss(near_own, y, protos, labels, tau=0.06)
    hi = proto_contrastive_loss(near_other, y, protos, labels, tau=0.06)
    assert float(lo) < 0.01 and float(hi) > 10.0
    # multi-positive: a feature on either sub-prototype of its class scores the same low loss
    a = proto_contrastive_loss(torch.tensor([[1.0, 0.0, 0.0]]), y[:1], protos, labels)
    b = proto_contrastive_loss(torch.tensor([[0.8, 0.6, 0.0]]), y[:1], protos, labels)
    assert float(a) < 1e-3 and float(b) < 1e-3
    # hand value: one positive at cos 1, one negative at cos 0, tau 1 -> log(1 + e^-1)
    v = proto_contrastive_loss(torch.tensor([[1.0, 0.0]]), torch.tensor([0]), torch.eye(2), torch.tensor([0, 1]), 1.0)
    assert float(v) == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-6)


def test_contrastive_loss_gradient_pulls_features_towards_their_class():
    protos = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    z = torch.tensor([[0.6, 0.8]], requires_grad=True)
    loss = proto_contrastive_loss(z, torch.tensor([0]), protos, torch.tensor([0, 1]), tau=0.1)
    loss.backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()
    z2 = (z - 0.1 * z.grad).detach()  # one gradient step turns z towards prototype 0
    assert z2[0, 0] / z2.norm() > 0.6
    # samples whose class has no prototype contribute nothing (and give a zero loss with a graph)
    w = torch.randn(3, 2, requires_grad=True)
    zero = proto_contrastive_loss(w, torch.tensor([5, 5, 5]), protos, torch.tensor([0, 1]))
    zero.backward()
    assert float(zero) == 0.0 and torch.equal(w.grad, torch.zeros_like(w))
    with pytest.raises(ValueError, match="same D"):
        proto_contrastive_loss(torch.zeros(2, 3), torch.tensor([0, 1]), protos, torch.tensor([0, 1]))


def test_l2_loss_is_squared_distance_of_unit_features():
    protos, labels = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    v = proto_l2_loss(torch.tensor([[0.0, 3.0]]), torch.tensor([0]), protos, labels)
    assert float(v) == pytest.approx(2.0)  # |(0,1) - (1,0)|^2


def test_fedavg_weights_by_samples_and_rejects_mismatch():
    s1 = {"w": torch.tensor([0.0, 2.0]), "n": torch.tensor(3)}
    s2 = {"w": torch.tensor([4.0, 6.0]), "n": torch.tensor(7)}
    out = fedavg([s1, s2], [1, 3])
    torch.testing.assert_close(out["w"], torch.tensor([3.0, 5.0]))
    assert int(out["n"]) == 3
    with pytest.raises(ValueError, match="different keys or shapes"):
        fedavg([s1, {"w": torch.zeros(3), "n": torch.tensor(1)}], [1, 1])
    with pytest.raises(ValueError, match="weights"):
        fedavg([s1, s2], [1, 0])
