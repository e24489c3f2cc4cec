"""Hand-computed checks for sim.metrics (VLN-CE metric definitions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim import metrics as m


def _line(xs: list[float], z: float = 0.0) -> np.ndarray:
    return np.array([[x, 0.0, z] for x in xs], dtype=np.float64)


def _naive_dtw(p: np.ndarray, r: np.ndarray) -> float:
    acc = np.full((len(p) + 1, len(r) + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, len(p) + 1):
        for j in range(1, len(r) + 1):
            c = float(np.linalg.norm(p[i - 1] - r[j - 1]))
            acc[i, j] = c + min(acc[i - 1, j], acc[i, j - 1], acc[i - 1, j - 1])
    return float(acc[-1, -1])


def test_path_length_straight_and_diagonal() -> None:
    assert m.path_length(_line([0, 1, 3])) == pytest.approx(3.0)
    assert m.path_length([[0, 0, 0], [3, 0, 4]]) == pytest.approx(5.0)
    assert m.path_length([[1, 2, 3]]) == 0.0


def test_success_is_strict_and_needs_stop() -> None:
    assert m.success(True, 2.99) == 1.0
    assert m.success(True, 3.0) == 0.0  # strict <
    assert m.success(False, 0.5) == 0.0  # not stopped -> failure
    assert m.success(True, 1.5, threshold=1.0) == 0.0


def test_oracle_success_strict() -> None:
    assert m.oracle_success([5.0, 2.99, 6.0]) == 1.0
    assert m.oracle_success([3.0, 4.0]) == 0.0
    assert m.oracle_success([math.inf, 1.0]) == 1.0


def test_spl_cases() -> None:
    assert m.spl(1.0, 5.0, 10.0) == pytest.approx(0.5)  # path twice the geodesic
    assert m.spl(1.0, 5.0, 4.0) == pytest.approx(1.0)  # shorter than geodesic -> capped at 1
    assert m.spl(0.0, 5.0, 5.0) == 0.0
    assert m.spl(1.0, 0.0, 0.0) == 1.0  # start on goal, no motion
    assert m.spl(1.0, 0.0, 2.0) == 0.0


def test_dtw_known_values_and_matches_naive() -> None:
    assert m.dtw(_line([0]), _line([0, 1, 2])) == pytest.approx(3.0)  # 0 + 1 + 2
    assert m.dtw(_line([0, 1, 2]), _line([0, 1, 2])) == 0.0
    rng = np.random.default_rng(0)
    for n, k in [(1, 1), (4, 7), (9, 3), (12, 12)]:
        p, r = rng.normal(size=(n, 3)), rng.normal(size=(k, 3))
        assert m.dtw(p, r) == pytest.approx(_naive_dtw(p, r), rel=1e-12)


def test_ndtw_identical_and_shifted() -> None:
    ref = _line([0, 1, 2])
    assert m.ndtw(ref, ref) == pytest.approx(1.0)
    # each agent point is 1 m beside its reference point: DTW = 3, nDTW = exp(-3 / (3 * 3))
    assert m.ndtw(_line([0, 1, 2], z=1.0), ref) == pytest.approx(math.exp(-1.0 / 3.0))
    # normalised by len(R), not len(P): one point at the start, DTW = 0 + 1 + 2 = 3
    assert m.ndtw(_line([0]), ref) == pytest.approx(math.exp(-3.0 / (3 * 3.0)))


def test_ndtw_removes_consecutive_duplicates() -> None:
    ref = _line([0, 1, 2])
    dup = _line([0, 0, 0, 1, 1, 2], z=1.0)
    assert m.dtw(dup, ref) == pytest.approx(6.0)  # without removal every duplicate costs 1 m
    assert m.ndtw(dup, ref) == pytest.approx(math.exp(-1.0 / 3.0))
    assert len(m.remove_consecutive_duplicates(dup)) == 3
    # a revisit that is not consecutive is kept
    assert len(m.remove_consecutive_duplicates(_line([0, 1, 0]))) == 3


def test_sdtw() -> None:
    assert m.sdtw(1.0, 0.7) == pytest.approx(0.7)
    assert m.sdtw(0.0, 0.7) == 0.0


def test_episode_metrics_success_straight_line() -> None:
    pos = _line([0, 1, 2, 3, 4])
    d = [5.0, 4.0, 3.0, 2.0, 1.0]
    out = m.episode_metrics(pos, d, stopped=True, shortest_path_length=4.0, reference_locations=pos, steps=5)
    assert set(out) == set(m.METRIC_KEYS)
    assert out == pytest.approx({"ne": 1.0, "sr": 1.0, "osr": 1.0, "spl": 1.0, "ndtw": 1.0, "sdtw": 1.0,
                                 "tl": 4.0, "steps": 5})


def test_episode_metrics_stopped_outside_radius_after_passing_goal() -> None:
    pos = _line([0, 2, 4, 6])
    d = [6.0, 2.0, 1.0, 4.0]  # walked past the goal, stopped 4 m away
    out = m.episode_metrics(pos, d, True, 4.0, _line([0, 2, 4]), steps=4)
    assert out["sr"] == 0.0 and out["osr"] == 1.0
    assert out["ne"] == 4.0 and out["spl"] == 0.0 and out["sdtw"] == 0.0
    assert out["tl"] == pytest.approx(6.0)
    assert 0.0 < out["ndtw"] < 1.0


def test_episode_metrics_step_limit_is_failure_even_inside_radius() -> None:
    pos = _line([0, 1, 2])
    out = m.episode_metrics(pos, [3.5, 2.0, 1.0], stopped=False, shortest_path_length=2.0,
                            reference_locations=pos, steps=500)
    assert out["sr"] == 0.0 and out["spl"] == 0.0 and out["sdtw"] == 0.0
    assert out["osr"] == 1.0 and out["ndtw"] == pytest.approx(1.0) and out["steps"] == 500


def test_aggregate_means() -> None:
    a = {"ne": 1.0, "sr": 1.0, "spl": 0.5, "steps": 10, "episode_id": "a"}
    b = {"ne": 3.0, "sr": 0.0, "spl": 0.0, "steps": 20, "episode_id": "b"}
    agg = m.aggregate([a, b])
    assert agg == pytest.approx({"ne": 2.0, "sr": 0.5, "spl": 0.25, "steps": 15.0, "episodes": 2})
    with pytest.raises(ValueError, match="at least one"):
        m.aggregate([])
    with pytest.raises(ValueError, match="missing metric 'spl'"):
        m.aggregate([a, {"ne": 1.0, "sr": 1.0, "steps": 3}])


@pytest.mark.parametrize(
    ("positions", "match"),
    [
        (np.zeros((0, 3)), "empty"),
        ([[0.0, float("nan"), 0.0]], "NaN"),
        ([[0.0, 0.0]], r"shape \(N, 3\)"),
        ([0.0, 1.0, 2.0], r"shape \(N, 3\)"),
        ("abc", "numbers"),
    ],
)
def test_bad_positions_raise(positions: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        m.path_length(positions)
    with pytest.raises(ValueError, match=match):
        m.ndtw(positions, _line([0, 1]))


def test_bad_distances_and_args_raise() -> None:
    pos = _line([0, 1])
    with pytest.raises(ValueError, match="NaN"):
        m.oracle_success([1.0, float("nan")])
    with pytest.raises(ValueError, match="empty"):
        m.oracle_success([])
    with pytest.raises(ValueError, match="3 entries but positions has 2"):
        m.episode_metrics(pos, [1.0, 1.0, 0.0], True, 1.0, pos, 2)
    with pytest.raises(ValueError, match="finite"):
        m.success(True, float("nan"))
    with pytest.raises(ValueError, match="steps"):
        m.episode_metrics(pos, [1.0, 2.0], True, 1.0, pos, steps=-1)
    with pytest.raises(ValueError, match="success must be in"):
        m.spl(2.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="empty"):
        m.dtw(pos, np.zeros((0, 3)))
