"""VLN episode metrics (NE, SR, OSR, SPL, TL, nDTW, SDTW, steps) as defined by VLN-CE / habitat.

Pure numpy. Positions are ``(N, 3)`` arrays in the Habitat world frame (metres); distances to the goal
are geodesic (``d(p)`` in the method notes). ``+inf`` is accepted as a geodesic distance (goal
unreachable from that position); NaN never is. See ``shared/methods/vln-format-and-metrics.md`` section 2.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.core.types import SUCCESS_DISTANCE_M

logger = logging.getLogger(__name__)

__all__ = [
    "METRIC_KEYS",
    "aggregate",
    "dtw",
    "episode_metrics",
    "navigation_error",
    "ndtw",
    "oracle_success",
    "path_length",
    "remove_consecutive_duplicates",
    "sdtw",
    "spl",
    "success",
]

#: Keys of the dict returned by :func:`episode_metrics`.
METRIC_KEYS: tuple[str, ...] = ("ne", "sr", "osr", "spl", "ndtw", "sdtw", "tl", "steps")


# ----------------------------------------------------------------------------------------- validation
def _points(positions: Any, name: str) -> np.ndarray:
    """Return ``positions`` as a finite float64 ``(N, 3)`` array with N >= 1, else raise ValueError."""
    try:
        arr = np.asarray(positions, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an (N, 3) array of numbers: {exc}") from None
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"{name} must have shape (N, 3), got {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{name} is empty; need at least one position")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def _distances(values: Any, name: str) -> np.ndarray:
    """Return geodesic distances as a 1-D float64 array (non-empty, >= 0, no NaN; +inf allowed)."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numbers: {exc}") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of distances, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} contains NaN")
    if np.any(arr < 0):
        raise ValueError(f"{name} contains negative distances")
    return arr


