"""One contract for every navigation env backend (``sim.core.env.BaseNavEnv``): MuJoCo and Habitat.

Each property is checked through the public gymnasium API, in the Habitat world frame
([x, y up, z]; heading 0 faces -z, forward = (-sin h, 0, -cos h), left turns increase h).

The habitat cases need habitat_sim (conda only, see docs/habitat.md) and real scenes: set
``ALLDAY_HABITAT_TEST_EPISODES`` to an R2R-CE split dir (e.g.
``data/datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen``) and ``ALLDAY_HABITAT_SCENES`` to the scenes dir.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from agents.core.types import NavAction
from sim.core.env import BaseNavEnv, NavEnvConfig, make_env
from sim.core.episodes import Episode
from sim.core.frames import mj_to_habitat, quat_to_yaw, wrap_angle
from sim.habitat.env import habitat_available
from sim.nav.conditions import available_conditions

HABITAT_EPISODES_VAR = "ALLDAY_HABITAT_TEST_EPISODES"
HABITAT_SKIP = ("habitat_sim is not importable (not on PyPI: conda install habitat-sim -c conda-forge -c aihabitat, "
                "see docs/habitat.md)")
METRIC_KEYS = {"ne", "sr", "osr", "spl", "ndtw", "sdtw", "tl", "steps"}
CFG = dict(width=64, height=64, quality="fast")

BACKENDS = [
    pytest.param("mujoco", id="mujoco"),
    pytest.param("habitat", id="habitat",
                 marks=[pytest.mark.habitat, pytest.mark.skipif(not habitat_available(), reason=HABITAT_SKIP)]),
]


@dataclass
class Case:
    backend: str
    env: BaseNavEnv
    episodes: list[Episode]
    bad_start: list[float]  # a Habitat-frame point inside an obstacle / off the navigable space


def _mujoco_case() -> Case:
    from sim.nav.episode_gen import generate_episodes, scene_list

    episodes, gts, _ = generate_episodes(scene_list(1), 3, progress=False)
    env = make_env(NavEnvConfig(**CFG), episodes, gts, backend="mujoco")
    env.reset(options={"episode_index": 0})
    # the middle of a wall of the house, checked against the occupancy grid's raw obstacle mask
    wall = env.house.walls[0]
    x, y = (wall.x0 + wall.x1) / 2, (wall.y0 + wall.y1) / 2
    assert env.grid.obstacle[env.grid.to_cell(x, y)], "fixture: wall midpoint is not an obstacle cell"
    return Case("mujoco", env, episodes, mj_to_habitat(x, y, episodes[0].start_position[1]))


def _habitat_case() -> Case:
    from sim.core.episodes import load_split

    split = os.environ.get(HABITAT_EPISODES_VAR)
    if not split:
        pytest.skip(f"habitat contract needs real scenes: set {HABITAT_EPISODES_VAR} to an R2R-CE split dir (e.g. "
                    "data/datasets/R2R_VLNCE_v1-3_preprocessed/val_unseen) and ALLDAY_HABITAT_SCENES to the scenes "
                    "dir (data/scene_datasets), see docs/habitat.md")
    episodes, gts = load_split(Path(split))
    scene = episodes[0].scene_id
    episodes = [e for e in episodes if e.scene_id == scene][:3]
    env = make_env(NavEnvConfig(**CFG), episodes, {str(e.episode_id): gts[str(e.episode_id)] for e in episodes}
                   if gts else None, backend="habitat")
    x, y, z = episodes[0].start_position
    return Case("habitat", env, episodes, [x + 1000.0, y, z + 1000.0])  # far outside any navmesh


@pytest.fixture(scope="module", params=BACKENDS)
def case(request):
    c = _mujoco_case() if request.param == "mujoco" else _habitat_case()
    yield c
    c.env.close()


# ---------------------------------------------------------------------------------------- helpers
def forward_dir(heading: float) -> np.ndarray:
    return np.array([-math.sin(heading), 0.0, -math.cos(heading)])


def angle_diff(a: float, b: float) -> float:
    return wrap_angle(a - b)


def horizontal(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return np.array([v[0], v[2]])


def reset(env: BaseNavEnv, index: int = 0, **options):
    return env.reset(options={"episode_index": index, **options})


def path_clear(env: BaseNavEnv, pos, heading: float, length: float = 0.6) -> bool:
    """Whether every point of the straight horizontal segment ahead is navigable (2 cm samples)."""
    p = np.asarray(pos, dtype=np.float64)
    return all(env.is_navigable(p + s * forward_dir(heading)) for s in np.arange(0.02, length + 1e-9, 0.02))


def turn_to_free_heading(env: BaseNavEnv, info: dict) -> tuple[dict, dict, int]:
    """Turn left until the path ahead is clear; returns the last (obs, info) and the number of turns."""
    obs = None
    for k in range(24):
        if path_clear(env, info["position"], info["heading"]):
            return obs, info, k
        obs, _, _, _, info = env.step(NavAction.TURN_LEFT)
    pytest.fail("no heading with 0.6 m of free space ahead of the episode start")


# ---------------------------------------------------------------------------------- observations
def test_observation_keys_dtypes_shapes(case):
    env = case.env
    obs, _ = reset(env)
    obs2, *_ = env.step(NavAction.TURN_LEFT)
    for o in (obs, obs2):
        assert set(o) == set(env.observation_space.spaces)
        for key in ("rgb", "depth", "gps", "compass"):
            space = env.observation_space[key]
            assert isinstance(o[key], np.ndarray), key
            assert o[key].dtype == space.dtype and o[key].shape == space.shape, (key, o[key].dtype, o[key].shape)
            assert space.contains(o[key]), key
        assert o["instruction"] == env.episode.instruction_text
        assert np.isfinite(o["depth"]).all()
        assert o["rgb"].std() > 1.0 and o["depth"].std() > 1e-3, "degenerate (constant) frame"
    assert obs["rgb"].shape == (CFG["height"], CFG["width"], 3)


def test_observation_space_contains_obs(case):
    obs, _ = reset(case.env)
    assert case.env.observation_space.contains(obs)


def test_reset_pose_gps_compass(case):
    env, ep = case.env, case.episodes[0]
    obs, info = reset(env)
    np.testing.assert_allclose(obs["gps"], [0.0, 0.0], atol=1e-5)
    np.testing.assert_allclose(obs["compass"], [0.0], atol=1e-5)
    assert abs(angle_diff(info["heading"], quat_to_yaw(ep.start_rotation))) < 1e-4
    np.testing.assert_allclose(info["position"], ep.start_position, atol=1e-3)
    assert info["steps"] == 0 and info["collided"] is False


def test_geodesic_matches_episode_files(case):
    """Distance to goal at reset is the episode's start->goal geodesic (not e.g. the straight-line distance)."""
    for i, ep in enumerate(case.episodes):
        _, info = reset(case.env, i)
        d = info["distance_to_goal"]
        assert math.isfinite(d) and abs(d - ep.geodesic_distance) <= max(0.1, 0.02 * ep.geodesic_distance), (
            i, d, ep.geodesic_distance)


