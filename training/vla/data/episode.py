"""The one episode format every VLA data source produces.

An :class:`Episode` is a demonstration of ``T`` control steps:

* ``frames``: ``T x H x W x 3`` uint8 RGB, ``frames[t]`` is the camera image *before* action ``t``;
* ``deltas``: ``T x 3`` float32, end-effector displacement of step ``t`` in **metres** in the robot base frame
  (+x forward, +y left, +z up);
* ``gripper``: ``T`` float32, the gripper command of step ``t`` (-1 open .. +1 close, 0 hold; the
  :mod:`sim.manip.action` convention);
* ``phases``: ``T`` strings, the phase label of step ``t`` ("" when unknown, e.g. teleoperation);
* ``instruction``: the episode's English instruction; ``task``: a task name; ``meta``: JSON-able extras
  (source, seed, success, object names...).

Episodes are cached as one compressed ``.npz`` each (:func:`save_episode` / :func:`load_episode`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.core.io import NPZ_READ_ERRORS, is_temporary, load_npz, save_npz

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


@dataclass
class Episode:
    """One demonstration in the common format (see the module docstring); validated at construction."""

    frames: np.ndarray
    deltas: np.ndarray
    gripper: np.ndarray
    phases: list[str]
    instruction: str
    task: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        f = self.frames
        if not isinstance(f, np.ndarray) or f.ndim != 4 or f.shape[-1] != 3 or f.dtype != np.uint8:
            raise ValueError(f"frames must be a T x H x W x 3 uint8 array, got "
                             f"{getattr(f, 'shape', type(f).__name__)} {getattr(f, 'dtype', '')}")
        t = f.shape[0]
        if t < 1:
            raise ValueError("an episode needs at least one step (frames is empty)")
        d = np.asarray(self.deltas, dtype=np.float32)
        if d.shape != (t, 3):
            raise ValueError(f"deltas must be T x 3 = ({t}, 3) metres, got shape {d.shape}")
        g = np.asarray(self.gripper, dtype=np.float32).reshape(-1)
        if g.shape != (t,):
            raise ValueError(f"gripper must have T = {t} values, got shape {g.shape}")
        if not (np.isfinite(d).all() and np.isfinite(g).all()):
            raise ValueError("deltas and gripper must be finite (found NaN or inf)")
        if np.abs(d).max(initial=0.0) > 0.5:
            raise ValueError(f"deltas must be metres per step; max |delta| = {np.abs(d).max():.3g} m looks like "
                             "centimetres or millimetres")
        if np.abs(g).max(initial=0.0) > 1.0 + 1e-6:
            raise ValueError(f"gripper must be in [-1, 1] (-1 open, +1 close), got max |g| = {np.abs(g).max():.3g}")
        phases = [str(p) for p in self.phases]
        if len(phases) != t:
            raise ValueError(f"phases must have T = {t} labels, got {len(phases)}")
        if not isinstance(self.instruction, str) or not self.instruction.strip():
            raise ValueError("instruction must be a non-empty string")
        self.deltas, self.gripper, self.phases = d, g, phases
        self.instruction = self.instruction.strip()

    def __len__(self) -> int:
        return int(self.frames.shape[0])

    @property
    def image_size(self) -> tuple[int, int]:
        return int(self.frames.shape[1]), int(self.frames.shape[2])

    def actions(self) -> np.ndarray:
        """``T x 4`` float32 ``[dx, dy, dz, gripper]`` (metres, -1 open .. +1 close)."""
        return np.concatenate([self.deltas, self.gripper[:, None]], axis=1).astype(np.float32)

    def segments(self) -> list[tuple[str, int, int]]:
        """Consecutive runs of one phase label as ``(phase, start, end)`` with ``end`` exclusive."""
        out: list[tuple[str, int, int]] = []
        start = 0
        for t in range(1, len(self) + 1):
            if t == len(self) or self.phases[t] != self.phases[start]:
                out.append((self.phases[start], start, t))
                start = t
        return out


def save_episode(ep: Episode, path: str | Path) -> Path:
    """Write ``ep`` to ``path`` (``.npz``, compressed); returns the path."""
    header = {"version": FORMAT_VERSION, "phases": ep.phases, "instruction": ep.instruction, "task": ep.task,
              "meta": ep.meta}
    return save_npz(path, frames=ep.frames, deltas=ep.deltas, gripper=ep.gripper,
                    header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8))


def load_episode(path: str | Path) -> Episode:
    """Read an episode written by :func:`save_episode`; ValueError naming the file when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no episode file at {path}")
    try:
        with load_npz(path) as z:
            missing = {"frames", "deltas", "gripper", "header"} - set(z.files)
            if missing:
                raise ValueError(f"{path}: not an allday episode file (missing arrays {sorted(missing)})")
            header = json.loads(bytes(z["header"]).decode())
            if header.get("version") != FORMAT_VERSION:
                raise ValueError(f"{path}: episode format version {header.get('version')} != {FORMAT_VERSION}")
            return Episode(z["frames"], z["deltas"], z["gripper"], header["phases"], header["instruction"],
                           header.get("task", ""), header.get("meta", {}))
    except ValueError as exc:  # ours (they name the file) or numpy's / json's
        if str(path) in str(exc):
            raise
        raise ValueError(f"{path}: cannot read episode ({type(exc).__name__}: {exc})") from exc
    except NPZ_READ_ERRORS as exc:  # truncated or corrupt archive (BadZipFile, zlib.error, EOFError, ...)
        raise ValueError(f"{path}: cannot read episode ({type(exc).__name__}: {exc})") from exc


def load_episodes(directory: str | Path) -> list[Episode]:
    """Every ``*.npz`` episode in ``directory`` (sorted by name)."""
    directory = Path(directory)
    files = sorted(f for f in directory.glob("*.npz") if not is_temporary(f))  # a killed writer's temporaries
    if not files:
        raise FileNotFoundError(f"no episode files (*.npz) in {directory}")
    return [load_episode(f) for f in files]