def _scalar(value: Any, name: str, *, allow_inf: bool = False) -> float:
    """Return a non-negative float (NaN rejected; +inf only if ``allow_inf``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a real number, got {type(value).__name__}")  # noqa: TRY004
    v = float(value)
    if np.isnan(v) or (np.isinf(v) and not allow_inf):
        raise ValueError(f"{name} must be finite, got {v}")
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


def _threshold(threshold: float) -> float:
    t = _scalar(threshold, "threshold")
    if t == 0:
        raise ValueError("threshold must be > 0")
    return t


# -------------------------------------------------------------------------------------------- metrics
def path_length(positions: Any) -> float:
    """TL: sum of Euclidean step lengths ``sum_t ||p_t - p_{t-1}||`` (0 for a single position)."""
    p = _points(positions, "positions")
    return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum())


def navigation_error(final_geodesic: float) -> float:
    """NE: geodesic distance from the final position to the goal, ``d(p_T)`` (validated passthrough)."""
    return _scalar(final_geodesic, "final_geodesic", allow_inf=True)


def success(stopped: bool, final_geodesic: float, threshold: float = SUCCESS_DISTANCE_M) -> float:
    """SR term: 1.0 iff STOP was called and ``d(p_T) < threshold`` (strict); running out of steps fails."""
    d = _scalar(final_geodesic, "final_geodesic", allow_inf=True)
    return 1.0 if bool(stopped) and d < _threshold(threshold) else 0.0


def oracle_success(geodesic_distances: Any, threshold: float = SUCCESS_DISTANCE_M) -> float:
    """OSR term: 1.0 iff ``min_t d(p_t) < threshold`` over every visited position (strict)."""
    d = _distances(geodesic_distances, "geodesic_distances")
    return 1.0 if float(d.min()) < _threshold(threshold) else 0.0


def spl(success: float, shortest_path_length: float, path_length: float) -> float:
    """SPL term ``S * l / max(P, l)``; when ``l == P == 0`` (start on the goal, no motion) it is ``S``."""
    s = _scalar(success, "success")
    if s > 1:
        raise ValueError(f"success must be in [0, 1], got {s}")
    ell = _scalar(shortest_path_length, "shortest_path_length")
    p = _scalar(path_length, "path_length")
    denom = max(p, ell)
    return s if denom == 0 else s * ell / denom


def remove_consecutive_duplicates(positions: Any) -> np.ndarray:
    """Drop positions exactly equal to their predecessor (as VLN-CE's nDTW measure does)."""
    p = _points(positions, "positions")
    keep = np.ones(len(p), dtype=bool)
    keep[1:] = np.any(p[1:] != p[:-1], axis=1)
    return p[keep]


def dtw(path: Any, reference: Any) -> float:
    """Exact DTW distance between two ``(N, 3)`` point sequences with Euclidean point cost.

    ``D[i, j] = c(i, j) + min(D[i-1, j], D[i, j-1], D[i-1, j-1])``; O(|P|·|R|) time and memory,
    vectorised over anti-diagonals.
    """
    p = _points(path, "path")
    r = _points(reference, "reference")
    n, m = len(p), len(r)
    cost = np.linalg.norm(p[:, None, :] - r[None, :, :], axis=-1)
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for k in range(2, n + m + 1):  # k = i + j with 1-based i, j
        i = np.arange(max(1, k - m), min(n, k - 1) + 1)
        j = k - i
        best = np.minimum(np.minimum(acc[i - 1, j], acc[i, j - 1]), acc[i - 1, j - 1])
        acc[i, j] = cost[i - 1, j - 1] + best
    return float(acc[n, m])


def ndtw(positions: Any, reference: Any, threshold: float = SUCCESS_DISTANCE_M) -> float:
    """nDTW = ``exp(-DTW(P, R) / (len(R) * d_th))``; consecutive duplicates are removed from P first."""
    p = remove_consecutive_duplicates(positions)
    r = _points(reference, "reference")
    return float(np.exp(-dtw(p, r) / (len(r) * _threshold(threshold))))


def sdtw(success: float, ndtw_value: float) -> float:
    """SDTW = ``S * nDTW``."""
    s = _scalar(success, "success")
    v = _scalar(ndtw_value, "ndtw_value")
    if s > 1 or v > 1:
        raise ValueError(f"success and ndtw_value must be in [0, 1], got {s}, {v}")
    return s * v


def episode_metrics(
    positions: Any,
    geodesic_to_goal_per_position: Any,
    stopped: bool,
    shortest_path_length: float,
    reference_locations: Any,
    steps: int,
    threshold: float = SUCCESS_DISTANCE_M,
) -> dict[str, float]:
    """All per-episode metrics.

    Args:
        positions: ``(T+1, 3)`` agent positions p_0..p_T (p_T is the final one).
        geodesic_to_goal_per_position: ``d(p_t)`` for each of ``positions`` (same length).
        stopped: whether the agent called STOP (False when the step limit ended the episode).
        shortest_path_length: start->goal geodesic ``l`` (``info.geodesic_distance``).
        reference_locations: ground-truth ``locations`` used as R for nDTW.
        steps: number of actions taken, including STOP.

    Returns:
        ``{"ne", "sr", "osr", "spl", "ndtw", "sdtw", "tl", "steps"}`` (floats; ``steps`` an int).
    """
    p = _points(positions, "positions")
    d = _distances(geodesic_to_goal_per_position, "geodesic_to_goal_per_position")
    if len(d) != len(p):
        raise ValueError(f"geodesic_to_goal_per_position has {len(d)} entries but positions has {len(p)}")
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    if stopped and steps == 0:
        raise ValueError("stopped=True needs steps >= 1 (STOP itself counts as a step)")
    sr = success(stopped, float(d[-1]), threshold)
    tl = path_length(p)
    nd = ndtw(p, reference_locations, threshold)
    return {
        "ne": navigation_error(float(d[-1])),
        "sr": sr,
        "osr": oracle_success(d, threshold),
        "spl": spl(sr, shortest_path_length, tl),
        "ndtw": nd,
        "sdtw": sdtw(sr, nd),
        "tl": tl,
        "steps": int(steps),
    }


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating, np.bool_, bool))


def aggregate(results: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean of every numeric key over episodes, plus ``episodes`` (the count).

    Numeric keys are taken from the first result and must be numeric in every result; non-numeric
    values (e.g. an ``episode_id`` string) are ignored. An empty list raises ValueError.
    """
    if len(results) == 0:
        raise ValueError("aggregate() needs at least one episode result")
    keys = [k for k, v in results[0].items() if k != "episodes" and _is_number(v)]
    if not keys:
        raise ValueError("the first episode result has no numeric metrics")
    out: dict[str, float] = {}
    for key in keys:
        vals = []
        for i, res in enumerate(results):
            if key not in res:
                raise ValueError(f"episode result {i} is missing metric {key!r}")
            if not _is_number(res[key]):
                raise ValueError(f"episode result {i}: metric {key!r} is not a number: {res[key]!r}")
            vals.append(float(res[key]))
        arr = np.asarray(vals, dtype=np.float64)
        if np.any(np.isnan(arr)):
            logger.warning("metric %r has NaN values; its mean is NaN", key)
        out[key] = float(arr.mean())
    out["episodes"] = len(results)
    return out
