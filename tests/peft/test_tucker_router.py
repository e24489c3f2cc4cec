"""Prototype routing of scene and environment experts without a task id."""

from __future__ import annotations

import pytest
import torch

from training.peft.tucker import NoPrototypesError, PrototypeRouter, routing_accuracy

D = 48


def _features(scene: int, env: int, n: int, g: torch.Generator) -> torch.Tensor:
    """CLIP-like synthetic features: a large common component + scene and env directions + noise."""
    basis = torch.eye(D)
    common = 5.0 * torch.ones(D) / D**0.5
    return (common + 1.0 * basis[scene] + 0.8 * basis[10 + env]
            + 0.15 * torch.randn(n, D, generator=g))


def _trained_router(n_scenes=3, n_envs=4, center=True):
    g = torch.Generator().manual_seed(0)
    router = PrototypeRouter(center=center)
    for s in range(n_scenes):
        for e in range(n_envs):
            router.add(_features(s, e, 20, g), scene=s, env=e)
    return router


def _test_set(n_scenes=3, n_envs=4):
    g = torch.Generator().manual_seed(1)
    x, s_ids, e_ids = [], [], []
    for s in range(n_scenes):
        for e in range(n_envs):
            x.append(_features(s, e, 10, g))
            s_ids += [s] * 10
            e_ids += [e] * 10
    return torch.cat(x), s_ids, e_ids


def test_routing_accuracy_on_separable_features() -> None:
    router = _trained_router()
    x, s_ids, e_ids = _test_set()
    acc = routing_accuracy(router, x, s_ids, e_ids)
    assert acc == {"scene": 1.0, "env": 1.0, "joint": 1.0}
    assert router.route(x[:10]) == (0, 0)  # a window of frames of task (0, 0)
    assert router.route(x[-1]) == (2, 3)
    scenes, envs = router.route_batch(x)
    assert scenes.tolist() == s_ids and envs.tolist() == e_ids
    # the accuracy helper is not constant: shuffled labels score low
    bad = routing_accuracy(router, x, s_ids[::-1], e_ids)
    assert bad["scene"] < 0.5 and bad["joint"] < 0.5


def test_unseen_pair_routes_to_its_scene_and_env() -> None:
    g = torch.Generator().manual_seed(2)
    router = PrototypeRouter()
    for s, e in [(0, 0), (1, 1), (2, 0), (0, 1)]:  # scene 1 never seen under env 0
        router.add(_features(s, e, 30, g), scene=s, env=e)
    assert router.route(_features(1, 0, 8, g)) == (1, 0)


def test_nearest_prototype_gives_growth_init() -> None:
    router = _trained_router(n_scenes=2, n_envs=2)
    g = torch.Generator().manual_seed(3)
    near_1 = _features(1, 0, 5, g) + 0.3 * torch.eye(D)[30]  # a new scene close to scene 1
    assert router.scene.nearest_one(near_1) == 1


def test_errors() -> None:
    router = PrototypeRouter()
    with pytest.raises(NoPrototypesError, match="no scene prototypes"):
        router.route(torch.randn(D))
    assert issubclass(NoPrototypesError, ValueError)
    with pytest.raises(ValueError, match="scene and/or an env"):
        router.add(torch.randn(D))
    router.add(torch.randn(4, D), scene=0, env=0)
    with pytest.raises(ValueError, match="feature dim 5 != bank dim 48"):
        router.route(torch.randn(5))
    with pytest.raises(ValueError, match="NaN"):
        router.add(torch.full((D,), float("nan")), scene=1)
    with pytest.raises(ValueError, match="scene id must be an int >= 0"):
        router.add(torch.randn(D), scene=-1)
    with pytest.raises(TypeError, match="torch.Tensor"):
        router.route([0.0] * D)


def test_save_load_roundtrip_and_corrupt_file(tmp_path) -> None:
    router = _trained_router()
    router.save(tmp_path / "router.pt")
    again = PrototypeRouter.load(tmp_path / "router.pt")
    x, s_ids, e_ids = _test_set()
    assert torch.equal(again.route_batch(x)[0], router.route_batch(x)[0])
    assert torch.equal(again.route_batch(x)[1], router.route_batch(x)[1])
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="corrupt router file"):
        PrototypeRouter.load(tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="not found"):
        PrototypeRouter.load(tmp_path / "missing.pt")
    torch.save({"scene": {"ids": [0], "sums": [], "counts": [1]}, "env": {}}, tmp_path / "inconsistent.pt")
    with pytest.raises(ValueError, match="corrupt scene prototype bank"):
        PrototypeRouter.load(tmp_path / "inconsistent.pt")