# ---------------------------------------------------------------------------------------- motion
def test_move_forward_in_free_space(case):
    env = case.env
    _, info = reset(env)
    h0 = info["heading"]
    _, info, k = turn_to_free_heading(env, info)
    p0, h = np.asarray(info["position"]), info["heading"]
    obs, _, _, _, info = env.step(NavAction.MOVE_FORWARD)
    step = env.config.forward_step
    assert info["collided"] is False
    moved = np.asarray(info["position"]) - p0
    np.testing.assert_allclose(horizontal(moved), step * horizontal(forward_dir(h)), atol=0.01)
    assert abs(moved[1]) < 0.01
    assert abs(angle_diff(info["heading"], h)) < 1e-4, "moving forward changed the heading"
    # gps is Habitat's [-z, x] displacement in the start frame; compass the heading relative to the start
    rel = angle_diff(h, h0)
    np.testing.assert_allclose(obs["gps"], step * np.array([math.cos(rel), -math.sin(rel)]), atol=0.01)
    assert abs(angle_diff(float(obs["compass"][0]), rel)) < 1e-3
    assert k == 0 or abs(angle_diff(rel, k * math.radians(env.config.turn_angle_deg))) < 1e-3


def test_depth_is_metric(case):
    """Moving forward by s toward a surface lowers the optical-axis z-depth by exactly s."""
    env = case.env
    obs, info = reset(env)
    c = slice(CFG["height"] // 2 - 1, CFG["height"] // 2 + 1), slice(CFG["width"] // 2 - 1, CFG["width"] // 2 + 1)
    patch = (slice(c[0].start - 1, c[0].stop + 1), slice(c[1].start - 1, c[1].stop + 1))
    for _ in range(24):
        d = obs["depth"]
        if (path_clear(env, info["position"], info["heading"]) and 0.8 < d[c].mean() < env.config.max_depth - 0.5
                and np.ptp(d[patch]) < 0.05):
            before = float(d[c].mean())
            obs, _, _, _, info = env.step(NavAction.MOVE_FORWARD)
            assert info["collided"] is False
            assert abs((before - float(obs["depth"][c].mean())) - env.config.forward_step) < 0.03
            return
        obs, _, _, _, info = env.step(NavAction.TURN_LEFT)
    pytest.fail("no heading with free space and a flat surface ahead within range")


def test_turns(case):
    env = case.env
    _, info = reset(env)
    turn = math.radians(env.config.turn_angle_deg)
    h0, p0 = info["heading"], np.asarray(info["position"])
    obs, _, _, _, info = env.step(NavAction.TURN_LEFT)
    assert abs(angle_diff(info["heading"], h0) - turn) < 1e-3
    assert abs(angle_diff(float(obs["compass"][0]), turn)) < 1e-3
    np.testing.assert_allclose(info["position"], p0, atol=1e-3)
    assert info["collided"] is False
    _, _, _, _, info = env.step(NavAction.TURN_RIGHT)
    assert abs(angle_diff(info["heading"], h0)) < 1e-3
    _, _, _, _, info = env.step(NavAction.TURN_RIGHT)
    assert abs(angle_diff(info["heading"], h0) + turn) < 1e-3
    np.testing.assert_allclose(info["position"], p0, atol=1e-3)

    _, info = reset(env)
    n = round(2 * math.pi / turn)
    assert n == 24
    prev = info["heading"]
    for _ in range(n):
        _, _, _, _, info = env.step(NavAction.TURN_LEFT)
        assert abs(angle_diff(info["heading"], prev) - turn) < 1e-3
        prev = info["heading"]
    assert abs(angle_diff(info["heading"], h0)) < 1e-3
    np.testing.assert_allclose(info["position"], p0, atol=1e-3)


def _range_image(depth: np.ndarray, f: float) -> np.ndarray:
    """Distance along each pixel's ray from z-depth: invariant under a rotation of the camera."""
    h, w = depth.shape
    vv, uu = np.mgrid[0:h, 0:w]
    return depth * np.sqrt(1 + ((uu + 0.5 - w / 2) / f) ** 2 + ((vv + 0.5 - h / 2) / f) ** 2)


def _yaw_warp_error(old: np.ndarray, new: np.ndarray, hfov_deg: float, yaw: float, max_depth: float) -> float:
    """Median |range| mismatch between ``new`` and ``old`` warped by a left turn of ``yaw`` (pinhole, hfov)."""
    h, w = old.shape
    f = (w / 2) / math.tan(math.radians(hfov_deg) / 2)
    ro, rn = _range_image(old, f), _range_image(new, f)
    vv, uu = np.mgrid[0:h, 0:w]
    xn, yn = (uu + 0.5 - w / 2) / f, (vv + 0.5 - h / 2) / f  # new-camera ray (x right, y down, z forward = 1)
    x, z = xn * math.cos(yaw) - math.sin(yaw), xn * math.sin(yaw) + math.cos(yaw)  # same ray, old camera
    ok = z > 1e-6
    zs = np.where(ok, z, 1.0)
    ui, vi = np.rint(f * x / zs + w / 2 - 0.5).astype(int), np.rint(f * yn / zs + h / 2 - 0.5).astype(int)
    ok &= (ui >= 0) & (ui < w) & (vi >= 0) & (vi < h)
    ui, vi = np.where(ok, ui, 0), np.where(ok, vi, 0)
    valid = ok & (new > 1e-3) & (new < max_depth - 1e-3) & (old[vi, ui] > 1e-3) & (old[vi, ui] < max_depth - 1e-3)
    assert valid.mean() > 0.2, "too few in-range depth pixels to compare"
    return float(np.median(np.abs(rn[valid] - ro[vi[valid], ui[valid]])))


def test_turn_rotates_the_camera(case):
    """The depth after TURN_LEFT is the depth before, seen by a pinhole camera (config hfov) turned left by the
    turn angle about its own vertical axis: catches mirrored images, wrong turn sign/size and wrong hfov."""
    env = case.env
    cfg = env.config
    a = math.radians(cfg.turn_angle_deg)
    for i in range(len(case.episodes)):
        obs, _ = reset(env, i)
        new, *_ = env.step(NavAction.TURN_LEFT)
        err = {d: _yaw_warp_error(obs["depth"], new["depth"], cfg.hfov_deg, a + math.radians(d), cfg.max_depth)
               for d in (-5, 0, 5)}
        wrong_way = _yaw_warp_error(obs["depth"], new["depth"], cfg.hfov_deg, -a, cfg.max_depth)
        assert err[0] < 0.05 and err[0] < wrong_way / 2 and err[0] <= min(err[-5], err[5]), (i, err, wrong_way)


def test_walking_into_a_wall_collides_and_stops(case):
    env = case.env
    _, info = reset(env)
    step = env.config.forward_step
    for _ in range(400):
        p0, h = np.asarray(info["position"]), info["heading"]
        _, _, term, trunc, info = env.step(NavAction.MOVE_FORWARD)
        assert not (term or trunc)
        moved = horizontal(np.asarray(info["position"]) - p0)
        if not info["collided"]:
            np.testing.assert_allclose(moved, step * horizontal(forward_dir(h)), atol=0.01)
        if np.linalg.norm(moved) < 1e-4:
            assert info["collided"] is True, "blocked forward move not reported as a collision"
            break
    else:
        pytest.fail("never blocked after 400 forward steps")
    stop_pos = np.asarray(info["position"])
    _, _, _, _, info = env.step(NavAction.MOVE_FORWARD)
    assert info["collided"] is True
    np.testing.assert_allclose(info["position"], stop_pos, atol=1e-4)


# -------------------------------------------------------------------------------- episode control
def test_stop_ends_episode_with_metrics(case):
    env = case.env
    _, info0 = reset(env)
    _, reward, terminated, truncated, info = env.step(NavAction.STOP)
    assert terminated is True and truncated is False
    m = info["metrics"]
    assert METRIC_KEYS <= set(m)
    assert m["steps"] == 1 and m["tl"] == pytest.approx(0.0)
    assert m["ne"] == pytest.approx(info0["distance_to_goal"], abs=1e-6)
    assert m["sr"] == float(m["ne"] < env.config.success_distance)
    assert all(math.isfinite(float(v)) for v in m.values())
    for a in (NavAction.MOVE_FORWARD, NavAction.STOP):
        with pytest.raises(RuntimeError):
            env.step(a)


@pytest.mark.parametrize("bad", [4, -1, "JUMP", 1.5])
def test_invalid_actions_raise(case, bad):
    env = case.env
    reset(env)
    with pytest.raises(ValueError):
        env.step(bad)
    _, _, _, _, info = env.step(NavAction.TURN_LEFT)
    assert info["steps"] == 1, "a rejected action was counted as a step"


def test_max_steps_truncates(case):
    env = case.env
    saved = env.config
    env.config = dataclasses.replace(saved, max_steps=5)
    try:
        reset(env)
        for i in range(1, 5):
            _, _, terminated, truncated, info = env.step(NavAction.TURN_LEFT)
            assert not terminated and not truncated and "metrics" not in info, i
        _, _, terminated, truncated, info = env.step(NavAction.TURN_LEFT)
        assert truncated is True and terminated is False
        assert info["metrics"]["steps"] == 5 and info["metrics"]["sr"] == 0.0
        with pytest.raises(RuntimeError):
            env.step(NavAction.TURN_LEFT)
    finally:
        env.config = saved


def test_start_inside_obstacle_raises(case):
    env = case.env
    bad = dataclasses.replace(case.episodes[0], start_position=list(case.bad_start))
    assert not env.is_navigable(np.asarray(case.bad_start))
    with pytest.raises(ValueError, match="inside an obstacle"):
        env.reset(options={"episode": bad})
    obs, info = reset(env)  # the env stays usable
    assert info["steps"] == 0


def test_failed_reset_leaves_no_episode_running(case):
    env = case.env
    reset(env)
    bad = dataclasses.replace(case.episodes[0], start_position=list(case.bad_start))
    with pytest.raises(ValueError):
        env.reset(options={"episode": bad})
    with pytest.raises(RuntimeError):
        env.step(NavAction.TURN_LEFT)


def test_unknown_condition_raises(case):
    with pytest.raises(ValueError, match="foggy") as exc:
        reset(case.env, condition="foggy")
    for name in available_conditions():
        assert name in str(exc.value)


# ---------------------------------------------------------------------------- rendering/conditions
def test_observations_are_deterministic(case):
    env = case.env
    for cond in ("normal", "low_light"):
        runs = []
        for _ in range(2):
            obs, _ = reset(env, condition=cond)
            frames = [obs]
            for a in (NavAction.TURN_LEFT, NavAction.MOVE_FORWARD, NavAction.TURN_RIGHT):
                frames.append(env.step(a)[0])
            runs.append(frames)
        for a, b in zip(*runs):
            np.testing.assert_array_equal(a["rgb"], b["rgb"])
            np.testing.assert_array_equal(a["depth"], b["depth"])
            np.testing.assert_array_equal(a["gps"], b["gps"])


def test_conditions_change_brightness(case):
    env = case.env
    conds = ("normal", "low_light", "overexposure", "scattering")
    mean = {c: float(reset(env, condition=c)[0]["rgb"].mean()) for c in conds}
    assert mean["low_light"] < mean["normal"] - 10, mean
    assert mean["overexposure"] > mean["normal"] + 10, mean
    # haze pulls every pixel toward the bright airlight A = (0.95, 0.95, 1.0): brighter, never darker
    assert mean["scattering"] > mean["normal"], mean
    _, info = reset(env, condition="low_light")
    assert info["condition"] == "low_light"


def test_oracle_reaches_goal(case):
    if case.backend != "mujoco":
        pytest.skip("oracle check is MuJoCo-specific (occupancy-grid shortest-path follower)")
    env = case.env
    for i in range(len(case.episodes)):
        reset(env, i)
        done, info = False, {}
        while not done:
            _, _, terminated, truncated, info = env.step(env.oracle_action())
            done = terminated or truncated
        assert terminated, f"episode {i}: oracle ran out of steps"
        assert info["metrics"]["sr"] == 1.0, (i, info["metrics"])


# ------------------------------------------------------------------------------- habitat import guard
def test_habitat_backend_importable_without_habitat_sim():
    from sim.core.env import ENV_BACKENDS
    from sim.habitat.env import HabitatNavEnv

    assert ENV_BACKENDS.get("habitat") == "sim.habitat.env:HabitatNavEnv"
    assert issubclass(HabitatNavEnv, BaseNavEnv)


@pytest.mark.skipif(habitat_available(), reason="habitat_sim is installed")
def test_habitat_backend_explains_missing_habitat_sim():
    with pytest.raises(ImportError, match=r"conda install habitat-sim .*docs/habitat\.md"):
        make_env(NavEnvConfig(**CFG), backend="habitat")
