"""Action language v1: merge rule (the paper's thresholds, our pinned reading), codec round-trips, strict decoding."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.vla.action_language import (
    ChunkLimits,
    MalformedActionError,
    check_motion,
    encode_chunk,
    format_chunk,
    format_subtasks,
    gripper_states,
    merge_deltas,
    motion_plan,
    parse_chunk,
    parse_subtasks,
)

CM = 0.01
OPEN = np.ones


def steps(*rows: tuple[float, float, float]) -> np.ndarray:
    """Per-step deltas given in cm, returned in metres."""
    return np.asarray(rows, dtype=np.float64) * CM


# ------------------------------------------------------------------------------ merge rule (paper thresholds)
def test_single_axis_closes_at_2_5_cm():
    chunk, spans = merge_deltas(steps(*[(0.5, 0, 0)] * 10), OPEN(10))
    assert spans == [(0, 5), (5, 10)]
    np.testing.assert_allclose(chunk, [[2.5, 0, 0, 1], [2.5, 0, 0, 1]], atol=1e-9)


def test_sign_change_disables_the_axis_rule_until_5_cm_total():
    # x: +2, -0.5, +2 = 3.5 cm but with a sign change -> not closed; +2 more -> net 5.5 >= 5 cm -> closed
    chunk, spans = merge_deltas(steps((2, 0, 0), (-0.5, 0, 0), (2, 0, 0), (2, 0, 0), (1, 0, 0)), OPEN(5))
    assert spans[0] == (0, 4)
    np.testing.assert_allclose(chunk[0, :3], [5.5, 0, 0], atol=1e-9)


def test_total_displacement_rule_fires_without_any_axis_rule():
    # x and y each change sign (so neither can close by the axis rule); the net norm reaches 5.5 cm at step 3
    chunk, spans = merge_deltas(steps((2, 2, 0), (-0.1, -0.1, 0), (2, 2, 0), (0.1, 0, 0)), OPEN(4))
    assert spans == [(0, 3), (3, 4)]
    np.testing.assert_allclose(chunk[0, :3], [3.9, 3.9, 0], atol=1e-9)
    # without the sign change the x axis closes first, at 2.5 cm (step 2)
    _, spans2 = merge_deltas(steps((2, 0.1, 0), (0.5, 0.1, 0), (2, 0, 0)), OPEN(3))
    assert spans2[0] == (0, 2)


def test_oscillation_below_thresholds_is_one_element():
    chunk, spans = merge_deltas(steps(*[(1, 0, 0), (-1, 0, 0)] * 5), OPEN(10))
    assert spans == [(0, 10)]
    np.testing.assert_allclose(chunk, [[0, 0, 0, 1]], atol=1e-9)


def test_gripper_change_splits_elements():
    g = gripper_states([-1, -1, 1, 1, 0, 0])  # open, open, close, close, hold, hold
    np.testing.assert_array_equal(g, [1, 1, 0, 0, 0, 0])
    chunk, spans = merge_deltas(steps(*[(0, 0, -0.5)] * 6), g)
    assert spans == [(0, 2), (2, 6)]
    np.testing.assert_allclose(chunk, [[0, 0, -1, 1], [0, 0, -2, 0]], atol=1e-9)


def test_merge_rejects_bad_shapes_and_nan():
    with pytest.raises(ValueError, match="T x 3"):
        merge_deltas(np.zeros((3, 2)), OPEN(3))
    with pytest.raises(ValueError, match="gripper"):
        merge_deltas(np.zeros((3, 3)), OPEN(2))
    with pytest.raises(ValueError, match="finite"):
        merge_deltas(np.full((2, 3), np.nan), OPEN(2))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(*[st.floats(-0.03, 0.03)] * 3), min_size=1, max_size=60),
       st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=60, max_size=60))
def test_merge_preserves_the_total_displacement_and_every_closed_element_meets_a_threshold(rows, cmds):
    d = np.asarray(rows)
    g = gripper_states(cmds[: len(d)])
    chunk, spans = merge_deltas(d, g)
    np.testing.assert_allclose(chunk[:, :3].sum(0), d.sum(0) * 100, atol=1e-6)
    assert spans[0][0] == 0 and spans[-1][1] == len(d)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    for (s, e), el in zip(spans[:-1], chunk[:-1]):
        seg = d[s:e] * 100
        mono = ~((seg > 1e-4).any(0) & (seg < -1e-4).any(0))
        hit = (mono & (np.abs(el[:3]) >= 2.5 - 1e-6)).any() or np.linalg.norm(el[:3]) >= 5 - 1e-6
        assert hit or g[e] != g[e - 1]


# ------------------------------------------------------------------------------ round trip and strict decoding
def test_encode_decode_round_trip_recovers_the_merged_deltas():
    rng = np.random.default_rng(0)
    d = rng.uniform(-0.02, 0.02, size=(40, 3))
    cmds = np.where(np.arange(40) < 20, -1.0, 1.0)
    text = encode_chunk(d, cmds)
    merged, _ = merge_deltas(d, gripper_states(cmds))
    back = parse_chunk(text, ChunkLimits(max_elements=64))
    assert back.shape == merged.shape
    np.testing.assert_allclose(back[:, :3], merged[:, :3], atol=0.05 + 1e-9)  # one decimal in cm
    np.testing.assert_array_equal(back[:, 3], merged[:, 3])


def test_format_is_the_documented_grammar():
    assert format_chunk([[1.25, -0.04, -2.5, 1], [0, 0, 3, 0]]) == "[[1.2, 0.0, -2.5, 1], [0.0, 0.0, 3.0, 0]]"


@pytest.mark.parametrize("text", [
    "", "[]", "[[]]", "[[1, 2, 3]]", "[[1, 2, 3, 4, 5]]", "[[1, 2, 3, 1]", "[[1, 2, 3, 1]] extra", "[1, 2, 3, 1]",
    "[[nan, 0, 0, 1]]", "[[inf, 0, 0, 1]]", "[[1e3, 0, 0, 1]]", "[[1, 2, 3, 1],]", "[[1,, 2, 3]]", "[[a, b, c, d]]",
    "[[" + "9" * 400 + ", 0, 0, 1]]", "[[1, 2, 3, 1]][[1, 2, 3, 1]]", "[[[1, 2, 3, 1]]]", "move up",
])
def test_malformed_text_raises_the_documented_error(text):
    with pytest.raises(MalformedActionError):
        parse_chunk(text)


def test_decoder_clamps_and_accepts_formatting_variants():
    out = parse_chunk("  [ [ 99 , -250.5,+3 , 7 ],[.5, -0., 1., -2] ] ")
    np.testing.assert_allclose(out, [[10, -10, 3, 1], [0.5, 0, 1, 0]])
    with pytest.raises(MalformedActionError, match="elements"):
        parse_chunk(format_chunk(np.zeros((17, 4))))


@settings(max_examples=400, deadline=None)
@given(st.one_of(
    st.text(max_size=200),
    st.text(alphabet="[], .-+0123456789e \n", max_size=200),
    st.lists(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=0, max_size=6), max_size=20)
    .map(lambda rows: "[" + ", ".join("[" + ", ".join(repr(v) for v in r) + "]" for r in rows) + "]"),
))
def test_decoder_fuzz_never_crashes_never_nan_always_clamped(text):
    limits = ChunkLimits(max_elements=16, max_abs_cm=10.0)
    try:
        out = parse_chunk(text, limits)
    except MalformedActionError:
        return
    assert out.ndim == 2 and out.shape[1] == 4 and 1 <= len(out) <= 16
    assert np.isfinite(out).all()
    assert (np.abs(out[:, :3]) <= 10.0).all() and ((out[:, 3] >= 0) & (out[:, 3] <= 1)).all()


# ------------------------------------------------------------------------------ motion and subtask levels
@pytest.mark.parametrize("chunk, prev, want", [
    ([[0, 0, -3, 1]], 1, "move down"),
    ([[3, 1, 0, 1]], 1, "move forward and slightly left"),
    ([[0.1, 0, 0.2, 1]], 1, "stay still"),
    ([[0, 0, 0, 0]], 1, "close the gripper"),
    ([[0, -2, 4, 0]], 1, "move right and up, then close the gripper"),
    ([[0, 0, 0, 1]], 0, "open the gripper"),
])
def test_motion_plan_phrases(chunk, prev, want):
    assert motion_plan(np.asarray(chunk, float), prev) == want
    assert check_motion(want) == want


@pytest.mark.parametrize("text", ["", "move", "move up and up", "move forward and backward", "go up", "move 3 cm up",
                                  "move up, then dance"])
def test_check_motion_rejects(text):
    with pytest.raises(MalformedActionError):
        check_motion(text)


def test_subtasks_round_trip_and_rejects():
    s = format_subtasks(["Move above the red cube", "descend", "grasp", "lift"])
    assert s == "move above the red cube; descend; grasp; lift"
    assert parse_subtasks(s) == ["move above the red cube", "descend", "grasp", "lift"]
    for bad in ["", ";;", "grasp; <loc0001>", "; ".join(["lift"] * 13), "x" * 100]:
        with pytest.raises(MalformedActionError):
            parse_subtasks(bad)


def test_limits_validated():
    with pytest.raises(ValueError, match="max_elements"):
        ChunkLimits(max_elements=0)
    with pytest.raises(ValueError, match="max_abs_cm"):
        ChunkLimits(max_abs_cm=math.nan)
