"""Helpers shared by the config dataclasses of ``sim``, ``agents`` and ``training`` (validation and loading from
plain dicts)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def check_ranges(obj: Any, ranges: dict[str, tuple[float, float]]) -> None:
    """Each named field must be a finite number within its inclusive ``(lo, hi)`` range."""
    for name, (lo, hi) in ranges.items():
        v = getattr(obj, name)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {v!r}")


def config_from_dict(cls: type[T], d: dict[str, Any]) -> T:
    """Build config ``cls`` from a dict (YAML, JSON, ROS parameters); a non-mapping or unknown keys are a
    ``ValueError`` naming the known keys."""
    if not isinstance(d, dict):
        raise ValueError(f"a {cls.__name__} must be a mapping, got {type(d).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {unknown}; known: {sorted(known)}")
    return cls(**d)


def check_ints(obj: Any, ranges: dict[str, tuple[int, int]], owner: str = "") -> None:
    """Each named field must be an ``int`` (not a bool) within its inclusive range; ``owner`` prefixes the name."""
    for name, (lo, hi) in ranges.items():
        v = getattr(obj, name)
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"{owner}{name} must be an int in [{lo}, {hi}], got {v!r}")


def check_numbers(obj: Any, ranges: dict[str, tuple[float, float]], owner: str = "") -> None:
    """Each named field must be a finite int or float (not a bool) within its inclusive range."""
    for name, (lo, hi) in ranges.items():
        v = getattr(obj, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"{owner}{name} must be a number in [{lo}, {hi}], got {v!r}")


EXTENDS = "extends"  # a config file's key naming the file it starts from


def merge_mappings(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``top``: mappings on both sides merge key by key, any other value of ``top`` (a list,
    a number, null) replaces ``base``'s."""
    out = dict(base)
    for k, v in top.items():
        out[k] = merge_mappings(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_yaml_mapping(path: str | Path, what: str = "config", _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The top-level mapping of the YAML file ``path``; FileNotFoundError / ValueError naming ``what``.

    ``extends: other.yaml`` (relative to the file) starts from that file's mapping (itself read this way) and
    applies this file's keys on top (:func:`merge_mappings`): a variant names only what it changes."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: {p}" + (f" (extended by {_chain[-1]})" if _chain else ""))
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{p}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{p}: top level must be a mapping of {what} fields")
    if EXTENDS not in data:
        return data
    parent = data.pop(EXTENDS)
    if not isinstance(parent, str) or not parent.strip():
        raise ValueError(f"{p}: {EXTENDS} must be the path of a YAML file (relative to {p.parent}), got {parent!r}")
    chain = (*_chain, p.resolve())
    target = (p.parent / parent).resolve()
    if target in chain:
        raise ValueError(f"{p}: {EXTENDS} makes a cycle: {' -> '.join(str(c) for c in (*chain, target))}")
    return merge_mappings(read_yaml_mapping(target, what, chain), data)


def differing_keys(a: Mapping[str, Any], b: Mapping[str, Any], ignore: Iterable[str] = (),
                   shared_only: bool = False) -> list[str]:
    """The sorted keys whose values differ between two settings mappings (a key one side lacks differs, unless
    ``shared_only``: then only keys both have are compared, so settings added later do not refuse older records)."""
    keys = set(a) & set(b) if shared_only else set(a) | set(b)
    skip = set(ignore)
    return sorted(k for k in keys if k not in skip and a.get(k) != b.get(k))
