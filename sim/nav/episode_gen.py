"""Sample VLN episodes in generated houses: start/goal pairs, follower ground truth, English instructions."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from sim.core.episodes import Episode, Goal, GroundTruth, build_vocab, tokenize
from sim.core.frames import mj_to_habitat, phi_to_theta, yaw_to_quat
from sim.nav.follower import ShortestPathFollower
from sim.nav.house import STYLES, House, generate_house
from sim.nav.instructions import generate_instruction
from sim.nav.motion import MotionSpec
from sim.nav.occupancy import OccupancyGrid

log = logging.getLogger(__name__)


GOAL_SIDES = ("random", "nearest")


@dataclass(frozen=True)
class EpisodeGenConfig:
    """How episodes are sampled. Distances are geodesic metres."""

    min_distance: float = 3.0
    max_distance: float = 18.0
    goal_offset: float = 0.5
    waypoint_spacing: float = 2.0
    max_steps: int = 500
    agent_radius: float = 0.18
    tries_per_episode: int = 60
    same_room: bool = False  # start in the goal object's room (goal-description episodes a small model can learn)
    goal_side: str = "random"  # the item's side the goal point is in front of: "random" or "nearest" to the start

    def __post_init__(self) -> None:
        if not 0 < self.min_distance < self.max_distance:
            raise ValueError(f"need 0 < min_distance < max_distance, got {self.min_distance}, {self.max_distance}")
        if self.goal_offset <= 0 or self.waypoint_spacing <= 0 or self.max_steps < 1:
            raise ValueError("goal_offset and waypoint_spacing must be > 0 and max_steps >= 1")
        if self.goal_side not in GOAL_SIDES:
            raise ValueError(f"goal_side must be one of {GOAL_SIDES}, got {self.goal_side!r}")


def scene_list(n_scenes: int, seed: int = 0, styles: Sequence[str] | None = None) -> list[tuple[str, int]]:
    """``n_scenes`` (style, seed) pairs cycling through the styles; reproducible from ``seed``."""
    styles = list(styles or STYLES.names())
    for s in styles:
        if s not in STYLES:
            raise ValueError(f"unknown house style {s!r}; known: {STYLES.names()}")
    return [(styles[i % len(styles)], seed * 1000 + i) for i in range(n_scenes)]


def _goal_point(grid: OccupancyGrid, item, offset: float, rng: np.random.Generator) -> tuple[float, float] | None:
    """A navigable point ``offset`` m in front of a random side of the item."""
    sides = _side_points(grid, item, offset, rng)
    return sides[0] if sides else None


def _side_points(grid: OccupancyGrid, item, offset: float, rng: np.random.Generator) -> list[tuple[float, float]]:
    """The navigable points ``offset`` m in front of each side of the item, in random order."""
    out = []
    for s in rng.permutation(4):
        dx, dy = [(1, 0), (-1, 0), (0, 1), (0, -1)][s]
        x = item.x + dx * (item.sx + offset + grid.agent_radius)
        y = item.y + dy * (item.sy + offset + grid.agent_radius)
        if grid.is_navigable(x, y):
            out.append((x, y))
    return out


def _waypoints(path: np.ndarray, spacing: float) -> list[np.ndarray]:
    out, acc = [path[0]], 0.0
    for a, b in zip(path[:-1], path[1:]):
        acc += float(np.linalg.norm(b - a))
        if acc >= spacing:
            out.append(b)
            acc = 0.0
    if not np.allclose(out[-1], path[-1]):
        out.append(path[-1])
    return out


def sample_episode(house: House, grid: OccupancyGrid, rng: np.random.Generator, episode_id: int,
                   cfg: EpisodeGenConfig, motion: MotionSpec | None = None) -> tuple[Episode, GroundTruth] | None:
    """One episode in ``house`` or None when ``cfg.tries_per_episode`` draws found no valid pair."""
    motion = motion or MotionSpec()
    follower = ShortestPathFollower(grid, motion)
    free_rows, free_cols = np.nonzero(grid.navigable)
    free_x = grid.origin[0] + (free_cols + 0.5) * grid.resolution  # the cells' centres, as grid.to_world gives them
    free_y = grid.origin[1] + (free_rows + 0.5) * grid.resolution
    for _ in range(cfg.tries_per_episode):
        item = house.furniture[int(rng.integers(0, len(house.furniture)))]
        sides = _side_points(grid, item, cfg.goal_offset, rng)
        if not sides:
            continue
        if cfg.same_room:  # draw the start among the free cells of the goal object's room
            room = house.rooms[item.room]
            inside = (free_x >= room.x0) & (free_x <= room.x1) & (free_y >= room.y0) & (free_y <= room.y1)
            cells = np.flatnonzero(inside)
            if len(cells) == 0:
                continue
            k = int(cells[int(rng.integers(0, len(cells)))])
        else:
            k = int(rng.integers(0, len(free_rows)))
        sx, sy = grid.to_world(int(free_rows[k]), int(free_cols[k]))
        if cfg.same_room and getattr(house.room_at(sx, sy), "index", None) != item.room:
            continue  # a cell on a wall line shared with a room listed earlier
        # the goal point: in front of a random side, or of the side the start reaches first (the object's near face)
        goal = min(sides, key=lambda g: grid.geodesic(sx, sy, *g)) if cfg.goal_side == "nearest" else sides[0]
        d = grid.geodesic(sx, sy, *goal)
        if not (cfg.min_distance <= d <= cfg.max_distance):
            continue
        phi = math.radians(motion.turn_angle_deg) * int(rng.integers(0, round(360 / motion.turn_angle_deg)))
        positions, actions, _ = follower.rollout(sx, sy, phi, *goal, max_steps=cfg.max_steps)
        fx, fy = positions[-1]
        if actions[-1] != 0 or grid.geodesic(fx, fy, *goal) > 0.5:
            continue
        path = np.asarray(positions)
        text = generate_instruction(house, path, phi, item, rng)
        hab = [mj_to_habitat(x, y) for x, y in positions]
        ref = [mj_to_habitat(x, y) for x, y in _waypoints(path, cfg.waypoint_spacing)]
        ep = Episode(episode_id=episode_id, trajectory_id=episode_id, scene_id=house.scene_id,
                     start_position=mj_to_habitat(sx, sy), start_rotation=yaw_to_quat(phi_to_theta(phi)),
                     goals=[Goal(mj_to_habitat(*goal), 3.0)], instruction_text=text, reference_path=ref,
                     geodesic_distance=round(d, 4),
                     info={"goal_object": item.label, "goal_room": house.rooms[item.room].name})
        gt = GroundTruth(locations=hab, actions=actions, forward_steps=int(sum(a == 1 for a in actions)))
        return ep, gt
    return None


def generate_episodes(scenes: Sequence[tuple[str, int]], per_scene: int, seed: int = 0,
                      conditions: Sequence[str] | None = None, cfg: EpisodeGenConfig | None = None,
                      progress: bool = True) -> tuple[list[Episode], dict[str, GroundTruth], dict]:
    """``per_scene`` episodes in each scene; with several conditions, each episode is repeated per condition.

    Returns episodes, ground truth keyed by ``str(episode_id)`` and the R2R-style instruction vocab.
    """
    if per_scene < 1:
        raise ValueError(f"per_scene must be >= 1, got {per_scene}")
    cfg = cfg or EpisodeGenConfig()
    conditions = list(conditions or [])
    if conditions:
        from sim.nav.conditions import available_conditions

        bad = [c for c in conditions if c not in available_conditions()]
        if bad:
            raise ValueError(f"unknown condition(s) {bad}; known: {available_conditions()}")
    base: list[tuple[Episode, GroundTruth]] = []
    for style, scene_seed in tqdm(scenes, desc="scenes", disable=not progress):
        house = generate_house(scene_seed, style)
        grid = OccupancyGrid(house, agent_radius=cfg.agent_radius)
        rng = np.random.default_rng([seed, scene_seed, sum(map(ord, style))])
        for _ in range(per_scene):
            res = sample_episode(house, grid, rng, len(base), cfg)
            if res is None:
                log.warning("scene %s: no valid start/goal pair found; skipping an episode", house.scene_id)
                continue
            base.append(res)
    episodes, gts = [], {}
    for cond in conditions or [None]:
        for ep, gt in base:
            eid = len(episodes)
            info = dict(ep.info)
            if cond is not None:
                info["condition"] = cond
            episodes.append(Episode(eid, ep.trajectory_id, ep.scene_id, ep.start_position, ep.start_rotation,
                                    ep.goals, ep.instruction_text, ep.reference_path, ep.geodesic_distance,
                                    None, info))
            gts[str(eid)] = gt
    vocab = build_vocab(e.instruction_text for e in episodes)
    for e in episodes:
        e.instruction_tokens = tokenize(e.instruction_text, vocab)
    return episodes, gts, vocab
