"""Helpers shared by the config dataclasses of ``sim`` (validation and loading from plain dicts)."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def check_ranges(obj: Any, ranges: dict[str, tuple[float, float]]) -> None:
    """Each named field must be a finite number within its inclusive ``(lo, hi)`` range."""
    for name, (lo, hi) in ranges.items():
        v = getattr(obj, name)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {v!r}")


def config_from_dict(cls: type[T], d: dict[str, Any]) -> T:
    """Build config ``cls`` from a dict (YAML, ROS parameters); unknown keys are an error naming the known ones."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {unknown}; known: {sorted(known)}")
    return cls(**d)
