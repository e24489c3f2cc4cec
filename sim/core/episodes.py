"""VLN-CE episode files (R2R-CE ``{split}/{split}.json.gz`` + ``{split}_gt.json.gz``; RxR-CE read support).

Layout follows ``shared/methods/vln-format-and-metrics.md`` section 1. Positions are [x, y, z] in the
Habitat world frame (y up, metres); rotations are unit quaternions [qx, qy, qz, qw] (scalar last).
Every problem with a file surfaces as :class:`EpisodeFormatError` naming the file and the problem. The instruction
vocabulary (``split_words``, ``build_vocab``, ``tokenize``) lives in :mod:`sim.core.vocab` and is re-exported here.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.core.io import write_bytes
from sim.core.vocab import build_vocab, split_words, tokenize

logger = logging.getLogger(__name__)

__all__ = [
    "Episode",
    "EpisodeFormatError",
    "Goal",
    "GroundTruth",
    "build_vocab",
    "load_split",
    "load_vocab",
    "save_split",
    "split_words",
    "tokenize",
]

_EPISODE_KEYS = ("episode_id", "trajectory_id", "scene_id", "start_position", "start_rotation", "info", "goals",
                 "instruction", "reference_path")


class EpisodeFormatError(ValueError):
    """An episode file or record is malformed (message names the file and the problem)."""


# ------------------------------------------------------------------------------------ value checks
def _real(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise EpisodeFormatError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v):
        raise EpisodeFormatError(f"{name} must be finite, got {v}")
    return v


def _int(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise EpisodeFormatError(f"{name} must be an int, got {type(value).__name__}")
    return int(value)


def _vec(value: Any, name: str, n: int) -> list[float]:
    if not isinstance(value, (list, tuple, np.ndarray)) or len(value) != n:
        raise EpisodeFormatError(f"{name} must be a list of {n} numbers, got {value!r}")
    return [_real(v, f"{name}[{i}]") for i, v in enumerate(value)]


def _points(value: Any, name: str) -> list[list[float]]:
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise EpisodeFormatError(f"{name} must be a list of [x, y, z], got {type(value).__name__}")
    return [_vec(p, f"{name}[{i}]", 3) for i, p in enumerate(value)]


def _actions(value: Any, name: str) -> list[int]:
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise EpisodeFormatError(f"{name} must be a list of ints, got {type(value).__name__}")
    out = [_int(a, f"{name}[{i}]") for i, a in enumerate(value)]
    bad = [a for a in out if not 0 <= a <= 3]
    if bad:
        raise EpisodeFormatError(f"{name} has actions outside 0..3 (STOP, FORWARD, LEFT, RIGHT): {bad[:5]}")
    return out


# -------------------------------------------------------------------------------------- dataclasses
@dataclass
class Goal:
    """A navigation goal: ``position`` [x, y, z] and success ``radius`` (m)."""

    position: list[float]
    radius: float = 3.0

    def __post_init__(self) -> None:
        self.position = _vec(self.position, "goal.position", 3)
        self.radius = _real(self.radius, "goal.radius")
        if self.radius <= 0:
            raise EpisodeFormatError(f"goal.radius must be > 0, got {self.radius}")


@dataclass
class Episode:
    """One VLN-CE episode. ``info`` holds extra keys (e.g. ``condition``, RxR ``role``/``language``)."""

    episode_id: int | str
    trajectory_id: int
    scene_id: str
    start_position: list[float]
    start_rotation: list[float]
    goals: list[Goal]
    instruction_text: str
    reference_path: list[list[float]]
    geodesic_distance: float
    instruction_tokens: list[int] | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.episode_id, (bool, np.bool_)) or not isinstance(self.episode_id, (int, np.integer, str)):
            raise EpisodeFormatError(f"episode_id must be an int or str, got {type(self.episode_id).__name__}")
        if not isinstance(self.episode_id, str):
            self.episode_id = int(self.episode_id)
        self.trajectory_id = _int(self.trajectory_id, "trajectory_id")
        if not isinstance(self.scene_id, str) or not self.scene_id:
            raise EpisodeFormatError(f"scene_id must be a non-empty str, got {self.scene_id!r}")
        self.start_position = _vec(self.start_position, "start_position", 3)
        self.start_rotation = _vec(self.start_rotation, "start_rotation", 4)
        norm = math.sqrt(sum(q * q for q in self.start_rotation))
        if abs(norm - 1.0) > 1e-3:
            raise EpisodeFormatError(f"start_rotation must be a unit quaternion [qx, qy, qz, qw], norm is {norm:.6f}")
        if not isinstance(self.goals, (list, tuple)) or not self.goals:
            raise EpisodeFormatError("goals must be a non-empty list of Goal")
        if not all(isinstance(g, Goal) for g in self.goals):
            raise EpisodeFormatError("goals must contain Goal objects")
        self.goals = list(self.goals)
        if not isinstance(self.instruction_text, str) or not self.instruction_text.strip():
            raise EpisodeFormatError("instruction_text must be a non-empty str")
        self.reference_path = _points(self.reference_path, "reference_path")
        self.geodesic_distance = _real(self.geodesic_distance, "geodesic_distance")
        if self.geodesic_distance < 0:
            raise EpisodeFormatError(f"geodesic_distance must be >= 0, got {self.geodesic_distance}")
        if self.instruction_tokens is not None:
            if not isinstance(self.instruction_tokens, (list, tuple, np.ndarray)):
                raise EpisodeFormatError("instruction_tokens must be a list of ints or None")
            toks = list(self.instruction_tokens)
            if not all(type(t) is int for t in toks):  # fast path for JSON ints; slow path names the bad one
                toks = [_int(t, f"instruction_tokens[{i}]") for i, t in enumerate(toks)]
            self.instruction_tokens = toks
            if toks and min(toks) < 0:
                raise EpisodeFormatError("instruction_tokens must be >= 0")
        if not isinstance(self.info, dict) or not all(isinstance(k, str) for k in self.info):
            raise EpisodeFormatError("info must be a dict with str keys")
        if "geodesic_distance" in self.info:
            raise EpisodeFormatError("info must not contain 'geodesic_distance'; use the geodesic_distance field")


@dataclass
class GroundTruth:
    """Shortest-path-follower ground truth: ``locations`` (R for nDTW), ``actions`` (0..3), ``forward_steps``."""

    locations: list[list[float]]
    actions: list[int]
    forward_steps: int | None = None

    def __post_init__(self) -> None:
        self.locations = _points(self.locations, "locations")
        if not self.locations:
            raise EpisodeFormatError("locations must not be empty")
        self.actions = _actions(self.actions, "actions")
        if self.forward_steps is not None:
            self.forward_steps = _int(self.forward_steps, "forward_steps")
            if self.forward_steps < 0:
                raise EpisodeFormatError(f"forward_steps must be >= 0, got {self.forward_steps}")


# --------------------------------------------------------------------------------------------- save
def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _write_gz_json(path: Path, obj: Any) -> None:
    data = json.dumps(obj, default=_json_default).encode("utf-8")
    write_bytes(path, gzip.compress(data, mtime=0))


def save_split(
    out_dir: str | os.PathLike[str],
    split: str,
    episodes: Sequence[Episode],
    ground_truth: dict[str, GroundTruth] | None = None,
    *,
    vocab: dict[str, Any] | None = None,
    pad_to: int | None = None,
) -> Path:
    """Write ``{out_dir}/{split}/{split}.json.gz`` (and ``{split}_gt.json.gz`` if ``ground_truth``).

    ``vocab`` defaults to :func:`build_vocab` over the instructions; episodes without
    ``instruction_tokens`` are tokenised with it (padded to ``pad_to`` if given). A stale gt file is
    removed when ``ground_truth`` is None. Returns the episodes file path.
    """
    if not split or "/" in split or os.sep in split:
        raise ValueError(f"invalid split name {split!r}")
    ids = [str(e.episode_id) for e in episodes]
    if _duplicates(ids):
        raise EpisodeFormatError(f"duplicate episode_id(s): {_duplicates(ids)[:5]}")
    if ground_truth is not None:
        bad = [k for k, g in ground_truth.items() if not isinstance(g, GroundTruth)]
        if bad:
            raise EpisodeFormatError(f"ground_truth values must be GroundTruth (keys {bad[:5]})")
        if set(ground_truth) != set(ids):
            raise EpisodeFormatError(_mismatch_msg("ground_truth", set(ids), set(ground_truth)))
    if vocab is None:
        vocab = build_vocab(e.instruction_text for e in episodes)
    records = []
    for ep in episodes:
        tokens = ep.instruction_tokens
        if tokens is None:
            tokens = tokenize(ep.instruction_text, vocab, pad_to)
        elif tokens and max(tokens) >= int(vocab["num_vocab"]):
            raise EpisodeFormatError(f"episode {ep.episode_id!r}: token id {max(tokens)} is outside the vocab "
                                     f"(size {vocab['num_vocab']}); pass the vocab the tokens were made with")
        records.append({
            "episode_id": ep.episode_id, "trajectory_id": ep.trajectory_id, "scene_id": ep.scene_id,
            "start_position": ep.start_position, "start_rotation": ep.start_rotation,
            "info": {"geodesic_distance": ep.geodesic_distance, **ep.info},
            "goals": [{"position": g.position, "radius": g.radius} for g in ep.goals],
            "instruction": {"instruction_text": ep.instruction_text, "instruction_tokens": list(tokens)},
            "reference_path": ep.reference_path,
        })
    split_dir = Path(out_dir) / split
    split_dir.mkdir(parents=True, exist_ok=True)
    ep_path = split_dir / f"{split}.json.gz"
    gt_path = split_dir / f"{split}_gt.json.gz"
    _write_gz_json(ep_path, {"episodes": records, "instruction_vocab": vocab})
    if ground_truth is not None:
        _write_gz_json(gt_path, {k: {"locations": g.locations, "actions": g.actions, "forward_steps": g.forward_steps}
                                 for k, g in ground_truth.items()})
    elif gt_path.exists():
        logger.warning("removing stale ground-truth file %s (no ground_truth given)", gt_path)
        gt_path.unlink()
    logger.info("wrote %d episodes to %s", len(records), ep_path)
    return ep_path


# --------------------------------------------------------------------------------------------- load
def _resolve(path: str | os.PathLike[str], split: str | None) -> Path:
    p = Path(path)
    if p.is_file():
        if not p.name.endswith(".json.gz"):
            raise EpisodeFormatError(f"{p}: expected a .json.gz episodes file")
        if p.name.endswith("_gt.json.gz"):
            raise EpisodeFormatError(f"{p}: this is a ground-truth file; pass the episodes file or its directory")
        return p
    if p.is_dir():
        cands = [p / split / f"{split}.json.gz", p / f"{split}.json.gz"] if split else [p / f"{p.name}.json.gz"]
        for c in cands:
            if c.is_file():
                return c
        if not split:  # a dataset root holding exactly one split
            found = sorted(d for d in p.iterdir() if (d / f"{d.name}.json.gz").is_file())
            if len(found) == 1:
                return found[0] / f"{found[0].name}.json.gz"
            if found:
                raise EpisodeFormatError(f"{p}: several splits {[d.name for d in found]}; name one (--split)")
        raise FileNotFoundError(f"no episodes file for split {split or p.name!r} under {p}; tried "
                                + ", ".join(str(c) for c in cands))
    raise FileNotFoundError(f"episode path does not exist: {p}")


def _read_gz_json(path: Path) -> Any:
    try:
        with gzip.open(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise EpisodeFormatError(f"{path}: not a readable gzip file ({exc})") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise EpisodeFormatError(f"{path}: invalid JSON ({exc})") from None


def _duplicates(ids: list[str]) -> list[str]:
    return sorted(k for k, n in Counter(ids).items() if n > 1)


def _mismatch_msg(where: str, ids: set[str], gt_keys: set[str]) -> str:
    missing, extra = sorted(ids - gt_keys), sorted(gt_keys - ids)
    return (f"{where}: ground-truth keys do not match episode ids ({len(missing)} episodes without gt, e.g. "
            f"{missing[:5]}; {len(extra)} gt keys without an episode, e.g. {extra[:5]})")


def _req(d: dict[str, Any], key: str, ctx: str, types: type | tuple[type, ...]) -> Any:
    if key not in d:
        raise EpisodeFormatError(f"{ctx}: missing field {key!r}")
    if not isinstance(d[key], types):
        raise EpisodeFormatError(f"{ctx}: field {key!r} has wrong type {type(d[key]).__name__}")
    return d[key]


def _parse_episode(rec: Any, ctx: str) -> Episode:
    if not isinstance(rec, dict):
        raise EpisodeFormatError(f"{ctx}: expected an object, got {type(rec).__name__}")
    if "episode_id" in rec:
        ctx = f"{ctx} (episode_id={rec['episode_id']!r})"
    for key in _EPISODE_KEYS:
        _req(rec, key, ctx, object)
    info = dict(_req(rec, "info", ctx, dict))
    if "geodesic_distance" not in info:
        raise EpisodeFormatError(f"{ctx}: missing field 'info.geodesic_distance'")
    geo = info.pop("geodesic_distance")
    instr = _req(rec, "instruction", ctx, dict)
    text = _req(instr, "instruction_text", f"{ctx} instruction", str)
    tokens = instr.get("instruction_tokens")
    for key, val in instr.items():  # RxR: instruction_id, language, annotator_id, edit_distance, timed_instruction
        if key in ("instruction_text", "instruction_tokens"):
            continue
        if key in info and info[key] != val:
            raise EpisodeFormatError(f"{ctx}: instruction.{key} conflicts with info.{key}")
        info[key] = val
    goals_raw = _req(rec, "goals", ctx, list)
    try:
        goals = []
        for i, g in enumerate(goals_raw):
            if not isinstance(g, dict) or "position" not in g:
                raise EpisodeFormatError(f"goals[{i}] must be an object with 'position'")
            goals.append(Goal(position=g["position"], radius=g.get("radius", 3.0)))
        return Episode(episode_id=rec["episode_id"], trajectory_id=rec["trajectory_id"], scene_id=rec["scene_id"],
                       start_position=rec["start_position"], start_rotation=rec["start_rotation"], goals=goals,
                       instruction_text=text, reference_path=rec["reference_path"], geodesic_distance=geo,
                       instruction_tokens=tokens, info=info)
    except EpisodeFormatError as exc:
        raise EpisodeFormatError(f"{ctx}: {exc}") from None


def _parse_gt(obj: Any, path: Path) -> dict[str, GroundTruth]:
    if not isinstance(obj, dict):
        raise EpisodeFormatError(f"{path}: top level must be an object keyed by episode id, got {type(obj).__name__}")
    out: dict[str, GroundTruth] = {}
    for key, val in obj.items():
        ctx = f"{path}: gt {key!r}"
        if not isinstance(val, dict):
            raise EpisodeFormatError(f"{ctx}: expected an object, got {type(val).__name__}")
        locations, actions = _req(val, "locations", ctx, list), _req(val, "actions", ctx, list)
        try:
            out[key] = GroundTruth(locations=locations, actions=actions, forward_steps=val.get("forward_steps"))
        except EpisodeFormatError as exc:
            raise EpisodeFormatError(f"{ctx}: {exc}") from None
    return out


def _read_episodes_file(path: str | os.PathLike[str], split: str | None) -> tuple[Path, dict[str, Any]]:
    ep_path = _resolve(path, split)
    data = _read_gz_json(ep_path)
    if not isinstance(data, dict):
        raise EpisodeFormatError(f"{ep_path}: top level must be an object, got {type(data).__name__}")
    if not isinstance(data.get("episodes"), list):
        raise EpisodeFormatError(f"{ep_path}: missing or non-list top-level field 'episodes'")
    return ep_path, data


def load_split(path: str | os.PathLike[str], split: str | None = None) -> tuple[list[Episode], dict[str, GroundTruth]]:
    """Load episodes (and ground truth, if ``<stem>_gt.json.gz`` exists next to them, else ``{}``).

    ``path`` may be the split directory, its parent together with ``split``, or the ``.json.gz`` file.
    Reads R2R-CE and RxR-CE files; RxR's extra instruction fields go into ``Episode.info``.
    """
    ep_path, data = _read_episodes_file(path, split)
    episodes = [_parse_episode(rec, f"{ep_path}: episode {i}") for i, rec in enumerate(data["episodes"])]
    ids = [str(e.episode_id) for e in episodes]
    if _duplicates(ids):
        raise EpisodeFormatError(f"{ep_path}: duplicate episode_id(s): {_duplicates(ids)[:5]}")
    gt_path = ep_path.with_name(ep_path.name[: -len(".json.gz")] + "_gt.json.gz")
    gt: dict[str, GroundTruth] = {}
    if gt_path.is_file():
        gt = _parse_gt(_read_gz_json(gt_path), gt_path)
        if set(gt) != set(ids):
            raise EpisodeFormatError(_mismatch_msg(str(gt_path), set(ids), set(gt)))
    logger.info("loaded %d episodes from %s (%s)", len(episodes), ep_path, "with gt" if gt else "no gt")
    return episodes, gt


def load_vocab(path: str | os.PathLike[str], split: str | None = None) -> dict[str, Any]:
    """The file's ``instruction_vocab`` (same path rules as :func:`load_split`)."""
    ep_path, data = _read_episodes_file(path, split)
    vocab = data.get("instruction_vocab")
    if not isinstance(vocab, dict) or not isinstance(vocab.get("word2idx_dict", vocab.get("stoi")), dict):
        raise EpisodeFormatError(f"{ep_path}: missing or malformed 'instruction_vocab'")
    return vocab
