"""All-day conditions (normal, low light, overexposure, scattering): physical lighting plus image degradation.

``make_condition(name, **overrides)`` builds one; importing this package registers the four built-ins.
"""

from __future__ import annotations

from sim.nav.conditions import low_light, normal, overexposure, scattering  # noqa: F401  (register)
from sim.nav.conditions.base import (
    CONDITIONS,
    Condition,
    LightingSpec,
    available_conditions,
    condition_rng,
    make_condition,
)

__all__ = ["CONDITIONS", "Condition", "LightingSpec", "available_conditions", "condition_rng", "make_condition"]
