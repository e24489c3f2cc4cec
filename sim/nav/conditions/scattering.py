"""Atmospheric scattering (``AtmosphericScatteringNoiseModel``): I = J t + A (1 - t), t = exp(-beta d)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.nav.conditions.base import (
    CONDITIONS,
    RGB,
    Condition,
    LightingSpec,
    check_bool,
    check_colour,
    check_range,
    check_str,
    warn_noop,
)


@dataclass(frozen=True)
class ScatteringParams:
    """Released-config defaults. ``beta`` is per metre; ``atmospheric_light`` is A in [0, 1]. ``scattering_type``,
    ``wavelength_effect``, ``particle_size`` and ``depth_estimation_method`` are kept for config compatibility; their
    effect is unspecified, so non-default values only log a warning (depth is always the given metric depth)."""

    beta: float = 0.01
    atmospheric_light: RGB = (0.95, 0.95, 1.0)
    max_distance: float = 200.0
    scattering_type: str = "haze"
    wavelength_effect: bool = False
    particle_size: float = 1.0
    depth_estimation_method: str = "simple"

    def __post_init__(self) -> None:
        check_range("beta", self.beta, 0.0, 100.0)
        object.__setattr__(self, "atmospheric_light", check_colour("atmospheric_light", self.atmospheric_light, 3))
        check_range("max_distance", self.max_distance, 0.0, lo_open=True)
        check_range("particle_size", self.particle_size, 0.0, lo_open=True)
        check_bool("wavelength_effect", self.wavelength_effect)
        for f, default in (("scattering_type", "haze"), ("depth_estimation_method", "simple")):
            value = getattr(self, f)
            check_str(f, value)
            if value != default:
                warn_noop("scattering", f, value)
        if self.wavelength_effect:
            warn_noop("scattering", "wavelength_effect", True)
        if self.particle_size != 1.0:
            warn_noop("scattering", "particle_size", self.particle_size)


@CONDITIONS.register("scattering")
class Scattering(Condition):
    """Haze/fog from the exact exponential model, applied as a post-process on RGB plus metric depth.

    Depth is clipped to ``[0, max_distance]``; non-finite depth (no hit, sky) counts as ``max_distance``.

    ``lighting()`` also gives a MuJoCo fog for native rendering. MuJoCo fog is *linear* between fogstart and fogend
    and fixed when the renderer is created, so it can only approximate ``exp(-beta d)``: we use its tangent at d = 0
    (fogstart 0, fogend 1/beta, colour A), which is within 0.5% of the exponential up to 10 m at beta = 0.01. The
    exact model is the post-process; applying both doubles the haze.
    """

    name = "scattering"
    Params = ScatteringParams
    params: ScatteringParams
    needs_depth = True

    def lighting(self) -> LightingSpec:
        p = self.params
        fog = None
        if p.beta > 0.0:
            fog = (0.0, min(1.0 / p.beta, p.max_distance), (*p.atmospheric_light, 1.0))
        return LightingSpec(
            light_scale=0.85,
            ambient_scale=1.3,
            headlight_diffuse=0.4,
            headlight_ambient=0.15,
            sky_rgb1=(0.75, 0.77, 0.80),
            sky_rgb2=(0.88, 0.89, 0.92),
            fog=fog,
        )

    def _apply(self, rgb: np.ndarray, depth: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        p = self.params
        assert depth is not None  # guaranteed by Condition.apply (needs_depth)
        d = np.nan_to_num(depth.astype(np.float32, copy=True), nan=p.max_distance, posinf=p.max_distance, neginf=0.0)
        np.clip(d, 0.0, p.max_distance, out=d)
        d *= np.float32(-p.beta)
        t = np.exp(d, out=d)[:, :, None]
        a = np.asarray(p.atmospheric_light, dtype=np.float32) * np.float32(255.0)
        # J t + A (1 - t) = (J - A) t + A, in 8-bit units.
        out = rgb.astype(np.float32)
        out -= a
        out *= t
        out += a
        out += np.float32(0.5)
        np.clip(out, 0.0, 255.0, out=out)
        return out.astype(np.uint8)
