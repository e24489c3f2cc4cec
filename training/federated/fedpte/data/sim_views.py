"""Furniture classification from the simulator's egocentric camera under the all-day conditions.

Viewpoints (up to ``views_per_class`` per class) stand 1.2-2.6 m in front of a furniture item of one of
``CLASSES`` in a generated house (same room, clear line of sight, small lateral and yaw jitter). A frame is rendered
by :class:`sim.nav.env.MujocoNavEnv` (physical lighting + the condition's image model) at 64x64 and
area-downsampled to 32x32. Houses are split into train and test; the training viewpoints are dealt out to the
domains (each client sees its own views, in its own condition), every test viewpoint is rendered in every
condition. The arrays are cached as one ``.npz``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from pathlib import Path

import numpy as np
from tqdm import tqdm

from agents.core.io import NPZ_READ_ERRORS, load_npz, save_npz
from training.federated.fedpte.data import Domain

log = logging.getLogger(__name__)

CLASSES = ("bed", "fridge", "plant", "basket", "desk")
CONDITIONS = ("normal", "low_light", "overexposure", "scattering")
RENDER_SIZE, SIZE = 64, 32
#: Condition overrides used by default: at 32 px the released low-light defaults (brightness x exposure = 0.0225)
#: leave only sensor noise, and the default haze (beta 0.01 / m) is invisible at 1-3 m; these keep every domain
#: shifted but learnable.
DEFAULT_CONDITION_PARAMS: dict[str, dict] = {
    "low_light": {"brightness_factor": 1.0, "shot_noise_factor": 0.1, "read_noise_sigma": 1.5},
    "scattering": {"beta": 0.15}}


def _viewpoints(n_houses: int, views_per_class: int, seed: int) -> list[tuple[str, float, float, float, int]]:
    """(scene_id, x, y, yaw phi, class) in MuJoCo coordinates, reproducible, sorted by house. Each class gets up to
    ``views_per_class`` views, dealt round-robin over its items so frequent items (plants) do not dominate."""
    from sim.nav.house import STYLES, generate_house
    from sim.nav.occupancy import grid_for_scene

    rng = np.random.default_rng([seed, 7])
    styles = STYLES.names()
    per_item: dict[int, list[list[tuple[str, float, float, float, int]]]] = {c: [] for c in range(len(CLASSES))}
    for h in range(n_houses):
        house = generate_house(seed * 10000 + h, styles[h % len(styles)])
        grid = grid_for_scene(house.scene_id)
        for it in house.furniture:
            if it.name not in CLASSES:
                continue
            cands = []
            for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                for _ in range(4):
                    dist = rng.uniform(1.2, 2.6)
                    lat = rng.uniform(-0.3, 0.3)
                    fx, fy = it.x + dx * it.sx, it.y + dy * it.sy  # the face centre on this side
                    x, y = fx + dx * dist + dy * lat, fy + dy * dist + dx * lat
                    room = house.room_at(x, y)
                    if room is None or room.index != it.room or not grid.is_navigable(x, y):
                        continue
                    near = grid.agent_radius + 0.06
                    if not grid.segment_free(x, y, fx + dx * near, fy + dy * near):
                        continue
                    phi = math.atan2(it.y - y, it.x - x) + math.radians(rng.uniform(-8, 8))
                    cands.append((house.scene_id, float(x), float(y), float(phi), CLASSES.index(it.name)))
            if cands:
                per_item[CLASSES.index(it.name)].append([cands[int(k)] for k in rng.permutation(len(cands))])
    out = []
    for c, items in per_item.items():
        picked, depth = [], 0
        while len(picked) < views_per_class and any(depth < len(v) for v in items):
            picked += [v[depth] for v in items if depth < len(v)][: views_per_class - len(picked)]
            depth += 1
        if len(picked) < views_per_class:
            log.warning("sim_views: class %r has only %d views (asked %d)", CLASSES[c], len(picked), views_per_class)
        out += picked
    return sorted(out, key=lambda v: (v[0], v[4], v[1], v[2]))


def _render(views: list[tuple[str, float, float, float, int]], condition: str, params: dict,
            progress: bool) -> np.ndarray:
    """Render each viewpoint once in ``condition`` with one env; views must be grouped by house so each house's
    renderer is built once. Every view of a house shares one goal (one geodesic field per house)."""
    import cv2

    from sim.core.env import NavEnvConfig
    from sim.core.episodes import Episode, Goal
    from sim.core.frames import mj_to_habitat, phi_to_theta, yaw_to_quat
    from sim.nav.env import MujocoNavEnv

    env = MujocoNavEnv(NavEnvConfig(width=RENDER_SIZE, height=RENDER_SIZE, quality="fast", depth=False,
                                    condition=condition, condition_params=dict(params)))
    out = np.zeros((len(views), SIZE, SIZE, 3), np.uint8)
    goals: dict[str, list[float]] = {}
    try:
        for i, (scene, x, y, phi, _) in enumerate(tqdm(views, desc=f"render {condition}", disable=not progress)):
            p = mj_to_habitat(x, y)
            goal = goals.setdefault(scene, p)
            ep = Episode(f"view{i}", i, scene, p, yaw_to_quat(phi_to_theta(phi)), [Goal(goal, 0.5)], "look",
                         [p, goal], 0.0)
            try:
                obs, _ = env.reset(options={"episode": ep})
            except ValueError:  # the house's shared goal is not reachable from here: use the view itself
                ep.goals = [Goal(p, 0.5)]
                obs, _ = env.reset(options={"episode": ep})
            out[i] = cv2.resize(obs["rgb"], (SIZE, SIZE), interpolation=cv2.INTER_AREA)
    finally:
        env.close()
    return out


def sim_views_cache_path(cache_dir: str | os.PathLike, n_houses: int = 80, views_per_class: int = 120,
                         test_frac: float = 0.25, seed: int = 0, conditions: tuple[str, ...] = CONDITIONS,
                         params: dict | None = None) -> Path:
    """Where :func:`make_sim_view_domains` caches the set of these settings (``params``: per-condition overrides,
    default :data:`DEFAULT_CONDITION_PARAMS`)."""
    if params is None:
        params = {c: dict(DEFAULT_CONDITION_PARAMS.get(c, {})) for c in conditions}
    key = json.dumps({"v": 1, "h": n_houses, "vpc": views_per_class, "tf": test_frac, "s": seed,
                      "c": list(conditions), "p": params}, sort_keys=True)
    return Path(cache_dir) / f"sim_views_{hashlib.sha1(key.encode()).hexdigest()[:12]}.npz"


def make_sim_view_domains(n_houses: int = 80, views_per_class: int = 120, test_frac: float = 0.25, seed: int = 0,
                          conditions: tuple[str, ...] = CONDITIONS, condition_params: dict | None = None,
                          cache_dir: str | os.PathLike | None = "runs/fedpte_cache",
                          progress: bool = False) -> list[Domain]:
    """One :class:`Domain` per condition. ``condition_params`` maps a condition to its parameter overrides
    (default :data:`DEFAULT_CONDITION_PARAMS`; pass ``{}`` for the released defaults)."""
    if n_houses < 2:
        raise ValueError(f"n_houses must be >= 2, got {n_houses}")
    if not 0.0 < test_frac < 1.0:
        raise ValueError(f"test_frac must be in (0, 1), got {test_frac}")
    cp = DEFAULT_CONDITION_PARAMS if condition_params is None else condition_params
    params = {c: dict(cp.get(c, {})) for c in conditions}
    path = None
    if cache_dir is not None:
        path = sim_views_cache_path(cache_dir, n_houses, views_per_class, test_frac, seed, conditions, params)
        if path.exists():
            try:
                with load_npz(path) as z:
                    arrays = {k: z[k] for k in z.files}
                domains = _domains(arrays, conditions)
                log.info("sim_views: cached %s", path)
                return domains
            except NPZ_READ_ERRORS as exc:
                log.warning("sim_views: unreadable cache %s (%s: %s); rendering it again", path,
                            type(exc).__name__, exc)
    views = _viewpoints(n_houses, views_per_class, seed)
    houses = sorted({v[0] for v in views})
    n_test_h = max(1, int(round(test_frac * len(houses))))
    test_h = set(houses[-n_test_h:])
    train = [v for v in views if v[0] not in test_h]
    test = [v for v in views if v[0] in test_h]
    rng = np.random.default_rng([seed, 11])
    owner = rng.permutation(np.arange(len(train)) % len(conditions))
    arrays: dict[str, np.ndarray] = {}
    for d, cond in enumerate(conditions):  # one env per condition renders its train views and all test views
        mine = [v for v, o in zip(train, owner) if o == d]
        imgs = _render(sorted(mine + test, key=lambda v: v[0]), cond, params[cond], progress)
        order = sorted(range(len(mine) + len(test)), key=lambda i: (mine + test)[i][0])
        slot = {o: k for k, o in enumerate(order)}
        arrays[f"{cond}_x_train"] = imgs[[slot[i] for i in range(len(mine))]]
        arrays[f"{cond}_y_train"] = np.array([v[4] for v in mine], np.int64)
        arrays[f"{cond}_x_test"] = imgs[[slot[len(mine) + i] for i in range(len(test))]]
        arrays[f"{cond}_y_test"] = np.array([v[4] for v in test], np.int64)
    if path is not None:
        save_npz(path, **arrays)
        log.info("sim_views: rendered %d train + %d x %d test views -> %s", len(train), len(test),
                 len(conditions), path)
    return _domains(arrays, conditions)


def _domains(arrays: dict[str, np.ndarray], conditions: tuple[str, ...]) -> list[Domain]:
    return [Domain(c, arrays[f"{c}_x_train"], arrays[f"{c}_y_train"], arrays[f"{c}_x_test"], arrays[f"{c}_y_test"],
                   CLASSES) for c in conditions]
