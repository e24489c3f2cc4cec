"""Procedural houses: reproducibility, room/door/wall/furniture geometry, scene ids and the MJCF."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

from sim.nav.house import (
    MAX_ROOMS,
    MIN_ROOMS,
    ROOM_KINDS,
    STYLES,
    House,
    generate_house,
    parse_scene_id,
    scene_id_for,
)

SEEDS = range(15)
DOOR_CLEARANCE = 1.1
EPS = 1e-6


@pytest.fixture(scope="module")
def houses() -> list[House]:
    """15 seeds x every style (generation is ~1 ms per house)."""
    return [generate_house(seed, style) for style in STYLES.names() for seed in SEEDS]


def _overlap_area(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0.0) * max(h, 0.0)


def test_three_styles_registered() -> None:
    assert {"grid", "corridor", "lshape"} <= set(STYLES.names())


@pytest.mark.parametrize("style", STYLES.names())
def test_same_seed_and_style_give_identical_house(style: str) -> None:
    a, b = generate_house(7, style), generate_house(7, style)
    assert a.rooms == b.rooms
    assert a.doors == b.doors
    assert a.walls == b.walls
    assert a.furniture == b.furniture
    assert a == b


@pytest.mark.parametrize("style", STYLES.names())
def test_different_seeds_differ(style: str) -> None:
    layouts = {tuple((r.x0, r.y0, r.x1, r.y1) for r in generate_house(s, style).rooms) for s in range(6)}
    assert len(layouts) == 6
    assert generate_house(1, style).furniture != generate_house(2, style).furniture


def test_styles_differ_for_the_same_seed() -> None:
    rooms = {tuple((r.x0, r.y0, r.x1, r.y1) for r in generate_house(3, s).rooms) for s in STYLES.names()}
    assert len(rooms) == len(STYLES.names())


def test_room_counts_and_names(houses: list[House]) -> None:
    counts = set()
    for h in houses:
        n = len(h.rooms)
        counts.add(n)
        assert MIN_ROOMS <= n <= MAX_ROOMS, h.scene_id
        names = [r.name for r in h.rooms]
        assert len(set(names)) == n, (h.scene_id, names)
        assert set(names) <= set(ROOM_KINDS), (h.scene_id, names)
        assert [r.index for r in h.rooms] == list(range(n))
        assert all(r.x1 > r.x0 + 1.0 and r.y1 > r.y0 + 1.0 for r in h.rooms)
    assert len(counts) >= 4  # the seeded room count actually varies


@pytest.mark.parametrize("style", STYLES.names())
@pytest.mark.parametrize("n", range(MIN_ROOMS, MAX_ROOMS + 1))
def test_n_rooms_is_honoured(style: str, n: int) -> None:
    h = generate_house(11, style, n_rooms=n)
    assert len(h.rooms) == n
    assert len({r.name for r in h.rooms}) == n
    if style == "corridor" or n == MAX_ROOMS:
        assert "hallway" in [r.name for r in h.rooms]


def test_rooms_do_not_overlap(houses: list[House]) -> None:
    for h in houses:
        for a, b in itertools.combinations(h.rooms, 2):
            assert _overlap_area(a, b) < EPS, (h.scene_id, a.name, b.name)


def test_doors_lie_on_shared_edges(houses: list[House]) -> None:
    for h in houses:
        assert len(h.doors) >= len(h.rooms) - 1, h.scene_id  # at least a spanning tree
        for d in h.doors:
            a, b = h.rooms[d.a], h.rooms[d.b]
            assert d.a != d.b
            assert 0.8 <= d.width <= 1.2
            if d.axis == "x":  # wall along x at y = d.y
                assert min(abs(a.y1 - b.y0), abs(b.y1 - a.y0)) < EPS
                assert abs(d.y - (a.y1 if abs(a.y1 - b.y0) < EPS else a.y0)) < 1e-3
                lo, hi = max(a.x0, b.x0), min(a.x1, b.x1)
                pos = d.x
            else:
                assert d.axis == "y"
                assert min(abs(a.x1 - b.x0), abs(b.x1 - a.x0)) < EPS
                assert abs(d.x - (a.x1 if abs(a.x1 - b.x0) < EPS else a.x0)) < 1e-3
                lo, hi = max(a.y0, b.y0), min(a.y1, b.y1)
                pos = d.y
            assert lo + d.width / 2 - EPS <= pos <= hi - d.width / 2 + EPS, (h.scene_id, d)


def test_door_gaps_are_not_walled(houses: list[House]) -> None:
    for h in houses:
        for d in h.doors:
            for w in h.walls:
                if d.axis == "x" and w.y0 == w.y1 and abs(w.y0 - d.y) < 1e-3:
                    lo, hi = sorted((w.x0, w.x1))
                    assert hi <= d.x - d.width / 2 + EPS or lo >= d.x + d.width / 2 - EPS, (h.scene_id, d, w)
                if d.axis == "y" and w.x0 == w.x1 and abs(w.x0 - d.x) < 1e-3:
                    lo, hi = sorted((w.y0, w.y1))
                    assert hi <= d.y - d.width / 2 + EPS or lo >= d.y + d.width / 2 - EPS, (h.scene_id, d, w)


def _wall_line(w) -> tuple[str, float, float, float]:
    """(axis, fixed coordinate, lo, hi) of a wall segment."""
    if w.y0 == w.y1:
        return "x", w.y0, min(w.x0, w.x1), max(w.x0, w.x1)
    return "y", w.x0, min(w.y0, w.y1), max(w.y0, w.y1)


def _door_line(d) -> tuple[str, float, float, float]:
    """(axis, fixed coordinate, lo, hi) of a door gap."""
    c, pos = (d.y, d.x) if d.axis == "x" else (d.x, d.y)
    return d.axis, c, pos - d.width / 2, pos + d.width / 2


def test_walls_enclose_the_rooms(houses: list[House]) -> None:
    """Every room edge is covered by walls except where a door opens."""
    for h in houses[::5]:
        walls = [_wall_line(w) for w in h.walls]
        gaps = [_door_line(d) for d in h.doors]
        for r in h.rooms:
            for t in np.linspace(0.05, 0.95, 19):
                x, y = r.x0 + t * (r.x1 - r.x0), r.y0 + t * (r.y1 - r.y0)
                # (axis of the edge, its fixed coordinate, position along it)
                for axis, c, pos in (("x", r.y0, x), ("x", r.y1, x), ("y", r.x0, y), ("y", r.x1, y)):
                    def hit(lines, axis=axis, c=c, pos=pos) -> bool:
                        return any(a == axis and abs(k - c) < 1e-3 and lo <= pos <= hi for a, k, lo, hi in lines)

                    assert hit(walls) != hit(gaps), (h.scene_id, r.name, axis, c, pos)


def test_corridor_rooms_open_onto_the_hallway() -> None:
    for seed in SEEDS:
        h = generate_house(seed, "corridor")
        hall = [r.index for r in h.rooms if r.name == "hallway"]
        assert len(hall) == 1
        assert all(hall[0] in (d.a, d.b) for d in h.doors)
        assert {d.a for d in h.doors} | {d.b for d in h.doors} == set(range(len(h.rooms)))


def test_furniture_inside_rooms_and_clear_of_doors(houses: list[House]) -> None:
    for h in houses:
        assert len(h.furniture) >= len(h.rooms), h.scene_id  # most rooms get >= 2 items
        for it in h.furniture:
            r = h.rooms[it.room]
            assert r.x0 <= it.x - it.sx and it.x + it.sx <= r.x1, (h.scene_id, it)
            assert r.y0 <= it.y - it.sy and it.y + it.sy <= r.y1, (h.scene_id, it)
            assert it.name and it.colour and it.label == f"{it.colour} {it.name}"
            assert len(it.rgba) == 4
            for d in h.doors:
                if it.room in (d.a, d.b):
                    assert it.distance_to(d.x, d.y) >= DOOR_CLEARANCE - EPS, (h.scene_id, it, d)
        for a, b in itertools.combinations(h.furniture, 2):
            if a.room == b.room:
                overlap = abs(a.x - b.x) < a.sx + b.sx and abs(a.y - b.y) < a.sy + b.sy
                assert not overlap, (h.scene_id, a, b)


def test_room_at() -> None:
    h = generate_house(4, "grid")
    for r in h.rooms:
        assert h.room_at(*r.center) is r
    x0, y0, x1, y1 = h.bounds
    assert h.room_at(x0 - 5.0, y0 - 5.0) is None


@pytest.mark.parametrize("style", STYLES.names())
def test_scene_id_round_trip(style: str) -> None:
    for seed in (0, 42, 12345):
        sid = scene_id_for(style, seed)
        assert parse_scene_id(sid) == (style, seed)
        assert generate_house(seed, style).scene_id == sid
    assert scene_id_for(style, 42) == f"allday/{style}/00042"


@pytest.mark.parametrize("bad", ["mp3d/abc/abc.glb", "data/scene_datasets/mp3d/17DRP5sb8fy/17DRP5sb8fy.glb",
                                 "allday/grid", "allday/grid/xyz", "other/grid/00001"])
def test_foreign_scene_ids_raise(bad: str) -> None:
    with pytest.raises(ValueError, match="not a generated allday house"):
        parse_scene_id(bad)


def test_unknown_style_raises() -> None:
    with pytest.raises(ValueError, match="unknown house style 'castle'.*grid"):
        generate_house(0, "castle")
    with pytest.raises(ValueError, match="unknown house style 'castle'"):
        parse_scene_id("allday/castle/00001")


@pytest.mark.parametrize("n", [0, MIN_ROOMS - 1, MAX_ROOMS + 1, 20])
def test_n_rooms_out_of_range_raises(n: int) -> None:
    with pytest.raises(ValueError, match="n_rooms"):
        generate_house(0, "grid", n_rooms=n)


@pytest.mark.parametrize("style", STYLES.names())
def test_mjcf_compiles_with_named_furniture_and_agent_camera(style: str) -> None:
    os.environ.setdefault("MUJOCO_GL", "egl")
    import mujoco

    from sim.nav.conditions import LightingSpec
    from sim.nav.mjcf import build_mjcf, get_quality

    h = generate_house(5, style)
    model = mujoco.MjModel.from_xml_string(build_mjcf(h, LightingSpec(), get_quality("fast")))
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, i) for i in range(model.ngeom)]
    items = [n for n in names if n.startswith("item_")]
    assert len(items) == len(h.furniture)
    for i, it in enumerate(h.furniture):
        gid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, f"item_{i}_{it.colour}_{it.name.replace(' ', '_')}")
        assert gid >= 0
        # build_mjcf writes 4 significant digits: 1 cm steps beyond 10 m
        np.testing.assert_allclose(model.geom_pos[gid][:2], (it.x, it.y), atol=6e-3)
        np.testing.assert_allclose(model.geom_rgba[gid], it.rgba, atol=1e-3)
    assert sum(n.startswith("wall_") for n in names) == len(h.walls)
    assert sum(n.startswith("floor_") for n in names) == len(h.rooms)
    assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "agent") >= 0
