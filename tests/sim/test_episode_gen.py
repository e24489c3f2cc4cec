"""Episode generation in procedural houses: determinism, instructions, conditions, gt and file round trip."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sim.core.episodes import Episode, GroundTruth, load_split, load_vocab, save_split
from sim.core.frames import habitat_to_mj
from sim.nav.episode_gen import EpisodeGenConfig, generate_episodes, scene_list
from sim.nav.house import ROOM_KINDS, STYLES, generate_house, parse_scene_id
from sim.nav.occupancy import grid_for_scene

SCENES = scene_list(3)
PER_SCENE = 4
CONDITIONS = ["normal", "low_light"]

Generated = tuple[list[Episode], dict[str, GroundTruth], dict]


@pytest.fixture(scope="module")
def generated() -> Generated:
    return generate_episodes(SCENES, PER_SCENE, seed=0, progress=False)


@pytest.fixture(scope="module")
def with_conditions() -> Generated:
    return generate_episodes(SCENES, PER_SCENE, seed=0, conditions=CONDITIONS, progress=False)


def test_scene_list() -> None:
    assert SCENES == [("corridor", 0), ("grid", 1), ("lshape", 2)]
    assert scene_list(4, seed=2, styles=["grid"]) == [("grid", 2000 + i) for i in range(4)]
    assert {s for s, _ in scene_list(6)} == set(STYLES.names())
    with pytest.raises(ValueError, match="unknown house style"):
        scene_list(2, styles=["castle"])


def test_counts_and_ids(generated: Generated) -> None:
    episodes, gts, vocab = generated
    assert len(episodes) == len(SCENES) * PER_SCENE
    assert [e.episode_id for e in episodes] == list(range(len(episodes)))
    assert set(gts) == {str(e.episode_id) for e in episodes}
    assert [e.scene_id for e in episodes] == [f"allday/{s}/{k:05d}" for s, k in SCENES for _ in range(PER_SCENE)]
    for e in episodes:
        parse_scene_id(e.scene_id)
        assert e.instruction_tokens and all(isinstance(t, int) and t > 1 for t in e.instruction_tokens)
    assert vocab


def test_deterministic_for_the_same_seed(generated: Generated) -> None:
    episodes, gts, vocab = generate_episodes(SCENES, PER_SCENE, seed=0, progress=False)
    assert episodes == generated[0]
    assert gts == generated[1]
    assert vocab == generated[2]


def test_a_different_seed_gives_different_episodes(generated: Generated) -> None:
    other, _, _ = generate_episodes(SCENES[:1], 2, seed=1, progress=False)
    mine = generated[0][:2]
    assert [e.start_position for e in other] != [e.start_position for e in mine]


def test_instructions_mention_goal_object_and_rooms(generated: Generated) -> None:
    for e in generated[0]:
        text = e.instruction_text
        assert text and text[0].isupper() and text.endswith(".")
        assert text.isascii() and len(text.split()) >= 6
        low = text.lower()
        assert e.info["goal_object"] in low, (e.info, text)
        house = generate_house(*reversed(parse_scene_id(e.scene_id)))
        assert any(r.name in low for r in house.rooms), text
        assert any(k in low for k in ROOM_KINDS)
        assert e.info["goal_room"] in [r.name for r in house.rooms]
        labels = {f.label for f in house.furniture}
        assert e.info["goal_object"] in labels


def test_instructions_vary(generated: Generated) -> None:
    texts = [e.instruction_text for e in generated[0]]
    assert len(set(texts)) == len(texts)
    openings = {" ".join(t.split()[:2]).rstrip(".,") for t in texts}
    assert len(openings) > 1


def test_conditions_repeat_episodes(generated: Generated, with_conditions: Generated) -> None:
    base = generated[0]
    episodes, gts, _ = with_conditions
    assert len(episodes) == len(CONDITIONS) * len(base)
    ids = [e.episode_id for e in episodes]
    assert len(set(ids)) == len(ids)
    assert set(gts) == {str(i) for i in ids}
    for c, cond in enumerate(CONDITIONS):
        block = episodes[c * len(base):(c + 1) * len(base)]
        assert all(e.info["condition"] == cond for e in block)
        for e, b in zip(block, base):  # the same route and instruction under every condition
            assert (e.scene_id, e.start_position, e.start_rotation, e.instruction_text, e.trajectory_id) == \
                (b.scene_id, b.start_position, b.start_rotation, b.instruction_text, b.trajectory_id)
            assert e.reference_path == b.reference_path and e.goals == b.goals
            assert gts[str(e.episode_id)] == generated[1][str(b.episode_id)]
    assert "condition" not in base[0].info


def test_unknown_condition_raises() -> None:
    with pytest.raises(ValueError, match="unknown condition.*fog_of_war"):
        generate_episodes(SCENES, 1, conditions=["normal", "fog_of_war"], progress=False)
    with pytest.raises(ValueError, match="per_scene"):
        generate_episodes(SCENES, 0, progress=False)
    with pytest.raises(ValueError):
        EpisodeGenConfig(min_distance=5.0, max_distance=4.0)


def test_ground_truth_matches_episodes(generated: Generated) -> None:
    cfg = EpisodeGenConfig()
    episodes, gts, _ = generated
    for e in episodes:
        gt = gts[str(e.episode_id)]
        assert gt.locations[0] == pytest.approx(e.start_position)
        assert gt.actions[-1] == 0 and 0 not in gt.actions[:-1]
        assert set(gt.actions) <= {0, 1, 2, 3}
        assert len(gt.locations) == len(gt.actions)  # one location per action taken (STOP does not move)
        assert gt.forward_steps == gt.actions.count(1)
        assert cfg.min_distance <= e.geodesic_distance <= cfg.max_distance
        assert all(p[1] == 0.0 for p in gt.locations)  # floor level in the Habitat frame (y up)
        assert e.reference_path[0] == pytest.approx(e.start_position)
        assert math.dist(e.reference_path[-1], gt.locations[-1]) <= 0.5
        assert len(e.reference_path) >= 2
        steps = [math.dist(a, b) for a, b in zip(gt.locations[:-1], gt.locations[1:])]
        assert all(s == pytest.approx(0.0, abs=1e-9) or s == pytest.approx(0.25) for s in steps)
        # the goal is reached, and the geodesic is the grid's
        grid = grid_for_scene(e.scene_id)
        gx, gy, _ = habitat_to_mj(e.goals[0].position)
        sx, sy, _ = habitat_to_mj(e.start_position)
        fx, fy, _ = habitat_to_mj(gt.locations[-1])
        assert grid.geodesic(fx, fy, gx, gy) <= 0.5
        assert e.geodesic_distance == pytest.approx(grid.geodesic(sx, sy, gx, gy), abs=1e-3)
        assert e.goals[0].radius == 3.0
        q = np.asarray(e.start_rotation)
        assert np.linalg.norm(q) == pytest.approx(1.0) and q[0] == 0.0 and q[2] == 0.0  # yaw about +y only


def test_save_and_load_round_trip(tmp_path: Path, with_conditions: Generated) -> None:
    episodes, gts, vocab = with_conditions
    path = save_split(tmp_path, "val_seen", episodes, gts, vocab=vocab)
    assert path.is_file()
    loaded, loaded_gt = load_split(tmp_path, "val_seen")
    assert loaded == episodes
    assert loaded_gt == gts
    assert load_vocab(tmp_path, "val_seen") == vocab


def test_nearest_goal_side_is_the_face_the_start_reaches_first() -> None:
    """goal_side='nearest': the goal point is in front of the side of the goal object with the shortest geodesic
    from the start, among all its navigable sides; 'random' (the default) is not always that side."""
    from sim.nav.episode_gen import _side_points

    picked_nearest = {}
    for side in ("nearest", "random"):
        cfg = EpisodeGenConfig(min_distance=1.0, max_distance=4.0, same_room=True, goal_side=side,
                               tries_per_episode=400)
        eps, _, _ = generate_episodes(SCENES[:1], 12, seed=3, cfg=cfg, progress=False)
        house = generate_house(*reversed(parse_scene_id(eps[0].scene_id)))
        grid = grid_for_scene(eps[0].scene_id)
        flags = []
        for ep in eps:
            sx, sy, _ = habitat_to_mj(ep.start_position)
            gx, gy, _ = habitat_to_mj(ep.goals[0].position)
            item = min((it for it in house.furniture if it.label == ep.info["goal_object"]),
                       key=lambda it: it.distance_to(gx, gy))
            best = min(grid.geodesic(sx, sy, *p) for p in _side_points(grid, item, 0.5, np.random.default_rng(0)))
            flags.append(grid.geodesic(sx, sy, gx, gy) <= best + 1e-6)
        picked_nearest[side] = flags
    assert all(picked_nearest["nearest"])
    assert not all(picked_nearest["random"])
    with pytest.raises(ValueError, match="goal_side"):
        EpisodeGenConfig(goal_side="far")
