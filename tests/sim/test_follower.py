"""Shortest-path follower (oracle) and discrete VLN-CE motion on the occupancy grid."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from agents.core.types import NavAction
from sim.core.frames import habitat_to_mj, phi_to_theta, quat_to_yaw, wrap_angle
from sim.nav.episode_gen import EpisodeGenConfig, _goal_point, sample_episode
from sim.nav.follower import FOLLOWERS, SearchFollower, ShortestPathFollower, SightlineFollower, make_follower
from sim.nav.house import ROOM_KINDS, STYLES, Door, House, Room, _build_walls, generate_house
from sim.nav.layouts import RoomRect
from sim.nav.motion import MotionSpec, apply_action
from sim.nav.occupancy import OccupancyGrid

SEEDS_PER_STYLE = 6
PAIRS_PER_HOUSE = 3
TURN = math.radians(15.0)


@dataclass
class Run:
    scene: str
    start: tuple[float, float]
    goal: tuple[float, float]
    geodesic: float
    positions: list[tuple[float, float]]
    actions: list[int]
    geos: list[float]
    keep_tol: float

    @property
    def length(self) -> float:
        return sum(math.dist(a, b) for a, b in zip(self.positions[:-1], self.positions[1:]))


def _house_grids() -> Iterator[tuple[int, str, House, OccupancyGrid]]:
    """(seed, style, house, occupancy grid) of the houses the follower is tested in."""
    for style in STYLES.names():
        for seed in range(SEEDS_PER_STYLE):
            house = generate_house(100 + seed, style)
            yield seed, style, house, OccupancyGrid(house)


@pytest.fixture(scope="module")
def runs() -> list[Run]:
    """Rollouts on start/goal pairs drawn independently of the follower (no success filtering)."""
    out = []
    for seed, style, house, grid in _house_grids():
        follower = ShortestPathFollower(grid)
        rng = np.random.default_rng([seed, len(style)])
        rows, cols = np.nonzero(grid.navigable)
        n = 0
        while n < PAIRS_PER_HOUSE:
            k = int(rng.integers(len(rows)))
            start = grid.to_world(int(rows[k]), int(cols[k]))
            if n % 2 == 0:  # in front of a piece of furniture, as the episode generator does
                item = house.furniture[int(rng.integers(len(house.furniture)))]
                goal = _goal_point(grid, item, 0.5, rng)
                if goal is None:
                    continue
            else:
                j = int(rng.integers(len(rows)))
                goal = grid.to_world(int(rows[j]), int(cols[j]))
            d = grid.geodesic(*start, *goal)
            if not 1.0 <= d < math.inf:
                continue
            phi = TURN * int(rng.integers(24))
            positions, actions, _ = follower.rollout(*start, phi, *goal, max_steps=600)
            geos = [grid.geodesic(x, y, *goal) for x, y in positions]
            out.append(Run(house.scene_id, start, goal, d, positions, actions, geos, follower.keep_heading_tol))
            n += 1
    return out


def test_enough_pairs_across_styles(runs: list[Run]) -> None:
    assert len(runs) >= 50
    assert {r.scene.split("/")[1] for r in runs} == set(STYLES.names())


def test_every_rollout_reaches_the_goal_and_stops(runs: list[Run]) -> None:
    failures = [(r.scene, r.start, r.goal, r.geos[-1]) for r in runs
                if r.actions[-1] != NavAction.STOP or r.geos[-1] > 0.5]
    assert not failures
    assert all(r.geos[-1] <= 0.2 + 1e-9 for r in runs)  # stop_radius
    assert all(math.dist(r.positions[-1], r.goal) <= 0.5 for r in runs)
    assert all(NavAction.STOP not in r.actions[:-1] for r in runs)


def test_paths_are_near_shortest(runs: list[Run]) -> None:
    ratios = np.array([r.length / r.geodesic for r in runs])
    spl = np.array([r.geodesic / max(r.length, r.geodesic) for r in runs])
    assert ratios.mean() <= 1.1, ratios.mean()
    assert spl.mean() >= 0.95, spl.mean()
    for r in runs:  # per episode: bounded path, so no loops
        assert r.length <= 1.3 * r.geodesic + 0.5, (r.scene, r.length, r.geodesic)
        forward = sum(a == NavAction.MOVE_FORWARD for a in r.actions)
        assert forward * 0.25 == pytest.approx(r.length)


def test_geodesic_never_grows_along_the_rollout(runs: list[Run]) -> None:
    for r in runs:
        steps = np.diff(r.geos)
        assert (steps <= r.keep_tol + 1e-9).all(), (r.scene, steps.max())
        # forward steps make progress on average: about one step length each
        assert r.geos[0] - r.geos[-1] >= 0.7 * r.length - 0.3


def test_no_turning_in_place_loops(runs: list[Run]) -> None:
    for r in runs:
        run, longest = 0, 0
        for a in r.actions:
            run = run + 1 if a in (NavAction.TURN_LEFT, NavAction.TURN_RIGHT) else 0
            longest = max(longest, run)
        assert longest <= 12, (r.scene, longest)  # never more than half a revolution
        # no left-right dithering
        pairs = zip(r.actions[:-1], r.actions[1:])
        assert not any({a, b} == {NavAction.TURN_LEFT, NavAction.TURN_RIGHT} for a, b in pairs), r.scene


def test_ground_truth_actions_replay_to_the_goal() -> None:
    cfg = EpisodeGenConfig()
    for style in STYLES.names():
        house = generate_house(7, style)
        grid = OccupancyGrid(house)
        rng = np.random.default_rng(0)
        res = sample_episode(house, grid, rng, 0, cfg)
        assert res is not None
        ep, gt = res
        x, y, _ = habitat_to_mj(ep.start_position)
        phi = wrap_angle(quat_to_yaw(ep.start_rotation) + math.pi / 2)
        assert phi_to_theta(phi) == pytest.approx(quat_to_yaw(ep.start_rotation), abs=1e-9)
        spec = MotionSpec()
        for a, loc in zip(gt.actions, gt.locations):
            lx, ly, _ = habitat_to_mj(loc)
            assert (x, y) == pytest.approx((lx, ly), abs=1e-6)
            if a == NavAction.STOP:
                break
            x, y, phi, collided = apply_action(grid, x, y, phi, NavAction(a), spec)
            assert not collided
        gx, gy, _ = habitat_to_mj(ep.goals[0].position)
        assert grid.geodesic(x, y, gx, gy) <= 0.5


def _open_grid() -> OccupancyGrid:
    rects = [RoomRect(0.0, 0.0, 6.0, 4.0), RoomRect(6.0, 0.0, 10.0, 4.0)]
    rooms = [Room(i, ROOM_KINDS[i], r.x0, r.y0, r.x1, r.y1) for i, r in enumerate(rects)]
    doors = [Door(6.0, 3.3, "y", 1.0, 0, 1)]
    return OccupancyGrid(House(0, "grid", rooms, doors, _build_walls(rects, doors)))


def test_apply_action_turns_and_moves() -> None:
    grid, spec = _open_grid(), MotionSpec()
    x, y, phi = 3.0, 2.0, 0.3
    assert apply_action(grid, x, y, phi, NavAction.TURN_LEFT, spec) == pytest.approx((x, y, phi + TURN, False))
    assert apply_action(grid, x, y, phi, NavAction.TURN_RIGHT, spec) == pytest.approx((x, y, phi - TURN, False))
    assert apply_action(grid, x, y, phi, NavAction.STOP, spec) == (x, y, phi, False)
    nx, ny, nphi, collided = apply_action(grid, x, y, phi, NavAction.MOVE_FORWARD, spec)
    assert not collided and nphi == phi
    assert math.dist((x, y), (nx, ny)) == pytest.approx(0.25)
    assert math.atan2(ny - y, nx - x) == pytest.approx(phi)
    # 24 left turns are a full revolution; headings stay wrapped to (-pi, pi]
    p = phi
    for _ in range(24):
        _, _, p, _ = apply_action(grid, x, y, p, NavAction.TURN_LEFT, spec)
        assert -math.pi < p <= math.pi
    assert p == pytest.approx(phi)
    big = MotionSpec(forward_step=0.5, turn_angle_deg=30.0)
    _, _, p, _ = apply_action(grid, x, y, 0.0, NavAction.TURN_RIGHT, big)
    assert p == pytest.approx(-math.pi / 6)
    nx, ny, _, _ = apply_action(grid, x, y, math.pi / 2, NavAction.MOVE_FORWARD, big)
    assert (nx, ny) == pytest.approx((x, y + 0.5))


def test_forward_into_a_wall_is_blocked() -> None:
    grid, spec = _open_grid(), MotionSpec()
    x, y = 5.7, 1.0  # 0.3 m from the wall at x = 6 (navigable), door far away
    assert grid.is_navigable(x, y)
    assert apply_action(grid, x, y, 0.0, NavAction.MOVE_FORWARD, spec) == (x, y, 0.0, True)
    # along the wall is fine, through the door too
    nx, ny, _, collided = apply_action(grid, x, y, math.pi / 2, NavAction.MOVE_FORWARD, spec)
    assert not collided and (nx, ny) == pytest.approx((x, y + 0.25))
    assert apply_action(grid, 5.9, 3.3, 0.0, NavAction.MOVE_FORWARD, spec)[3] is False
    # the outer wall
    assert apply_action(grid, 0.3, 1.0, math.pi, NavAction.MOVE_FORWARD, spec)[3] is True


def test_motion_spec_validation() -> None:
    with pytest.raises(ValueError):
        MotionSpec(forward_step=0.0)
    with pytest.raises(ValueError):
        MotionSpec(turn_angle_deg=0.0)
    assert MotionSpec().forward_step == 0.25 and MotionSpec().turn_angle_deg == 15.0


def test_follower_actions_at_the_goal_and_when_unreachable() -> None:
    grid = _open_grid()
    f = ShortestPathFollower(grid)
    assert f.next_action(3.0, 2.0, 0.0, 3.05, 2.0) == NavAction.STOP
    assert f.next_action(3.0, 2.0, 0.0, 5.0, 2.0) == NavAction.MOVE_FORWARD  # already facing it
    assert f.next_action(3.0, 2.0, math.pi / 2, 5.0, 2.0) == NavAction.TURN_RIGHT
    assert f.next_action(3.0, 2.0, -math.pi / 2, 5.0, 2.0) == NavAction.TURN_LEFT
    # across the wall: heads for the door (north-east) rather than straight east
    positions, actions, _ = f.rollout(5.0, 1.0, 0.0, 7.0, 1.0)
    assert actions[-1] == NavAction.STOP and math.dist(positions[-1], (7.0, 1.0)) <= 0.3
    assert max(y for _, y in positions) > 2.5
    sealed_rects = [RoomRect(0.0, 0.0, 4.0, 4.0), RoomRect(4.0, 0.0, 8.0, 4.0)]
    rooms = [Room(i, ROOM_KINDS[i], r.x0, r.y0, r.x1, r.y1) for i, r in enumerate(sealed_rects)]
    sealed = OccupancyGrid(House(0, "grid", rooms, [], _build_walls(sealed_rects, [])))
    assert ShortestPathFollower(sealed).next_action(2.0, 2.0, 0.0, 6.0, 2.0) == NavAction.STOP


def test_no_left_right_dithering_regression() -> None:
    """Regression: this start/goal pair turned LEFT/RIGHT forever (segment_free sample-count knife edge)."""
    house = generate_house(101, "grid")
    grid = OccupancyGrid(house)
    start = grid.to_world(*grid.to_cell(6.075, 8.825))
    goal = (3.575, 6.575)
    positions, actions, _ = ShortestPathFollower(grid).rollout(*start, math.radians(120), *goal, max_steps=300)
    assert actions[-1] == NavAction.STOP and len(actions) < 100
    assert grid.geodesic(*positions[-1], *goal) <= 0.2


# ---- the sightline teacher -------------------------------------------------------------------------------------
def _sightline_pair(grid: OccupancyGrid, rng: np.random.Generator,
                    min_dist: float = 2.5) -> tuple[float, float, float, float]:
    """A start and goal at least ``min_dist`` apart with a navigable straight segment between them."""
    rows, cols = np.nonzero(grid.navigable)
    for _ in range(20000):
        i, j = rng.integers(len(rows), size=2)
        x, y = grid.to_world(int(rows[i]), int(cols[i]))
        gx, gy = grid.to_world(int(rows[j]), int(cols[j]))
        if math.dist((x, y), (gx, gy)) >= min_dist and grid.segment_free(x, y, gx, gy):
            return x, y, gx, gy
    raise AssertionError("no line-of-sight pair found")


def test_sightline_steers_by_the_frame_thirds() -> None:
    """In view and in sight, the action is set by where the goal is in the frame: outside the middle third
    (pinhole, 79 degree FOV: |bearing| > 15.4 degrees) turn toward it, inside it go forward; out of view it is
    the shortest-path follower."""
    house = generate_house(101, STYLES.names()[0])
    grid = OccupancyGrid(house)
    sight, geo = SightlineFollower(grid), ShortestPathFollower(grid)
    assert math.degrees(sight.third) == pytest.approx(15.4, abs=0.1)
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(10):
        x, y, gx, gy = _sightline_pair(grid, rng)
        to_goal = math.atan2(gy - y, gx - x)
        for off_deg, want in ((25.0, NavAction.TURN_LEFT), (-25.0, NavAction.TURN_RIGHT),
                              (35.0, NavAction.TURN_LEFT), (-35.0, NavAction.TURN_RIGHT)):
            # the heading is off_deg clockwise of the goal, so the goal is off_deg to the left (CCW positive)
            assert sight.next_action(x, y, to_goal - math.radians(off_deg), gx, gy) == want
        assert sight.next_action(x, y, to_goal, gx, gy) == NavAction.MOVE_FORWARD
        for off_deg in (60.0, -60.0, 150.0):  # out of the field of view: the geodesic follower decides
            phi = to_goal - math.radians(off_deg)
            assert sight.next_action(x, y, phi, gx, gy) == geo.next_action(x, y, phi, gx, gy)
        checked += 1
    assert checked == 10
    # an aim point other than the goal: steer at it (the goal object's centre, say)
    x, y, gx, gy = _sightline_pair(grid, rng)
    to_goal = math.atan2(gy - y, gx - x)
    aim = (x + 3 * math.cos(to_goal + math.radians(30)), y + 3 * math.sin(to_goal + math.radians(30)))
    assert SightlineFollower(grid, aim=aim).next_action(x, y, to_goal, gx, gy) == NavAction.TURN_LEFT


def test_sightline_rollouts_reach_the_goal(runs: list[Run]) -> None:
    """On the same start/goal pairs as the shortest-path follower: every rollout stops at the goal, near-shortest."""
    spls = []
    for _, _, house, grid in _house_grids():
        follower = SightlineFollower(grid)
        for r in (r for r in runs if r.scene == house.scene_id):
            positions, actions, _ = follower.rollout(*r.start, 0.0, *r.goal, max_steps=600)
            assert actions[-1] == NavAction.STOP, (r.scene, r.start, r.goal)
            assert grid.geodesic(*positions[-1], *r.goal) <= 0.2 + 1e-9
            length = sum(math.dist(a, b) for a, b in zip(positions[:-1], positions[1:]))
            spls.append(r.geodesic / max(length, r.geodesic))
    assert len(spls) == len(runs)
    assert np.mean(spls) >= 0.9, np.mean(spls)


# ---- the search teacher ----------------------------------------------------------------------------------------
def test_search_acts_on_the_frame_only() -> None:
    """In sight: a goal outside the field of view is searched for by turning left, whichever side it is on (the
    shortest-path follower turns by the map); in a side third it turns toward it, in the middle third it moves;
    within stop_radius it stops."""
    house = generate_house(101, STYLES.names()[0])
    grid = OccupancyGrid(house)
    search, geo = SearchFollower(grid), ShortestPathFollower(grid)
    rng = np.random.default_rng(1)
    by_map = set()
    for _ in range(10):
        x, y, gx, gy = _sightline_pair(grid, rng)
        to_goal = math.atan2(gy - y, gx - x)
        for off_deg in (60.0, -60.0, 150.0, -150.0, 100.0, -100.0):
            phi = to_goal - math.radians(off_deg)
            assert search.next_action(x, y, phi, gx, gy) == NavAction.TURN_LEFT, off_deg
            by_map.add(geo.next_action(x, y, phi, gx, gy))
        assert search.next_action(x, y, to_goal - math.radians(25.0), gx, gy) == NavAction.TURN_LEFT
        assert search.next_action(x, y, to_goal + math.radians(25.0), gx, gy) == NavAction.TURN_RIGHT
        assert search.next_action(x, y, to_goal, gx, gy) == NavAction.MOVE_FORWARD
        near = (gx - 0.4 * math.cos(to_goal), gy - 0.4 * math.sin(to_goal))
        assert search.next_action(*near, to_goal + math.pi, gx, gy) == NavAction.STOP
    assert NavAction.TURN_RIGHT in by_map  # the shortest-path follower does turn right toward hidden goals


def test_search_steers_at_the_object_until_the_handover() -> None:
    """With an aim (the goal object's centre) it steers at the aim while farther than ``handover`` from the goal
    point and the way toward the aim is free, and at the goal point itself nearer in."""
    grid = OccupancyGrid(generate_house(101, STYLES.names()[0]))
    rng = np.random.default_rng(2)
    x, y, gx, gy = _sightline_pair(grid, rng, min_dist=3.0)
    to_goal = math.atan2(gy - y, gx - x)
    for side in (1.0, -1.0):  # an aim 25 degrees to one side, its first 1.5 m free
        c = to_goal + side * math.radians(25.0)
        if grid.segment_free(x, y, x + 1.5 * math.cos(c), y + 1.5 * math.sin(c)):
            break
    else:
        raise AssertionError("no free way toward a side aim from this start (pick another seed)")
    aim = (x + 4 * math.cos(c), y + 4 * math.sin(c))
    want = NavAction.TURN_LEFT if side > 0 else NavAction.TURN_RIGHT
    assert SearchFollower(grid, aim=aim).next_action(x, y, to_goal, gx, gy) == want
    assert SearchFollower(grid).next_action(x, y, to_goal, gx, gy) == NavAction.MOVE_FORWARD
    # within the handover radius the goal point rules: straight at it is forward
    handover = math.dist((x, y), (gx, gy)) + 0.1
    near = SearchFollower(grid, aim=aim, handover=handover)
    assert near.next_action(x, y, to_goal, gx, gy) == NavAction.MOVE_FORWARD
    with pytest.raises(ValueError, match="reach"):
        SearchFollower(grid, stop_radius=0.5, reach=0.3)
    with pytest.raises(ValueError, match="handover"):
        SearchFollower(grid, reach=0.9, handover=0.5)


def test_search_rollouts_end_near_the_goal(runs: list[Run]) -> None:
    """On the shortest-path follower's start/goal pairs (any room): nearly every rollout stops within the 1 m
    success radius; turning to search costs steps, not path length."""
    ends = []
    for _, _, house, grid in _house_grids():
        follower = SearchFollower(grid)
        for r in (r for r in runs if r.scene == house.scene_id):
            positions, actions, _ = follower.rollout(*r.start, 0.0, *r.goal, max_steps=600)
            ends.append(actions[-1] == NavAction.STOP and math.dist(positions[-1], r.goal) <= 1.0)
    assert len(ends) == len(runs)
    assert np.mean(ends) >= 0.9, np.mean(ends)


def test_make_follower_registry() -> None:
    grid = OccupancyGrid(generate_house(101, STYLES.names()[0]))
    assert set(FOLLOWERS) == {"geodesic", "sightline", "search"}
    assert [name for name, f in FOLLOWERS.items() if f.object_aim] == ["search"]
    found = make_follower("search", grid, aim=(1.0, 2.0))
    assert isinstance(found, SearchFollower) and found.aim == (1.0, 2.0)
    assert type(make_follower("geodesic", grid)) is ShortestPathFollower
    sight = make_follower("sightline", grid, hfov_deg=90.0, aim=(1.0, 2.0))
    assert isinstance(sight, SightlineFollower) and sight.aim == (1.0, 2.0)
    assert math.degrees(sight.half_fov) == pytest.approx(45.0)
    with pytest.raises(ValueError, match="unknown teacher 'oracle'"):
        make_follower("oracle", grid)
    with pytest.raises(ValueError, match="hfov_deg"):
        SightlineFollower(grid, hfov_deg=200.0)
