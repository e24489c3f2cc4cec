"""VLM2VLA's action language, grammar version 1 (the one place it is written; docs/vla.md documents it).

Three levels, all plain text:

1. **subtasks**: ``subtask; subtask; ...`` — 1..12 subtasks, each lowercase words (letters, digits, spaces,
   ``'`` and ``-``), separated by ``"; "``. Example: ``move above the red cube; descend; grasp; lift``.
2. **motion plan** (direction only, no magnitudes): ``stay still`` or ``move DIR[ and DIR]...``, optionally
   followed by ``, then close the gripper`` / ``, then open the gripper``; or just ``close the gripper`` /
   ``open the gripper``. ``DIR`` is ``[slightly ]forward|backward|left|right|up|down``, one per axis.
3. **action chunk**: ``[[dx, dy, dz, g], ...]`` — 1..``max_elements`` elements, each the end-effector displacement
   in **centimetres** in the robot base frame (+x forward, +y left, +z up) written with one decimal, and the
   gripper state ``g`` (1 open, 0 closed; the paper's convention). Example: ``[[1.5, -0.2, -2.5, 1], [0.0, 0.0,
   -3.1, 0]]``.

Chunk elements come from per-step deltas by the paper's merging rule (:func:`merge_deltas`). The decoder
(:func:`parse_chunk`) accepts any decimal formatting of that shape and whitespace, raises
:class:`MalformedActionError` for anything else, clamps to :class:`ChunkLimits` and never returns NaN.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

GRAMMAR_VERSION = "v1"
#: merging thresholds of the paper (cm): one axis without sign change / total displacement
AXIS_THRESHOLD_CM = 2.5
TOTAL_THRESHOLD_CM = 5.0
#: per-step components below this (cm) count as zero for the sign-change test
ZERO_CM = 1e-4
AXES = (("forward", "backward"), ("left", "right"), ("up", "down"))
MAX_SUBTASKS = 12


class MalformedActionError(ValueError):
    """Generated text (or tokens) that does not follow the action grammar; the policy resamples on it."""


@dataclass(frozen=True)
class ChunkLimits:
    """Decoder limits: at most ``max_elements`` chunk elements, each axis clamped to +-``max_abs_cm``."""

    max_elements: int = 16
    max_abs_cm: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_elements, int) or not 1 <= self.max_elements <= 256:
            raise ValueError(f"max_elements must be an int in [1, 256], got {self.max_elements!r}")
        if not (math.isfinite(self.max_abs_cm) and 0.1 <= self.max_abs_cm <= 100.0):
            raise ValueError(f"max_abs_cm must be in [0.1, 100] cm, got {self.max_abs_cm!r}")


#: the default decoder limits (16 elements, +-10 cm per axis)
DEFAULT_LIMITS = ChunkLimits()


# ------------------------------------------------------------------------------------------------ chunk level
def format_cm(v: float) -> str:
    """One number of the action language: one decimal, never ``-0.0``."""
    s = f"{v:.1f}"
    return "0.0" if s == "-0.0" else s


def format_chunk(chunk_cm: np.ndarray | Sequence[Sequence[float]]) -> str:
    """Serialise a K x 4 chunk ``[dx, dy, dz, g]`` (cm, g in {0, 1}) in grammar v1."""
    arr = np.asarray(chunk_cm, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != 4 or arr.shape[0] < 1:
        raise ValueError(f"chunk must be K x 4 with K >= 1, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("chunk must be finite")
    parts = [f"[{format_cm(dx)}, {format_cm(dy)}, {format_cm(dz)}, {1 if g >= 0.5 else 0}]" for dx, dy, dz, g in arr]
    return "[" + ", ".join(parts) + "]"


_NUM = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_ELEMS = re.compile(r"(?:\[[^\[\]]*\]\s*,\s*)*\[[^\[\]]*\]")
_ELEM = re.compile(r"\[([^\[\]]*)\]")


def parse_chunk(text: str, limits: ChunkLimits = DEFAULT_LIMITS) -> np.ndarray:
    """Parse grammar-v1 chunk text into a K x 4 float64 array (cm, gripper in [0, 1]), clamped to ``limits``.

    Raises :class:`MalformedActionError` for anything that is not a non-empty list of 4-number lists (exponents,
    ``nan``/``inf``, extra text, too many elements, numbers too large to be finite included).
    """
    if not isinstance(text, str):
        raise MalformedActionError(f"action chunk must be text, got {type(text).__name__}")
    s = text.strip()
    if len(s) < 2 or s[0] != "[" or s[-1] != "]":
        raise MalformedActionError(f"action chunk must be a bracketed list, got {s[:80]!r}")
    inner = s[1:-1].strip()
    if not _ELEMS.fullmatch(inner):
        raise MalformedActionError(f"action chunk must be a list of [dx, dy, dz, g] lists, got {s[:80]!r}")
    rows = _ELEM.findall(inner)
    if len(rows) > limits.max_elements:
        raise MalformedActionError(f"action chunk has {len(rows)} elements (limit {limits.max_elements})")
    out = np.empty((len(rows), 4), dtype=np.float64)
    for i, row in enumerate(rows):
        fields = [f.strip() for f in row.split(",")]
        if len(fields) != 4:
            raise MalformedActionError(f"chunk element {i} must have 4 numbers [dx, dy, dz, g], got {row!r}")
        for j, f in enumerate(fields):
            if not _NUM.fullmatch(f):
                raise MalformedActionError(f"chunk element {i} field {j} is not a plain decimal number: {f!r}")
            v = float(f)
            if not math.isfinite(v):
                raise MalformedActionError(f"chunk element {i} field {j} is not finite: {f[:20]!r}")
            out[i, j] = v
    return clamp_chunk(out, limits)


def clamp_chunk(chunk_cm: np.ndarray, limits: ChunkLimits = DEFAULT_LIMITS) -> np.ndarray:
    """Clamp displacements to +-``max_abs_cm`` and the gripper to [0, 1] (input must be finite)."""
    out = np.array(chunk_cm, dtype=np.float64)
    out[:, :3] = np.clip(out[:, :3], -limits.max_abs_cm, limits.max_abs_cm)
    out[:, 3] = np.clip(out[:, 3], 0.0, 1.0)
    return out


# ------------------------------------------------------------------------------------------------ merging
def gripper_states(commands: Sequence[float], initial: float = 1.0) -> np.ndarray:
    """Simulator gripper commands (-1 open, +1 close, 0 hold) -> per-step states in the language (1 open, 0 closed)."""
    state = float(initial)
    out = np.empty(len(commands), dtype=np.float64)
    for t, c in enumerate(np.asarray(commands, dtype=np.float64).reshape(-1)):
        if c < 0:
            state = 1.0
        elif c > 0:
            state = 0.0
        out[t] = state
    return out


def state_to_command(g: float) -> float:
    """Language gripper state (1 open, 0 closed; >= 0.5 is open) -> simulator command (-1 open, +1 close)."""
    return -1.0 if g >= 0.5 else 1.0


def merge_deltas(deltas_m: np.ndarray, gripper: Sequence[float]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The paper's chunking rule. Consecutive per-step deltas (``T x 3`` metres) merge into one element until

    * one axis has moved at least 2.5 cm within the element with all its non-zero step components of one sign, or
    * the element's net displacement (Euclidean norm) is at least 5 cm,

    and an element also ends where the gripper state (``gripper``: per-step 1 open / 0 closed, see
    :func:`gripper_states`) changes, so each element has one gripper state. Trailing steps that meet neither
    threshold form the last element. Returns ``(K x 4 chunk in cm, [(start, end) step spans, end exclusive])``.
    """
    d = np.asarray(deltas_m, dtype=np.float64) * 100.0
    g = np.asarray(gripper, dtype=np.float64).reshape(-1)
    if d.ndim != 2 or d.shape[1] != 3:
        raise ValueError(f"deltas_m must be T x 3, got shape {d.shape}")
    if g.shape[0] != d.shape[0]:
        raise ValueError(f"gripper must have {d.shape[0]} values, got {g.shape[0]}")
    if not (np.isfinite(d).all() and np.isfinite(g).all()):
        raise ValueError("deltas_m and gripper must be finite")
    elems: list[list[float]] = []
    spans: list[tuple[int, int]] = []
    start, acc = 0, np.zeros(3)
    pos, neg = np.zeros(3, dtype=bool), np.zeros(3, dtype=bool)
    for t in range(d.shape[0]):
        step = d[t]
        acc += step
        pos |= step > ZERO_CM
        neg |= step < -ZERO_CM
        monotone = ~(pos & neg)
        axis_hit = bool((monotone & (np.abs(acc) >= AXIS_THRESHOLD_CM - 1e-9)).any())
        total_hit = float(np.linalg.norm(acc)) >= TOTAL_THRESHOLD_CM - 1e-9
        grip_change = t + 1 < d.shape[0] and g[t + 1] != g[t]
        if axis_hit or total_hit or grip_change or t + 1 == d.shape[0]:
            elems.append([*acc, 1.0 if g[t] >= 0.5 else 0.0])
            spans.append((start, t + 1))
            start, acc = t + 1, np.zeros(3)
            pos[:], neg[:] = False, False
    return np.asarray(elems, dtype=np.float64).reshape(-1, 4), spans


