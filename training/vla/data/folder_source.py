"""Source 3: a plain folder format for users' own demonstrations (documented in ``docs/vla_training.md``).

Layout::

    DATASET/
      episode_0000/
        meta.json       {"instruction": "pick up the red cube", "task": "lift",          # task optional
                         "phases": ["reach", "reach", ...],                               # optional, T labels
                         "units": "m",                                                    # optional, "m" or "cm"
                         "camera": "wrist"}                           # optional; recorded in the trained policy
        frames/000000.png, 000001.png, ...   (T RGB frames, all the same size; frame t is seen before action t)
        actions.npz     deltas: T x 3 float (end-effector displacement per step, base frame +x fwd +y left +z up)
                        gripper: T float (-1 open .. +1 close)

:func:`validate_folder` lists every problem (file + field) without raising; :func:`load_folder` raises one
ValueError listing them all; :func:`write_folder` writes episodes in this format.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np

from agents.core.io import NPZ_READ_ERRORS
from training.vla.data.episode import Episode

log = logging.getLogger(__name__)

META = "meta.json"
ACTIONS = "actions.npz"
FRAMES = "frames"
UNITS = {"m": 1.0, "cm": 0.01}


def _natural(p: Path) -> list[int | str]:
    """Sort key reading the numbers in a name as numbers: ``2.png`` before ``10.png`` (zero padding not needed)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


def _episode_dirs(root: Path) -> list[Path]:
    return sorted((p for p in root.iterdir() if p.is_dir()), key=_natural)


def _check_episode(d: Path) -> tuple[list[str], Episode | None]:
    """Problems of one episode directory and, when there are none, the loaded episode."""
    errs: list[str] = []
    meta: dict = {}
    try:
        meta = json.loads((d / META).read_text())
        if not isinstance(meta, dict):
            errs.append(f"{d / META}: must hold a JSON object, got {type(meta).__name__}")
            meta = {}
    except FileNotFoundError:
        errs.append(f"{d / META}: missing")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        errs.append(f"{d / META}: not valid JSON ({exc})")
    instr = meta.get("instruction")
    if meta and (not isinstance(instr, str) or not instr.strip()):
        errs.append(f"{d / META}: field 'instruction' must be a non-empty string, got {instr!r}")
    units = meta.get("units", "m")
    if units not in UNITS:
        errs.append(f"{d / META}: field 'units' must be one of {sorted(UNITS)}, got {units!r}")
        units = "m"
    deltas = gripper = None
    try:
        with np.load(d / ACTIONS, allow_pickle=False) as z:
            for key in ("deltas", "gripper"):
                if key not in z.files:
                    errs.append(f"{d / ACTIONS}: missing array {key!r} (has {sorted(z.files)})")
            if "deltas" in z.files and "gripper" in z.files:
                deltas = np.asarray(z["deltas"], dtype=np.float64) * UNITS[units]
                gripper = np.asarray(z["gripper"], dtype=np.float64).reshape(-1)
                if deltas.ndim != 2 or deltas.shape[1] != 3:
                    errs.append(f"{d / ACTIONS}: 'deltas' must be T x 3, got shape {deltas.shape}")
                elif len(gripper) != len(deltas):
                    errs.append(f"{d / ACTIONS}: 'gripper' has {len(gripper)} values but 'deltas' has {len(deltas)}")
    except FileNotFoundError:
        errs.append(f"{d / ACTIONS}: missing")
    except NPZ_READ_ERRORS as exc:
        errs.append(f"{d / ACTIONS}: not a readable .npz ({exc})")
    frame_files = sorted((d / FRAMES).glob("*.png"), key=_natural) if (d / FRAMES).is_dir() else []
    if not frame_files:
        errs.append(f"{d / FRAMES}: no PNG frames")
    frames = []
    from PIL import Image, UnidentifiedImageError

    for f in frame_files:
        try:
            with Image.open(f) as im:
                frames.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
        except (UnidentifiedImageError, OSError) as exc:
            errs.append(f"{f}: not a readable PNG ({exc})")
    if frames and len({fr.shape for fr in frames}) > 1:
        errs.append(f"{d / FRAMES}: frames differ in size {sorted({fr.shape for fr in frames})}")
    if deltas is not None and frame_files and len(frame_files) != len(deltas):
        errs.append(f"{d}: {len(frame_files)} frames but {len(deltas)} actions (need one frame per action)")
    phases = meta.get("phases")
    if phases is not None and deltas is not None and (not isinstance(phases, list) or len(phases) != len(deltas)):
        errs.append(f"{d / META}: field 'phases' must be a list of {len(deltas)} labels")
    if errs:
        return errs, None
    assert deltas is not None and gripper is not None
    try:
        ep = Episode(np.stack(frames), deltas, gripper, phases or [""] * len(deltas), instr, str(meta.get("task", "")),
                     {"source": "folder", "path": str(d), **{k: v for k, v in meta.items()
                                                              if k not in ("phases", "instruction", "task")}})
    except ValueError as exc:
        return [f"{d}: {exc}"], None
    return [], ep


def validate_folder(root: str | Path) -> list[str]:
    """Every problem of a folder dataset, one line each naming the file and field; [] when it is valid."""
    root = Path(root)
    if not root.is_dir():
        return [f"{root}: not a directory"]
    dirs = _episode_dirs(root)
    if not dirs:
        return [f"{root}: no episode directories"]
    return [e for d in dirs for e in _check_episode(d)[0]]


def load_folder(root: str | Path) -> list[Episode]:
    """All episodes of a folder dataset; one ValueError listing every problem when any episode is invalid."""
    root = Path(root)
    errs = validate_folder(root)
    if errs:
        raise ValueError(f"invalid VLA folder dataset {root} ({len(errs)} problems):\n  " + "\n  ".join(errs))
    out = []
    for d in _episode_dirs(root):
        _, ep = _check_episode(d)
        assert ep is not None
        out.append(ep)
    return out


def write_folder(episodes: list[Episode], root: str | Path) -> Path:
    """Write ``episodes`` in the folder format (``root/episode_0000`` ...); returns ``root``."""
    from PIL import Image

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for i, ep in enumerate(episodes):
        d = root / f"episode_{i:04d}"
        (d / FRAMES).mkdir(parents=True, exist_ok=True)
        for t, fr in enumerate(ep.frames):
            Image.fromarray(fr).save(d / FRAMES / f"{t:06d}.png")
        np.savez(d / ACTIONS, deltas=ep.deltas, gripper=ep.gripper)
        meta = {k: v for k, v in ep.meta.items() if k not in ("path", "source")}
        meta.update(instruction=ep.instruction, task=ep.task, phases=ep.phases, units="m")
        (d / META).write_text(json.dumps(meta, indent=1))
    return root
