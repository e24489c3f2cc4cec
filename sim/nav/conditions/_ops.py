"""Small float32 image helpers shared by the condition models."""

from __future__ import annotations

from functools import lru_cache

import cv2
import numpy as np

# BT.601 luma weights (R, G, B).
LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)


@lru_cache(maxsize=64)
def linear_lut(gamma: float, scale: float) -> np.ndarray:
    """256-entry float32 table of ``scale * (i / 255) ** gamma``: linearises a uint8 image by indexing."""
    lut = (np.arange(256, dtype=np.float64) / 255.0) ** gamma * scale
    lut = lut.astype(np.float32)
    lut.flags.writeable = False
    return lut


@lru_cache(maxsize=16)
def vignette_mask(h: int, w: int, strength: float) -> np.ndarray:
    """HxWx1 float32 ``1 - strength * (r / r_max)^2`` with r from the image centre and r_max the corner distance."""
    y = (np.arange(h, dtype=np.float32) - (h - 1) / 2.0) ** 2
    x = (np.arange(w, dtype=np.float32) - (w - 1) / 2.0) ** 2
    r2 = y[:, None] + x[None, :]
    r2max = float(r2.max()) or 1.0
    mask = (1.0 - strength * r2 / r2max).astype(np.float32)[:, :, None]
    mask.flags.writeable = False
    return mask


def gamma_encode(x: np.ndarray, gamma: float) -> np.ndarray:
    """``clip(x, 0, 1) ** (1 / gamma)`` in place on a float32 array (returned)."""
    np.clip(x, 0.0, 1.0, out=x)
    return cv2.pow(x, 1.0 / gamma, dst=x)


def to_uint8(x01: np.ndarray) -> np.ndarray:
    """Round ``255 * x`` to uint8 with saturation; NaN maps to 0. Modifies ``x01`` in place."""
    np.fmax(x01, 0.0, out=x01)  # fmax also maps NaN to 0
    return cv2.convertScaleAbs(x01, alpha=255.0)


def standard_normal(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 N(0, 1) noise of ``shape``, determined by ``rng``.

    Draws one seed from ``rng`` and fills with OpenCV's (thread-local) RNG, about 4x faster than
    ``rng.standard_normal`` at 224x224x3. It reseeds ``cv2.theRNG`` of the calling thread.
    """
    out = np.empty(shape, dtype=np.float32)
    cv2.setRNGSeed(int(rng.integers(0, 2**31 - 1)))
    cv2.randn(out.reshape(out.shape[0], -1), 0.0, 1.0)  # single-channel view: the scalar mean/std apply to all
    return out