def encode_chunk(deltas_m: np.ndarray, gripper_cmd: Sequence[float], initial_gripper: float = 1.0) -> str:
    """Per-step deltas (metres) + simulator gripper commands -> grammar-v1 chunk text (merged, cm)."""
    chunk, _ = merge_deltas(deltas_m, gripper_states(gripper_cmd, initial_gripper))
    return format_chunk(chunk)


# ------------------------------------------------------------------------------------------------ motion level
_DIR = "(?:slightly )?(?:forward|backward|left|right|up|down)"
_MOTION = re.compile(rf"(?:stay still|move {_DIR}(?: and {_DIR})*)(?:, then (?:close|open) the gripper)?"
                     r"|(?:close|open) the gripper")


def motion_plan(chunk_cm: np.ndarray, previous_gripper: float = 1.0, still_cm: float = 0.5,
                slight: float = 0.5) -> str:
    """The direction-only motion phrase of a chunk: axes whose net displacement is at least ``slight`` of the
    largest one are named plainly, smaller ones (but >= ``still_cm``) get "slightly"; a gripper change is named."""
    arr = np.asarray(chunk_cm, dtype=np.float64).reshape(-1, 4)
    net = arr[:, :3].sum(axis=0)
    big = float(np.abs(net).max(initial=0.0))
    words = []
    if big >= still_cm:
        for a, (plus, minus) in enumerate(AXES):
            v = float(net[a])
            if abs(v) < still_cm:
                continue
            word = plus if v > 0 else minus
            words.append(word if abs(v) >= slight * big else f"slightly {word}")
    grip = ""
    g_end = float(arr[-1, 3]) if len(arr) else previous_gripper
    if (g_end >= 0.5) != (previous_gripper >= 0.5):
        grip = "open the gripper" if g_end >= 0.5 else "close the gripper"
    if words:
        move = "move " + " and ".join(words)
        return f"{move}, then {grip}" if grip else move
    return grip or "stay still"


