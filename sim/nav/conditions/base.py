"""All-day conditions: the ``Condition`` ABC, the physical ``LightingSpec``, the registry and per-step seeding.

A condition has two realisations:

* ``lighting()`` -- what the MuJoCo renderer applies at episode reset (scene light scale, headlight, sky, fog);
* ``apply(rgb, depth, rng)`` -- the per-frame image degradation model of the methods file (section 4).

The two compound if both are used (e.g. dimmed lights *and* the low-light sensor model); which combination an
environment uses is the environment's choice, not the condition's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from agents.core.registry import Registry

logger = logging.getLogger(__name__)

RGB = tuple[float, float, float]
RGBA = tuple[float, float, float, float]
_RNG_DOMAIN = b"allday.cond.v1"  # blake2b personalisation (<= 16 bytes)


def _is_real(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def check_range(
    name: str, value: object, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False
) -> None:
    """Raise ``TypeError`` unless ``value`` is a real number, ``ValueError`` unless it is finite and in ``[lo, hi]``
    (``(lo, hi]`` if ``lo_open``)."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(float(value)):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be finite, got {value!r}")
    v = float(value)  # type: ignore[arg-type]
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"{name} must be <= {hi}, got {v}")


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def check_str(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {value!r}")
    if not value:
        raise ValueError(f"{name} must be non-empty")


def check_bool(name: str, value: object) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")


def check_colour(name: str, value: object, n: int) -> tuple[float, ...]:
    """Validate a length-``n`` colour with components in [0, 1]; return it as a tuple of floats."""
    try:
        comps = tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be a sequence of {n} numbers in [0, 1], got {value!r}") from None
    if len(comps) != n:
        raise ValueError(f"{name} must have {n} components, got {len(comps)}")
    for i, c in enumerate(comps):
        check_range(f"{name}[{i}]", c, 0.0, 1.0)
    return tuple(float(c) for c in comps)


_warned: set[tuple[str, str]] = set()


def warn_noop(condition: str, field: str, value: object) -> None:
    """Log once per (condition, field) that a parameter whose form the methods file leaves unknown does nothing."""
    if (condition, field) not in _warned:
        _warned.add((condition, field))
        logger.warning(
            "%s: %s=%r is accepted for config compatibility but has no effect (form unspecified)",
            condition,
            field,
            value,
        )


@dataclass(frozen=True)
class LightingSpec:
    """Physical realisation of a condition, applied by the MuJoCo renderer at reset.

    ``fog`` is ``(fogstart_m, fogend_m, rgba)``; MuJoCo fog is linear in distance and is fixed when the renderer is
    created, so a spec with a different fog needs a new renderer. Lights, headlight and sky change live.
    """

    light_scale: float = 1.0  # multiplies diffuse/specular of the scene lights
    ambient_scale: float = 1.0
    headlight_diffuse: float = 0.4
    headlight_ambient: float = 0.1
    sky_rgb1: RGB = (0.40, 0.60, 0.85)  # gradient skybox, zenith
    sky_rgb2: RGB = (0.90, 0.93, 0.97)  # gradient skybox, horizon
    fog: tuple[float, float, RGBA] | None = None

    def __post_init__(self) -> None:
        check_range("light_scale", self.light_scale, 0.0, 10.0)
        check_range("ambient_scale", self.ambient_scale, 0.0, 10.0)
        check_range("headlight_diffuse", self.headlight_diffuse, 0.0, 1.0)
        check_range("headlight_ambient", self.headlight_ambient, 0.0, 1.0)
        object.__setattr__(self, "sky_rgb1", check_colour("sky_rgb1", self.sky_rgb1, 3))
        object.__setattr__(self, "sky_rgb2", check_colour("sky_rgb2", self.sky_rgb2, 3))
        if self.fog is not None:
            try:
                start, end, rgba = self.fog
            except (TypeError, ValueError):
                raise ValueError(f"fog must be (fogstart, fogend, rgba) or None, got {self.fog!r}") from None
            check_range("fogstart", start, 0.0)
            check_range("fogend", end, float(start), lo_open=True)
            object.__setattr__(self, "fog", (float(start), float(end), check_colour("fog rgba", rgba, 4)))


class Condition(ABC):
    """An all-day condition. Subclasses set ``name`` and ``Params`` and implement ``lighting`` and ``_apply``."""

    name: ClassVar[str]
    Params: ClassVar[type]
    needs_depth: ClassVar[bool] = False

    def __init__(self, params: Any = None, **overrides: Any) -> None:
        if params is None:
            params = self.Params()
        elif not isinstance(params, self.Params):
            raise TypeError(f"{self.name}: params must be {self.Params.__name__}, got {type(params).__name__}")
        if overrides:
            known = {f.name for f in dataclasses.fields(self.Params)}
            unknown = sorted(set(overrides) - known)
            if unknown:
                raise ValueError(f"{self.name}: unknown parameter(s) {unknown}; known: {sorted(known)}")
            params = dataclasses.replace(params, **overrides)
        self.params = params

    @abstractmethod
    def lighting(self) -> LightingSpec:
        """The physical scene lighting for this condition."""

    @abstractmethod
    def _apply(self, rgb: np.ndarray, depth: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """Degrade a validated frame; return HxWx3 uint8."""

    def apply(self, rgb: np.ndarray, depth: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """Degrade ``rgb`` (HxWx3 uint8) given metric ``depth`` (HxW float, metres, or None); returns a new array."""
        if not isinstance(rgb, np.ndarray):
            raise TypeError(f"{self.name}: rgb must be a numpy array, got {type(rgb).__name__}")
        if rgb.dtype != np.uint8:
            raise ValueError(f"{self.name}: rgb must be uint8, got {rgb.dtype}")
        if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape[0] == 0 or rgb.shape[1] == 0:
            raise ValueError(f"{self.name}: rgb must have shape (H, W, 3), got {rgb.shape}")
        if depth is not None:
            if not isinstance(depth, np.ndarray):
                raise TypeError(
                    f"{self.name}: depth must be a numpy array (metres) or None, got {type(depth).__name__}"
                )
            if not np.issubdtype(depth.dtype, np.floating):
                raise ValueError(f"{self.name}: depth must be float (metres), got {depth.dtype}")
            if depth.shape != rgb.shape[:2]:
                raise ValueError(f"{self.name}: depth shape {depth.shape} does not match rgb {rgb.shape[:2]}")
        elif self.needs_depth:
            raise ValueError(f"{self.name}: this condition needs metric depth (HxW, metres); got depth=None")
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"{self.name}: rng must be a numpy.random.Generator (see condition_rng)")
        out = self._apply(np.ascontiguousarray(rgb), depth, rng)
        assert out.dtype == np.uint8 and out.shape == rgb.shape
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params!r})"


CONDITIONS: Registry[type[Condition]] = Registry("condition")


def available_conditions() -> list[str]:
    """Sorted names of the registered conditions."""
    return CONDITIONS.names()


def make_condition(name: str, **overrides: Any) -> Condition:
    """Build a registered condition with its default parameters, overriding any by keyword."""
    if name not in CONDITIONS:
        raise ValueError(f"unknown condition {name!r}; known: {', '.join(available_conditions()) or '(none)'}")
    return CONDITIONS.get(name)(**overrides)


def condition_rng(seed: int, episode_key: str | int, step: int) -> np.random.Generator:
    """A generator seeded reproducibly from (seed, episode, step); ``1`` and ``"1"`` name the same episode."""
    for label, v in (("seed", seed), ("step", step)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{label} must be an int, got {v!r}")
    if int(step) < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if not isinstance(episode_key, (str, int, np.integer)) or isinstance(episode_key, (bool, np.bool_)):
        raise TypeError(f"episode_key must be a str or int, got {episode_key!r}")
    msg = f"{int(seed)}\x1f{episode_key}\x1f{int(step)}".encode()
    digest = hashlib.blake2b(msg, digest_size=16, person=_RNG_DOMAIN).digest()
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(digest, "little")))
