"""Overexposure (``OverexposureNoiseModel``): the methods-file reference pipeline, steps 1-5."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from sim.nav.conditions._ops import gamma_encode, linear_lut, standard_normal, to_uint8
from sim.nav.conditions.base import (
    CONDITIONS,
    Condition,
    LightingSpec,
    check_bool,
    check_range,
    check_str,
    warn_noop,
)


@dataclass(frozen=True)
class OverexposureParams:
    """Released-config defaults, except ``wavelength_effect``: the released config sets it true, but its form is
    unspecified (methods file step 6), so it is off here and a no-op (with a warning) when set.
    ``bloom_sigma_frac`` (ours) is the bloom blur sigma as a fraction of min(H, W)."""

    exposure: float = 2.0
    gain: float = 1.35
    full_well: float = 0.925
    sigma_read: float = 0.0125
    gamma: float = 2.1
    bloom_strength: float = 0.2
    highlight_rolloff: bool = True
    wavelength_effect: bool = False
    overexposure_type: str = "light_moderate"
    bloom_sigma_frac: float = 0.02

    def __post_init__(self) -> None:
        for f in ("exposure", "gain", "full_well", "gamma", "bloom_sigma_frac"):
            check_range(f, getattr(self, f), 0.0, 100.0, lo_open=True)
        for f in ("sigma_read", "bloom_strength"):
            check_range(f, getattr(self, f), 0.0, 100.0)
        check_bool("highlight_rolloff", self.highlight_rolloff)
        check_bool("wavelength_effect", self.wavelength_effect)
        check_str("overexposure_type", self.overexposure_type)
        if self.wavelength_effect:
            warn_noop("overexposure", "wavelength_effect", True)
        if self.overexposure_type != "light_moderate":
            warn_noop("overexposure", "overexposure_type", self.overexposure_type)


@CONDITIONS.register("overexposure")
class Overexposure(Condition):
    """Over-bright scene and sensor: ``E = I^g exposure gain + N(0, s^2)``; bloom of the part above full well;
    tanh shoulder ``fw tanh(E / fw)`` (or a hard clip); ``O = clip(E' / fw, 0, 1)^(1/g)``."""

    name = "overexposure"
    Params = OverexposureParams
    params: OverexposureParams

    def lighting(self) -> LightingSpec:
        return LightingSpec(
            light_scale=1.3,
            ambient_scale=1.2,
            headlight_diffuse=0.5,
            headlight_ambient=0.15,
            sky_rgb1=(0.92, 0.95, 1.0),
            sky_rgb2=(1.0, 1.0, 1.0),
        )

    def _apply(self, rgb: np.ndarray, depth: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        p = self.params
        # 1: linearise and scale (table lookup); 2: read noise.
        e = cv2.LUT(rgb, linear_lut(p.gamma, p.exposure * p.gain))
        if p.sigma_read > 0.0:
            noise = standard_normal(rng, rgb.shape)
            noise *= np.float32(p.sigma_read)
            e += noise
        fw = np.float32(p.full_well)
        # 3: bloom of the excess over full well.
        if p.bloom_strength > 0.0:
            excess = np.maximum(e - fw, np.float32(0.0))
            sigma = max(0.5, p.bloom_sigma_frac * min(rgb.shape[:2]))
            bloom = cv2.GaussianBlur(excess, (0, 0), sigma)
            bloom *= np.float32(p.bloom_strength)
            e += bloom
        # 4: highlight roll-off fw * tanh(E / fw); 5: O = clip(E' / fw, 0, 1)^(1/g).
        e *= np.float32(1.0) / fw
        if p.highlight_rolloff:
            np.tanh(e, out=e)
        return to_uint8(gamma_encode(e, p.gamma))