def check_motion(text: str) -> str:
    """Validate a generated motion plan (grammar v1); returns it stripped, MalformedActionError otherwise."""
    s = text.strip() if isinstance(text, str) else None
    if not s or not _MOTION.fullmatch(s):
        raise MalformedActionError(f"motion plan does not follow the grammar: {str(text)[:80]!r}")
    named = re.findall(r"forward|backward|left|right|up|down", s.split(", then")[0])
    axes = [next(i for i, pair in enumerate(AXES) if w in pair) for w in named]
    if len(axes) != len(set(axes)):
        raise MalformedActionError(f"motion plan names an axis twice: {s!r}")
    return s


# ------------------------------------------------------------------------------------------------ subtask level
_SUBTASK = re.compile(r"[a-z0-9][a-z0-9' -]*")


def format_subtasks(subtasks: Sequence[str]) -> str:
    """Join subtasks as ``a; b; c`` (each validated)."""
    items = [_check_subtask(s, i) for i, s in enumerate(subtasks)]
    if not 1 <= len(items) <= MAX_SUBTASKS:
        raise ValueError(f"need 1..{MAX_SUBTASKS} subtasks, got {len(items)}")
    return "; ".join(items)


def _check_subtask(s: str, i: int) -> str:
    t = " ".join(str(s).lower().split())
    if not t or len(t) > 80 or not _SUBTASK.fullmatch(t):
        raise MalformedActionError(f"subtask {i} is not lowercase words (<= 80 characters): {str(s)[:80]!r}")
    return t


def parse_subtasks(text: str) -> list[str]:
    """Parse a generated subtask list; MalformedActionError when empty, too long or not plain words."""
    if not isinstance(text, str) or not text.strip():
        raise MalformedActionError("subtask list is empty")
    items = [p for p in (x.strip() for x in text.strip().rstrip(";").split(";"))]
    if len(items) > MAX_SUBTASKS:
        raise MalformedActionError(f"subtask list has {len(items)} items (limit {MAX_SUBTASKS})")
    return [_check_subtask(s, i) for i, s in enumerate(items)]
