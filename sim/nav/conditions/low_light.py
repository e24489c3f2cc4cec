"""Low light (``LowLightNoiseModel``): the methods-file reference pipeline, steps 1-10."""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from sim.nav.conditions._ops import LUMA, gamma_encode, linear_lut, standard_normal, to_uint8, vignette_mask
from sim.nav.conditions.base import (
    CONDITIONS,
    Condition,
    LightingSpec,
    check_bool,
    check_choice,
    check_range,
    warn_noop,
)

# Implementation constants of the denoiser F and of the detail high-pass (not given by the methods file).
_BILATERAL_D = 5
_BILATERAL_SIGMA_SPACE = 1.5
_DETAIL_SIGMA = 1.0


@dataclass(frozen=True)
class LowLightParams:
    """Released-config defaults. ``noise_level``, ``enable_blur``, ``depth_aware`` and ``color_temperature`` are kept
    for config compatibility; their form is unspecified, so non-default values only log a warning."""

    brightness_factor: float = 0.15
    exposure: float = 0.15
    gain: float = 8.0
    shot_noise_factor: float = 0.4
    read_noise_sigma: float = 3.0  # 8-bit units
    denoise_strength: float = 0.75
    preserve_details: float = 0.7
    gamma: float = 2.2
    contrast_factor: float = 0.75
    saturation_factor: float = 0.5
    vignette_strength: float = 0.4
    noise_level: str = "medium"
    scene_type: str = "night"  # selects the physical lighting: "night" or "dusk"
    enable_noise: bool = True
    enable_blur: bool = False
    depth_aware: bool = False
    color_temperature: float | None = None

    def __post_init__(self) -> None:
        for f in ("brightness_factor", "exposure", "gain", "gamma"):
            check_range(f, getattr(self, f), 0.0, 100.0, lo_open=True)
        for f in ("shot_noise_factor", "read_noise_sigma", "contrast_factor", "saturation_factor"):
            check_range(f, getattr(self, f), 0.0, 100.0)
        for f in ("denoise_strength", "preserve_details", "vignette_strength"):
            check_range(f, getattr(self, f), 0.0, 1.0)
        check_choice("noise_level", self.noise_level, ("low", "medium", "high"))
        check_choice("scene_type", self.scene_type, ("night", "dusk"))
        for f in ("enable_noise", "enable_blur", "depth_aware"):
            check_bool(f, getattr(self, f))
        if self.color_temperature is not None:
            check_range("color_temperature", self.color_temperature, 0.0, lo_open=True)
            warn_noop("low_light", "color_temperature", self.color_temperature)
        if self.noise_level != "medium":
            warn_noop("low_light", "noise_level", self.noise_level)
        for f in ("enable_blur", "depth_aware"):
            if getattr(self, f):
                warn_noop("low_light", f, True)


@CONDITIONS.register("low_light")
class LowLight(Condition):
    """Dim scene plus a noisy, gained-up, denoised sensor.

    Steps: linearise ``L = I^g``; ``E = 255 L b x``; ``E_n = E + sqrt(k E) e1 + s_r e2``; ``S = gain E_n``;
    ``S' = (1-d) S + d F(S) + p HF(gain E)`` with F a bilateral filter; ``O = clip(S'/255)^(1/g)``; contrast about
    the mean; saturation about luma; vignette; quantise. The two noise terms are drawn as one Gaussian with
    variance ``k E + s_r^2`` (the same distribution, one draw instead of two).
    """

    name = "low_light"
    Params = LowLightParams
    params: LowLightParams

    def lighting(self) -> LightingSpec:
        if self.params.scene_type == "dusk":
            return LightingSpec(
                light_scale=0.4,
                ambient_scale=0.35,
                headlight_diffuse=0.15,
                headlight_ambient=0.05,
                sky_rgb1=(0.15, 0.12, 0.30),
                sky_rgb2=(0.85, 0.45, 0.25),
            )
        return LightingSpec(
            light_scale=0.6,
            ambient_scale=0.5,
            headlight_diffuse=0.25,
            headlight_ambient=0.06,
            sky_rgb1=(0.01, 0.01, 0.03),
            sky_rgb2=(0.04, 0.04, 0.08),
        )

    def _sigma_color(self) -> float:
        """Bilateral range sigma: twice the noise std (in S units) of a mid-grey pixel."""
        p = self.params
        e_mid = 255.0 * 0.5**p.gamma * p.brightness_factor * p.exposure
        noise = p.gain * math.sqrt(p.shot_noise_factor * e_mid + p.read_noise_sigma**2) if p.enable_noise else 0.0
        return max(2.0 * noise, 1e-3 * p.gain * 255.0)

    def _apply(self, rgb: np.ndarray, depth: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        p = self.params
        # 1-2 with the step-4 gain folded in: S_clean = gain * E = gain * 255 * I^g * b * x (one table lookup).
        s_clean = cv2.LUT(rgb, linear_lut(p.gamma, 255.0 * p.brightness_factor * p.exposure * p.gain))
        if p.enable_noise:  # 3-4: S = gain * (E + N(0, k E + s_r^2)) = S_clean + N(0, gain k S_clean + (gain s_r)^2)
            std = s_clean * np.float32(p.gain * p.shot_noise_factor)
            std += np.float32((p.gain * p.read_noise_sigma) ** 2)
            np.sqrt(std, out=std)
            s = standard_normal(rng, rgb.shape)
            s *= std
            s += s_clean
        else:
            s = s_clean.copy()
        # 5: edge-preserving denoise, then add back detail of the clean signal.
        out = cv2.bilateralFilter(s, _BILATERAL_D, self._sigma_color(), _BILATERAL_SIGMA_SPACE)
        out *= np.float32(p.denoise_strength)
        s *= np.float32(1.0 - p.denoise_strength)
        out += s
        if p.preserve_details > 0.0:
            detail = s_clean - cv2.GaussianBlur(s_clean, (5, 5), _DETAIL_SIGMA)
            detail *= np.float32(p.preserve_details)
            out += detail
        # 6: encode.
        out *= np.float32(1.0 / 255.0)
        o = gamma_encode(out, p.gamma)
        # 7-8 fused (both affine): O'' = s c O + (1 - s) c Y(O) + (1 - c) mean(O).
        c, sat = p.contrast_factor, p.saturation_factor
        m = np.zeros((3, 4), dtype=np.float32)
        m[:, :3] = (1.0 - sat) * c * LUMA[None, :]
        m[:, :3] += sat * c * np.eye(3, dtype=np.float32)
        m[:, 3] = (1.0 - c) * float(o.mean())
        o = cv2.transform(o, m)
        # 9: vignette; 10: clip and quantise.
        if p.vignette_strength > 0.0:
            o *= vignette_mask(rgb.shape[0], rgb.shape[1], float(p.vignette_strength))
        return to_uint8(o)
