"""All-day conditions: contract, degradation models (methods file section 4) and the registry."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from sim.nav.conditions import (
    CONDITIONS,
    Condition,
    LightingSpec,
    available_conditions,
    condition_rng,
    make_condition,
)
from sim.nav.conditions import base as conditions_base

H, W = 96, 128
FLAT = (slice(24, 48), slice(16, 48))  # constant mid-grey patch
NOISY = ("low_light", "overexposure")

# Documented shift with default parameters on the synthetic image below, seed (0, "ep", 0):
# mean(out) / mean(in) and std(out) / std(in) over all pixels and channels.
EXPECTED_BRIGHTNESS_RATIO = {
    "normal": (0.99, 1.01),
    "low_light": (0.35, 0.40),
    "overexposure": (1.42, 1.54),
    "scattering": (1.03, 1.07),
}
EXPECTED_CONTRAST_RATIO = {
    "normal": (0.99, 1.01),
    "low_light": (0.40, 0.48),
    "overexposure": (1.13, 1.25),
    "scattering": (0.93, 0.97),
}


def _synthetic() -> tuple[np.ndarray, np.ndarray]:
    """A coloured horizontal gradient with a sinusoidal texture, one flat grey patch, and a 0.5-10 m depth ramp."""
    y, x = np.mgrid[0:H, 0:W].astype(np.float32)
    base = 40.0 + 175.0 * x / (W - 1)
    tex = 25.0 * np.sin(x / 3.0) * np.cos(y / 4.0)
    img = np.stack([base + tex, 0.9 * base + tex, 0.8 * base + 20.0 - tex], axis=-1)
    img[FLAT] = 128.0
    depth = (0.5 + 9.5 * y / (H - 1)).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8), depth


RGB, DEPTH = _synthetic()
RGB.flags.writeable = False
DEPTH.flags.writeable = False


def _run(name: str, seed: int = 0, rgb: np.ndarray = RGB, **overrides: object) -> np.ndarray:
    return make_condition(name, **overrides).apply(rgb, DEPTH, condition_rng(seed, "ep", 0))


def test_registry_and_tables_cover_builtins() -> None:
    assert set(available_conditions()) >= {"normal", "low_light", "overexposure", "scattering"}
    assert available_conditions() == CONDITIONS.names()
    assert sorted(EXPECTED_BRIGHTNESS_RATIO) == available_conditions() == sorted(EXPECTED_CONTRAST_RATIO)


@pytest.mark.parametrize("name", available_conditions())
def test_contract(name: str) -> None:
    cond = make_condition(name)
    assert isinstance(cond, Condition) and cond.name == name
    assert isinstance(cond.lighting(), LightingSpec)
    out = _run(name)
    assert out.dtype == np.uint8 and out.shape == RGB.shape
    assert not np.shares_memory(out, RGB)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cond.params.__setattr__("x", 1)


@pytest.mark.parametrize("name", available_conditions())
def test_deterministic_per_seed(name: str) -> None:
    np.testing.assert_array_equal(_run(name, seed=3), _run(name, seed=3))
    if name in NOISY:
        assert not np.array_equal(_run(name, seed=3), _run(name, seed=4))


@pytest.mark.parametrize("name", available_conditions())
def test_documented_shift(name: str) -> None:
    out = _run(name).astype(np.float64)
    ref = RGB.astype(np.float64)
    lo, hi = EXPECTED_BRIGHTNESS_RATIO[name]
    assert lo <= out.mean() / ref.mean() <= hi
    lo, hi = EXPECTED_CONTRAST_RATIO[name]
    assert lo <= out.std() / ref.std() <= hi


def test_normal_is_identity() -> None:
    np.testing.assert_array_equal(_run("normal"), RGB)
    np.testing.assert_array_equal(make_condition("normal").apply(RGB, None, condition_rng(0, 0, 0)), RGB)


def test_scattering_beta_zero_is_identity() -> None:
    np.testing.assert_array_equal(_run("scattering", beta=0.0), RGB)
    assert make_condition("scattering", beta=0.0).lighting().fog is None


def test_scattering_matches_model_and_hazes_far_pixels_more() -> None:
    beta, a = 0.2, np.array([0.95, 0.95, 1.0]) * 255.0
    out = _run("scattering", beta=beta).astype(np.float64)
    t = np.exp(-beta * DEPTH.astype(np.float64))[:, :, None]
    np.testing.assert_allclose(out, RGB * t + a * (1.0 - t), atol=0.51)
    # Distance to the airlight shrinks by t: far rows (bottom) much more than near rows (top).
    shrink = np.abs(out - a).mean(axis=(1, 2)) / np.abs(RGB - a).mean(axis=(1, 2))
    assert shrink[-1] < 0.2
    assert shrink[0] > 0.85
    assert np.all(np.diff(shrink) < 1e-3)


def test_scattering_depth_handling() -> None:
    cond = make_condition("scattering", beta=0.5)
    depth = DEPTH.copy()
    depth[0, :4] = [np.inf, np.nan, -1.0, 1e9]
    out = cond.apply(RGB, depth, condition_rng(0, 0, 0))
    np.testing.assert_array_equal(out[0, [0, 1, 3]], [[242, 242, 255]] * 3)  # far -> airlight
    np.testing.assert_array_equal(out[0, 2], RGB[0, 2])  # negative depth clipped to 0 -> clean
    with pytest.raises(ValueError, match="depth"):
        cond.apply(RGB, None, condition_rng(0, 0, 0))


def test_low_light_darkens_and_adds_noise() -> None:
    noisy = _run("low_light").astype(np.float64)
    clean = _run("low_light", enable_noise=False).astype(np.float64)
    assert noisy.mean() < 0.6 * RGB.mean() and clean.mean() < 0.6 * RGB.mean()
    # Flat region: the noise-free output is almost flat (vignette, quantisation); noise adds clear variance.
    assert clean[FLAT].std() < 3.0
    assert (noisy - clean)[FLAT].var() > 4.0
    assert noisy[FLAT].std() > 3.0 * clean[FLAT].std() + 1.0


def test_low_light_matches_reference_pipeline_without_noise_and_denoise() -> None:
    """Steps 1, 2, 4, 6-10 written out literally in float64 (noise and F switched off)."""
    g, b, x, k, c, s, v = 2.2, 0.15, 0.15, 8.0, 0.75, 0.5, 0.4
    out = _run("low_light", enable_noise=False, denoise_strength=0.0, preserve_details=0.0)
    lin = (RGB / 255.0) ** g
    o = np.clip(k * 255.0 * lin * b * x / 255.0, 0.0, 1.0) ** (1.0 / g)
    o = (o - o.mean()) * c + o.mean()
    y = (o @ np.array([0.299, 0.587, 0.114]))[:, :, None]
    o = y + s * (o - y)
    yy, xx = np.mgrid[0:H, 0:W]
    r2 = (yy - (H - 1) / 2) ** 2 + (xx - (W - 1) / 2) ** 2
    o = o * (1.0 - v * r2 / r2.max())[:, :, None]
    ref = np.round(np.clip(o, 0.0, 1.0) * 255.0)
    assert np.abs(out - ref).max() <= 1.0


def test_overexposure_matches_reference_pipeline_without_noise() -> None:
    g, fw = 2.1, 0.925
    out = _run("overexposure", sigma_read=0.0, bloom_strength=0.0)
    e = (RGB / 255.0) ** g * 2.0 * 1.35
    ref = np.round(np.clip(fw * np.tanh(e / fw) / fw, 0.0, 1.0) ** (1.0 / g) * 255.0)
    assert np.abs(out - ref).max() <= 1.0
    bloomed = _run("overexposure", sigma_read=0.0)
    assert np.all(bloomed >= out) and bloomed.mean() > out.mean()


@pytest.mark.parametrize("name", available_conditions())
@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (7, 5)])
def test_tiny_and_non_contiguous_frames(name: str, shape: tuple[int, int]) -> None:
    cond = make_condition(name)
    rgb = np.ascontiguousarray(RGB[: shape[0], : shape[1]])
    depth = np.ascontiguousarray(DEPTH[: shape[0], : shape[1]])
    out = cond.apply(rgb, depth, condition_rng(0, 0, 0))
    assert out.shape == rgb.shape and out.dtype == np.uint8
    flipped = RGB[:, :, ::-1]  # a non-contiguous view, e.g. BGR -> RGB
    np.testing.assert_array_equal(
        cond.apply(flipped, DEPTH, condition_rng(0, 0, 0)),
        cond.apply(flipped.copy(), DEPTH, condition_rng(0, 0, 0)),
    )


def test_overexposure_saturates_and_brightens() -> None:
    out = _run("overexposure")
    assert np.mean(RGB >= 250) == 0.0
    assert np.mean(out >= 250) > 0.02
    assert out.mean() > 1.2 * RGB.mean()
    hard = _run("overexposure", highlight_rolloff=False)
    assert np.mean(hard >= 250) > np.mean(out >= 250)


def test_unspecified_flag_is_noop_with_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conditions_base, "_warned", set())
    with caplog.at_level(logging.WARNING):
        out = _run("overexposure", wavelength_effect=True)
    assert "wavelength_effect" in caplog.text
    np.testing.assert_array_equal(out, _run("overexposure"))


def test_unknown_condition_lists_known() -> None:
    with pytest.raises(ValueError, match="fog_of_war") as exc:
        make_condition("fog_of_war")
    for name in available_conditions():
        assert name in str(exc.value)


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("low_light", {"gain": -1.0}),
        ("low_light", {"gamma": 0.0}),
        ("low_light", {"denoise_strength": 1.5}),
        ("low_light", {"scene_type": "noon"}),
        ("overexposure", {"gamma": 0.0}),
        ("overexposure", {"full_well": 0.0}),
        ("overexposure", {"gain": float("nan")}),
        ("scattering", {"beta": -0.01}),
        ("scattering", {"atmospheric_light": (1.0, 1.0)}),
        ("scattering", {"max_distance": 0.0}),
        ("normal", {"gain": 2.0}),
    ],
)
def test_bad_params(name: str, overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        make_condition(name, **overrides)


@pytest.mark.parametrize(
    ("name", "overrides"),
    [("low_light", {"enable_noise": "yes"}), ("low_light", {"gain": "8"}), ("scattering", {"scattering_type": 1})],
)
def test_bad_param_types(name: str, overrides: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        make_condition(name, **overrides)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"light_scale": -1.0},
        {"headlight_diffuse": 2.0},
        {"sky_rgb1": (1.0, 0.5)},
        {"sky_rgb2": (0.0, 0.0, 1.5)},
        {"fog": (5.0, 2.0, (0.5, 0.5, 0.5, 1.0))},
        {"fog": (0.0, 2.0, (0.5, 0.5, 0.5))},
    ],
)
def test_bad_lighting_spec(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LightingSpec(**kwargs)


@pytest.mark.parametrize("name", available_conditions())
@pytest.mark.parametrize(
    ("rgb", "depth", "match"),
    [
        (RGB.astype(np.float32) / 255.0, DEPTH, "uint8"),
        (np.zeros((H, W, 4), np.uint8), DEPTH, "shape"),
        (np.zeros((H, W), np.uint8), DEPTH, "shape"),
        (RGB, DEPTH[:-1], "depth shape"),
        (RGB, DEPTH.astype(np.int32), "depth"),
    ],
)
def test_bad_input(name: str, rgb: np.ndarray, depth: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_condition(name).apply(rgb, depth, condition_rng(0, 0, 0))


def test_bad_input_types() -> None:
    cond = make_condition("low_light")
    with pytest.raises(TypeError, match="Generator"):
        cond.apply(RGB, DEPTH, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="numpy array"):
        cond.apply(RGB.tolist(), DEPTH, condition_rng(0, 0, 0))  # type: ignore[arg-type]


def test_condition_rng() -> None:
    def draw(*args: object) -> int:
        return int(condition_rng(*args).integers(0, 2**32))  # type: ignore[arg-type]

    assert draw(0, "ep", 0) == draw(0, "ep", 0)
    assert draw(7, 12, 3) == draw(7, "12", 3)
    assert len({draw(0, "ep", 0), draw(1, "ep", 0), draw(0, "ep2", 0), draw(0, "ep", 1)}) == 4
    assert draw(0, "ep", 0) == EXPECTED_RNG_FIRST_DRAW  # stable across processes and Python versions (hashlib)
    with pytest.raises(ValueError):
        condition_rng(0, "ep", -1)
    with pytest.raises(TypeError):
        condition_rng(0, 1.5, 0)  # type: ignore[arg-type]


EXPECTED_RNG_FIRST_DRAW = 109620601
