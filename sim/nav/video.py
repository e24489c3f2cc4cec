"""See what happened: top-down maps with paths, RGB/depth/map frame strips, MP4 and PNG output."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from sim.core.frames import habitat_to_mj
from sim.nav.house import House
from sim.nav.occupancy import OccupancyGrid

log = logging.getLogger(__name__)

ROOM_TINTS = [(235, 222, 200), (205, 225, 240), (215, 238, 210), (240, 215, 220), (230, 230, 205),
              (215, 210, 240), (240, 228, 205), (220, 220, 220)]


def topdown_map(house: House, grid: OccupancyGrid) -> np.ndarray:
    """RGB image of the grid (row 0 = lowest y, flipped so north is up): rooms tinted, obstacles dark."""
    h, w = grid.shape
    img = np.full((h, w, 3), 60, np.uint8)
    for r in house.rooms:
        rs, cs = grid._box_slices(r.x0, r.y0, r.x1, r.y1)
        img[rs, cs] = ROOM_TINTS[r.index % len(ROOM_TINTS)]
    img[~grid.navigable & ~grid.obstacle] = (img[~grid.navigable & ~grid.obstacle] * 0.8).astype(np.uint8)
    img[grid.obstacle] = (40, 40, 40)
    for it in house.furniture:
        rs, cs = grid._box_slices(it.x - it.sx, it.y - it.sy, it.x + it.sx, it.y + it.sy)
        img[rs, cs] = (np.asarray(it.rgba[:3]) * 255).astype(np.uint8)
    return img


def _px(grid: OccupancyGrid, p_hab: Sequence[float]) -> tuple[int, int]:
    x, y, _ = habitat_to_mj(p_hab)
    r, c = grid.to_cell(x, y)
    return int(c), int(grid.shape[0] - 1 - r)


def draw_paths(base: np.ndarray, grid: OccupancyGrid, agent: Sequence[Sequence[float]],
               reference: Sequence[Sequence[float]] | None = None, goal: Sequence[float] | None = None,
               heading: float | None = None, radius_m: float = 3.0) -> np.ndarray:
    """Overlay reference (green), agent path (blue), start, goal radius and current heading."""
    img = np.ascontiguousarray(base[::-1])  # north up
    if reference is not None and len(reference) > 1:
        pts = np.array([_px(grid, p) for p in reference], np.int32)
        cv2.polylines(img, [pts], False, (40, 170, 60), 2, cv2.LINE_AA)
    if goal is not None:
        g = _px(grid, goal)
        cv2.circle(img, g, int(radius_m / grid.resolution), (220, 60, 60), 1, cv2.LINE_AA)
        cv2.circle(img, g, 4, (220, 60, 60), -1)
    if len(agent) > 0:
        pts = np.array([_px(grid, p) for p in agent], np.int32)
        if len(pts) > 1:
            cv2.polylines(img, [pts], False, (40, 80, 220), 2, cv2.LINE_AA)
        cv2.circle(img, tuple(int(v) for v in pts[0]), 4, (250, 200, 0), -1)
        if heading is not None:
            # Habitat yaw: forward is (-sin, cos) in the MuJoCo floor frame; image rows grow southwards
            c = pts[-1]
            tip = (int(c[0] - 12 * np.sin(heading)), int(c[1] - 12 * np.cos(heading)))
            cv2.arrowedLine(img, tuple(int(v) for v in c), tip, (20, 20, 120), 2, tipLength=0.4)
    return img


def frame_strip(rgb: np.ndarray, depth: np.ndarray | None, topdown: np.ndarray, caption: str = "",
                height: int = 256) -> np.ndarray:
    """[RGB | depth (turbo) | map] side by side, resized to ``height``, with a caption bar."""
    panels = [rgb]
    if depth is not None:
        d = np.clip(depth / max(float(depth.max()), 1e-6), 0, 1)
        panels.append(cv2.applyColorMap((d * 255).astype(np.uint8), cv2.COLORMAP_TURBO)[..., ::-1])
    panels.append(topdown)
    out = [cv2.resize(p, (max(1, int(p.shape[1] * height / p.shape[0])), height), interpolation=cv2.INTER_AREA)
           for p in panels]
    strip = np.concatenate(out, axis=1)
    if caption:
        bar = np.full((28, strip.shape[1], 3), 255, np.uint8)
        cv2.putText(bar, caption[: strip.shape[1] // 7], (6, 19), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1,
                    cv2.LINE_AA)
        strip = np.concatenate([bar, strip], axis=0)
    return strip


def write_video(frames: Sequence[np.ndarray], path: str | Path, fps: float = 8.0) -> Path:
    """Write RGB frames as MP4 (mp4v); all frames must share one size."""
    if not frames:
        raise ValueError("no frames to write")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape[:2]
    h2, w2 = h - h % 2, w - w % 2
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w2, h2))
    if not vw.isOpened():
        raise RuntimeError(f"opencv could not open a video writer for {path}")
    try:
        for f in frames:
            vw.write(np.ascontiguousarray(f[:h2, :w2, ::-1]))
    finally:
        vw.release()
    return path


def save_topdown_plot(house: House, grid: OccupancyGrid, agent: Sequence[Sequence[float]],
                      reference: Sequence[Sequence[float]], goal: Sequence[float], path: str | Path,
                      title: str = "") -> Path:
    """A matplotlib PNG of the house with room names, the reference and the agent's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x0, y0 = grid.origin
    h, w = grid.shape
    extent = (x0, x0 + w * grid.resolution, y0, y0 + h * grid.resolution)
    fig, ax = plt.subplots(figsize=(7, 7 * h / max(w, 1) + 0.6))
    ax.imshow(topdown_map(house, grid), origin="lower", extent=extent)
    for r in house.rooms:
        ax.text(*r.center, r.name, ha="center", va="center", fontsize=8, alpha=0.8)
    ref = np.array([habitat_to_mj(p)[:2] for p in reference])
    ag = np.array([habitat_to_mj(p)[:2] for p in agent])
    ax.plot(ref[:, 0], ref[:, 1], "-o", color="tab:green", ms=3, label="reference")
    ax.plot(ag[:, 0], ag[:, 1], "-", color="tab:blue", lw=2, label="agent")
    gx, gy, _ = habitat_to_mj(goal)
    ax.add_patch(plt.Circle((gx, gy), 3.0, fill=False, color="tab:red", ls="--"))
    ax.plot([ag[0, 0]], [ag[0, 1]], "o", color="gold", ms=8, label="start")
    ax.plot([gx], [gy], "*", color="tab:red", ms=12, label="goal")
    import textwrap

    ax.set_title("\n".join(textwrap.fill(line, 90) for line in title.splitlines()), fontsize=8)
    ax.legend(loc="upper right", fontsize=7)
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
