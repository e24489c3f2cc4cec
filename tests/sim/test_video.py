"""Top-down maps, path overlays, MP4 and PNG output (small and fast)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from sim.core.frames import mj_to_habitat
from sim.nav.house import House, generate_house
from sim.nav.occupancy import OccupancyGrid
from sim.nav.video import draw_paths, frame_strip, save_topdown_plot, topdown_map, write_video

AGENT_COLOUR = (40, 80, 220)
REF_COLOUR = (40, 170, 60)


@pytest.fixture(scope="module")
def scene() -> tuple[House, OccupancyGrid]:
    house = generate_house(2, "grid", n_rooms=3)
    return house, OccupancyGrid(house)


def _path(house: House) -> list[list[float]]:
    (x0, y0), (x1, y1) = house.rooms[0].center, house.rooms[1].center
    return [mj_to_habitat(x, y) for x, y in zip(np.linspace(x0, x1, 20), np.linspace(y0, y1, 20))]


def test_topdown_map(scene) -> None:
    house, grid = scene
    img = topdown_map(house, grid)
    assert img.shape == (*grid.shape, 3) and img.dtype == np.uint8
    walls = grid.obstacle.copy()
    for it in house.furniture:
        walls[grid._box_slices(it.x - it.sx, it.y - it.sy, it.x + it.sx, it.y + it.sy)] = False
    assert (img[walls] == 40).all() and tuple(img[0, 0]) == (40, 40, 40)
    r, c = grid.to_cell(*house.rooms[0].center)
    if grid.navigable[r, c]:
        assert img[r, c].mean() > 150  # tinted floor, lighter than walls
    it = house.furniture[0]
    r, c = grid.to_cell(it.x, it.y)
    assert tuple(img[r, c]) == tuple((np.asarray(it.rgba[:3]) * 255).astype(np.uint8))


def test_draw_paths(scene) -> None:
    house, grid = scene
    base = topdown_map(house, grid)
    path = _path(house)
    img = draw_paths(base, grid, path, heading=0.0)
    assert img.shape == base.shape and img.dtype == np.uint8
    assert not (base == AGENT_COLOUR).all(axis=-1).any()
    on_path = (img == AGENT_COLOUR).all(axis=-1)
    assert on_path.sum() > 20
    # the line runs between the two room centres (image rows are flipped: north up)
    (x0, y0), (x1, y1) = house.rooms[0].center, house.rooms[1].center
    rows, cols = np.nonzero(on_path)
    mid_r, mid_c = grid.to_cell((x0 + x1) / 2, (y0 + y1) / 2)
    assert np.min(np.hypot(rows - (grid.shape[0] - 1 - mid_r), cols - mid_c)) <= 2
    assert base is not img and (base == topdown_map(house, grid)).all()  # input untouched
    ref = draw_paths(base, grid, [path[0]], reference=path, goal=path[-1])
    assert (ref == REF_COLOUR).all(axis=-1).sum() > 20
    assert not (ref == AGENT_COLOUR).all(axis=-1).any()  # a single point draws no agent line


def test_frame_strip() -> None:
    rgb = np.zeros((64, 80, 3), np.uint8)
    depth = np.linspace(0, 5, 64 * 80, dtype=np.float32).reshape(64, 80)
    top = np.full((100, 100, 3), 200, np.uint8)
    strip = frame_strip(rgb, depth, top, caption="hello", height=128)
    assert strip.shape == (128 + 28, 160 + 160 + 128, 3) and strip.dtype == np.uint8


def test_write_video(tmp_path: Path) -> None:
    frames = [np.full((48, 65, 3), 20 * i, np.uint8) for i in range(6)]  # odd width is cropped to even
    out = write_video(frames, tmp_path / "sub" / "ep.mp4", fps=5)
    assert out.is_file() and out.stat().st_size > 0
    cap = cv2.VideoCapture(str(out))
    try:
        assert cap.isOpened()
        n = 0
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            assert frame.shape == (48, 64, 3)
            n += 1
    finally:
        cap.release()
    assert n == len(frames)
    with pytest.raises(ValueError, match="no frames"):
        write_video([], tmp_path / "empty.mp4")


def test_save_topdown_plot(scene, tmp_path: Path) -> None:
    house, grid = scene
    path = _path(house)
    out = save_topdown_plot(house, grid, path, path[::5], path[-1], tmp_path / "plots" / "ep.png", title="ep 0")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = cv2.imread(str(out))
    assert img is not None and img.shape[0] > 100 and img.shape[1] > 100
