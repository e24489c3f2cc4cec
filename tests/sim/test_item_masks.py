"""Segmentation of the generated houses: ``MujocoNavEnv.item_masks`` finds each visible furniture item's pixels and
``goal_item`` the episode's goal object."""

from __future__ import annotations

import numpy as np
import pytest

from agents.core.types import NavAction
from sim.core.env import NavEnvConfig, make_env
from sim.nav.episode_gen import generate_episodes, scene_list


@pytest.fixture(scope="module")
def env():
    episodes, gts, _ = generate_episodes(scene_list(1), 4, progress=False)
    e = make_env(NavEnvConfig(width=64, height=64, quality="fast"), episodes, gts, backend="mujoco")
    yield e
    e.close()


def _turn_until_one_is_central(env, limit: int = 24) -> tuple[int, dict[int, np.ndarray]]:
    """Turn left in place until some item covers >= 40 pixels around the middle of the image."""
    for _ in range(limit):
        masks = env.item_masks()
        for i, m in masks.items():
            if m.sum() >= 40 and 20 <= np.nonzero(m)[1].mean() <= 44:
                return i, masks
        env.step(NavAction.TURN_LEFT)
    pytest.fail("no furniture came into the middle of the view while turning in place")


def test_goal_item_is_the_named_object_in_the_named_room(env) -> None:
    for k in range(4):
        env.reset(options={"episode_index": k})
        g = env.goal_item()
        item = env.house.furniture[g]
        assert item.label == env.episode.info["goal_object"]
        assert env.house.rooms[item.room].name == env.episode.info["goal_room"]


def test_masks_follow_the_camera_and_cover_the_item_colour(env) -> None:
    env.reset(options={"episode_index": 0})
    g, masks = _turn_until_one_is_central(env)
    rgb = env.render()
    mask = masks[g]
    assert mask.shape == rgb.shape[:2] and mask.dtype == bool
    # the masked pixels have the item's colour (up to shading): nearer to it in chromaticity than the rest
    target = np.asarray(env.house.furniture[g].rgba[:3])
    target = target / target.sum()

    def chroma_err(pix: np.ndarray) -> float:
        c = pix.astype(float).mean(0) + 1e-6
        return float(np.abs(c / c.sum() - target).sum())

    assert chroma_err(rgb[mask]) < chroma_err(rgb[~mask])
    # turning right moves what is seen to the left of the image, and never grows a mask out of nothing
    before = np.nonzero(mask)[1].mean()
    env.step(NavAction.TURN_RIGHT)
    after = env.item_masks()
    assert g in after and np.nonzero(after[g])[1].mean() < before - 4
    # masks of different items never overlap
    stack = np.stack(list(after.values())) if after else np.zeros((1, 64, 64), bool)
    assert (stack.sum(0) <= 1).all()


def test_item_masks_need_an_episode() -> None:
    e = make_env(NavEnvConfig(width=32, height=32, quality="fast"), backend="mujoco")
    with pytest.raises(RuntimeError, match="reset"):
        e.item_masks()
