"""Normal daylight: standard lighting, identity post-process."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.nav.conditions.base import CONDITIONS, Condition, LightingSpec


@dataclass(frozen=True)
class NormalParams:
    """No parameters."""


@CONDITIONS.register("normal")
class Normal(Condition):
    """Daylight reference condition: ``apply`` returns a copy of the frame unchanged."""

    name = "normal"
    Params = NormalParams
    params: NormalParams

    def lighting(self) -> LightingSpec:
        return LightingSpec()

    def _apply(self, rgb: np.ndarray, depth: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        return rgb.copy()
