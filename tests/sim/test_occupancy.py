"""Occupancy grid and FMM geodesics: connectivity, metric accuracy, walls, snapping and caching."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import ndimage

from sim.nav.furniture import FurnitureItem
from sim.nav.house import ROOM_KINDS, STYLES, Door, House, Room, _build_walls, generate_house
from sim.nav.layouts import RoomRect
from sim.nav.occupancy import OccupancyGrid, grid_for_scene


def _house(rects: list[tuple[float, float, float, float]], doors: list[Door],
           furniture: list[FurnitureItem] | None = None) -> House:
    rr = [RoomRect(*r) for r in rects]
    rooms = [Room(i, ROOM_KINDS[i], *r) for i, r in enumerate(rects)]
    return House(0, "grid", rooms, doors, _build_walls(rr, doors), furniture or [])


@pytest.fixture(scope="module")
def open_grid() -> OccupancyGrid:
    """One empty 8 m x 6 m room."""
    return OccupancyGrid(_house([(0.0, 0.0, 8.0, 6.0)], []))


@pytest.fixture(scope="module")
def two_rooms() -> OccupancyGrid:
    """Rooms [0,4]x[0,4] and [4,8]x[0,4] joined by a 1 m door at (4, 3.4)."""
    return OccupancyGrid(_house([(0.0, 0.0, 4.0, 4.0), (4.0, 0.0, 8.0, 4.0)], [Door(4.0, 3.4, "y", 1.0, 0, 1)]))


@pytest.fixture(scope="module")
def sealed_rooms() -> OccupancyGrid:
    """The same two rooms without a door."""
    return OccupancyGrid(_house([(0.0, 0.0, 4.0, 4.0), (4.0, 0.0, 8.0, 4.0)], []))


def test_grid_geometry(open_grid: OccupancyGrid) -> None:
    assert open_grid.resolution == pytest.approx(0.05)
    assert open_grid.agent_radius == pytest.approx(0.18)
    h, w = open_grid.shape
    assert (h, w) == (int(round((6.0 + 1.0) / 0.05)), int(round((8.0 + 1.0) / 0.05)))
    assert open_grid.navigable.dtype == bool and open_grid.navigable.shape == open_grid.obstacle.shape
    assert not (open_grid.navigable & open_grid.obstacle).any()
    r, c = open_grid.to_cell(3.0, 2.0)
    x, y = open_grid.to_world(r, c)
    assert abs(x - 3.0) <= 0.025 + 1e-9 and abs(y - 2.0) <= 0.025 + 1e-9


def test_obstacles_are_dilated_by_the_agent_radius(open_grid: OccupancyGrid) -> None:
    assert open_grid.is_navigable(4.0, 3.0)
    assert not open_grid.is_navigable(-0.3, 3.0)  # outside the house
    assert not open_grid.is_navigable(0.0, 3.0)  # in the wall
    assert not open_grid.is_navigable(0.1, 3.0)  # 5 cm from the wall surface < 0.18 m
    assert open_grid.is_navigable(0.35, 3.0)
    assert not open_grid.is_navigable(7.9, 3.0)
    assert open_grid.is_navigable(7.65, 3.0)
    item = FurnitureItem("table", "red", 4.0, 3.0, 0.5, 0.4, 0.75, "box", 0)
    g = OccupancyGrid(_house([(0.0, 0.0, 8.0, 6.0)], [], [item]))
    assert not g.is_navigable(4.0, 3.0)
    assert not g.is_navigable(4.6, 3.0)  # 10 cm from the table's side
    assert g.is_navigable(4.8, 3.0)
    with pytest.raises(ValueError):
        OccupancyGrid(_house([(0.0, 0.0, 8.0, 6.0)], []), resolution=0.0)


def test_every_room_of_generated_houses_is_reachable() -> None:
    for style in STYLES.names():
        for seed in range(15):
            house = generate_house(seed, style)
            grid = OccupancyGrid(house)
            labels, n = ndimage.label(grid.navigable)
            assert n == 1, (house.scene_id, n)
            for room in house.rooms:
                rs, cs = grid._box_slices(room.x0, room.y0, room.x1, room.y1)
                assert grid.navigable[rs, cs].sum() * 0.05 ** 2 > 0.3 * room.area, (house.scene_id, room.name)
            if seed < 4:  # geodesic check on a subset (one FMM each)
                field = grid.distance_field(*house.rooms[0].center)
                for room in house.rooms:
                    sx, sy = grid.snap(*room.center)
                    d = grid.geodesic(sx, sy, *house.rooms[0].center)
                    assert math.isfinite(d), (house.scene_id, room.name)
                    assert d >= math.dist((sx, sy), house.rooms[0].center) - 0.1
                assert np.isfinite(field[grid.navigable]).all()
                assert np.isinf(field[~grid.navigable]).all()


@pytest.mark.parametrize(("start", "goal"), [((1.0, 1.0), (7.0, 5.0)), ((1.0, 3.0), (7.0, 3.0)),
                                             ((4.0, 0.6), (4.2, 5.4)), ((2.0, 2.0), (3.0, 2.5)),
                                             ((6.5, 1.0), (1.2, 4.4))])
def test_geodesic_matches_euclidean_in_open_room(open_grid: OccupancyGrid, start, goal) -> None:
    d = open_grid.geodesic(*start, *goal)
    e = math.dist(start, goal)
    assert d == pytest.approx(e, rel=0.03), (d, e)
    assert open_grid.geodesic(*goal, *goal) < 0.05


def test_geodesic_goes_around_a_wall(two_rooms: OccupancyGrid) -> None:
    start, goal = (3.0, 0.8), (5.0, 0.8)
    e = math.dist(start, goal)
    d = two_rooms.geodesic(*start, *goal)
    # shortest route passes the door gap (y in [2.9, 3.9] shrunk by the agent radius)
    lower = 2 * math.hypot(1.0, 2.9 + 0.18 - 0.8)
    assert lower - 0.1 <= d <= lower + 0.6, d
    assert d > 2.5 * e
    assert not two_rooms.segment_free(*start, *goal)
    # symmetric and consistent with the field
    assert two_rooms.geodesic(*goal, *start) == pytest.approx(d, rel=0.02)


def test_unreachable_is_inf(sealed_rooms: OccupancyGrid) -> None:
    assert math.isinf(sealed_rooms.geodesic(2.0, 2.0, 6.0, 2.0))
    assert math.isfinite(sealed_rooms.geodesic(1.0, 1.0, 3.0, 3.0))
    mask = sealed_rooms.reachable_from(2.0, 2.0)
    assert mask[sealed_rooms.to_cell(1.0, 1.0)]
    assert not mask[sealed_rooms.to_cell(6.0, 2.0)]
    field = sealed_rooms.distance_field(6.0, 2.0)
    assert np.isinf(field[sealed_rooms.to_cell(2.0, 2.0)])
    assert np.isfinite(field[sealed_rooms.to_cell(6.5, 3.0)])


def test_points_in_obstacles_snap_to_navigable_cells(two_rooms: OccupancyGrid) -> None:
    for p in [(4.0, 1.0), (4.02, 2.0), (0.0, 2.0), (0.05, 0.05), (-0.2, 2.0), (2.0, 4.1)]:
        assert not two_rooms.is_navigable(*p)
        s = two_rooms.snap(*p)
        assert two_rooms.is_navigable(*s), (p, s)
        assert math.dist(p, s) <= 0.05 + 0.18 + 0.3, (p, s)  # wall half-thickness + radius + cells/corner
    assert two_rooms.snap(2.0, 2.0) == (2.0, 2.0)  # navigable points are kept as they are
    # a start inside the wall (left of its centre line) is measured from its snapped position
    d = two_rooms.geodesic(3.97, 1.0, 3.5, 1.0)
    assert math.isfinite(d) and d < 0.6


def test_segment_free(two_rooms: OccupancyGrid) -> None:
    assert two_rooms.segment_free(1.0, 1.0, 3.0, 2.5)
    assert two_rooms.segment_free(5.0, 1.0, 7.0, 3.0)
    assert not two_rooms.segment_free(3.0, 2.0, 5.0, 2.0)  # through the wall
    assert two_rooms.segment_free(3.0, 3.4, 5.0, 3.4)  # through the door
    assert not two_rooms.segment_free(1.0, 1.0, -1.0, 1.0)  # out of the house
    assert not two_rooms.segment_free(1.0, 1.0, 100.0, 1.0)  # off the grid


def test_distance_fields_are_cached(two_rooms: OccupancyGrid) -> None:
    f1 = two_rooms.distance_field(6.0, 2.0)
    assert two_rooms.distance_field(6.0, 2.0) is f1
    assert two_rooms.distance_field(6.01, 2.01) is f1  # same goal cell
    f2 = two_rooms.distance_field(2.0, 2.0)
    assert f2 is not f1
    assert two_rooms.distance_field(6.0, 2.0) is f1


def test_grid_for_scene_is_cached_and_rejects_foreign_scenes() -> None:
    g = grid_for_scene("allday/grid/00003")
    assert g is grid_for_scene("allday/grid/00003")
    assert g.shape == OccupancyGrid(generate_house(3, "grid")).shape
    with pytest.raises(ValueError, match="not a generated allday house"):
        grid_for_scene("mp3d/abc/abc.glb")


def test_segment_free_is_stable_under_heading_rounding() -> None:
    """Regression: a 0.25 m step is exactly 10 half-cells, so float noise in the length used to change the number
    of sample points; the same step at headings 1e-15 rad apart got different answers and the follower dithered."""
    grid = grid_for_scene("allday/grid/00023")
    x, y = 6.507720179065278, 4.666456562198428
    turned = -1.8325957145940477 + 23 * math.radians(15)  # 240 deg seen from phi = -105 deg as phi + k * turn
    direct = -2.094395102393197  # -120 deg reached by wrap_angle(phi - turn)
    assert abs(math.cos(turned) - math.cos(direct)) < 1e-12 and abs(math.sin(turned) - math.sin(direct)) < 1e-12
    a = grid.segment_free(x, y, x + 0.25 * math.cos(turned), y + 0.25 * math.sin(turned))
    b = grid.segment_free(x, y, x + 0.25 * math.cos(direct), y + 0.25 * math.sin(direct))
    assert a == b
