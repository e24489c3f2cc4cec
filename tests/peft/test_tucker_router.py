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


def _two_room_scene(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Scene 0 seen from two rooms on either side of scene 1 along the direction its mean and scene 1's differ
    in, so one room is nearer scene 1's mean than its own; env 0 for all."""
    basis = torch.eye(D)
    room_a, room_b, other = 3.0 * basis[0] + 2.0 * basis[1], -3.0 * basis[0], 1.5 * basis[1]
    noise = lambda: 0.05 * torch.randn(n, D, generator=g)  # noqa: E731
    return torch.cat([room_a + noise(), room_b + noise()]), other + noise()


def test_memory_routes_a_scene_its_mean_does_not_describe() -> None:
    g = torch.Generator().manual_seed(4)
    s0, s1 = _two_room_scene(40, g)
    q0, q1 = _two_room_scene(10, g)
    x, s_ids = torch.cat([q0, q1]), [0] * len(q0) + [1] * len(q1)
    routers = {}
    for memory in (0, 16):
        routers[memory] = PrototypeRouter(memory=memory)
        routers[memory].add(s0, scene=0, env=0)
        routers[memory].add(s1, scene=1, env=0)
    mean_acc = routing_accuracy(routers[0], x, s_ids, [0] * len(x))["scene"]
    memory_acc = routing_accuracy(routers[16], x, s_ids, [0] * len(x))["scene"]
    assert mean_acc == pytest.approx(2 / 3)  # the mean prototype sends room a of scene 0 to scene 1
    assert memory_acc == 1.0
    labels, protos = routers[16].scene.prototypes()
    assert labels == [0] * 16 + [1] * 16 and protos.shape == (32, D)
    # the serving table routes as the live router, row by row, and survives a state round trip
    table = routers[16].to_table()
    assert table.num_experts == (2, 1) and table.scene.shape == (32, D)
    assert [table.route(r)[0] for r in x] == routers[16].route_batch(x)[0].tolist()
    again = PrototypeRouter()
    again.load_state_dict(routers[16].state_dict())
    assert again.scene.memory == 16 and torch.equal(again.route_batch(x)[0], routers[16].route_batch(x)[0])


def test_memory_keeps_an_equal_share_of_every_add() -> None:
    bank = PrototypeRouter(memory=10).scene
    first, second = torch.arange(40.0)[:, None].repeat(1, 3), 100 + torch.arange(8.0)[:, None].repeat(1, 3)
    bank.add(0, first)
    assert bank.prototypes()[1].shape[0] == 10  # 40 rows cut to 10, spread evenly
    assert bank._raw()[1][:, 0].tolist() == [0, 4, 9, 13, 17, 22, 26, 30, 35, 39]
    bank.add(0, second)  # 18 rows > 10: each add keeps 5
    kept = bank._raw()[1][:, 0].tolist()
    assert len(kept) == 10 and sum(v >= 100 for v in kept) == 5 and kept[0] == 0 and kept[-1] == 107
    assert bank.prototypes()[0] == [0] * 10
    # the mean prototype still counts every row
    assert torch.allclose(bank._sum[0] / bank._count[0], torch.cat([first, second]).double().mean(0))


def test_memory_errors() -> None:
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="memory must be an int >= 0"):
            PrototypeRouter(memory=bad)
    router = PrototypeRouter(memory=4)
    router.add(torch.randn(6, D), scene=0, env=0)
    state = router.state_dict()
    state["scene"]["rows"] = []  # rows of no expert
    with pytest.raises(ValueError, match="corrupt scene prototype bank"):
        PrototypeRouter().load_state_dict(state)
