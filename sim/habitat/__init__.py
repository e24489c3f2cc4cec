"""Habitat-Sim backend for the navigation env (R2R-CE / RxR-CE scenes such as MP3D).

habitat_sim is optional and not on PyPI: importing this package works without it; building a
:class:`HabitatNavEnv` calls :func:`require_habitat`, which raises ``ImportError`` with install hints.
See ``docs/habitat.md``.
"""

from __future__ import annotations

from sim.habitat.env import HABITAT_INSTALL_HINT, HabitatNavEnv, habitat_available, require_habitat

__all__ = ["HABITAT_INSTALL_HINT", "HabitatNavEnv", "habitat_available", "require_habitat"]
