"""Five generated digit domains in the spirit of MNIST / USPS / SVHN / SynthDigits / MNIST-M, drawn with OpenCV's
Hershey fonts at random positions, scales, rotations and stroke widths, each with its own colours, backgrounds,
blur and noise. 32x32 RGB, classes 0-9, reproducible from the seed."""

from __future__ import annotations

import cv2
import numpy as np

from training.federated.fedpte.data import Domain

SIZE = 32
DIGIT_DOMAINS = ("mnist", "usps", "svhn", "synth", "mnistm")
_FONTS = (cv2.FONT_HERSHEY_SIMPLEX, cv2.FONT_HERSHEY_DUPLEX, cv2.FONT_HERSHEY_COMPLEX, cv2.FONT_HERSHEY_TRIPLEX,
          cv2.FONT_HERSHEY_PLAIN, cv2.FONT_HERSHEY_SCRIPT_SIMPLEX)


def _glyph(rng: np.random.Generator, digit: int, size: int, font: int, scale: float, thick: int,
           rot: float, shift: float) -> np.ndarray:
    """A float mask in [0, 1] of one digit, centred then rotated/shifted."""
    canvas = np.zeros((size, size), np.uint8)
    text = str(digit)
    (w, h), base = cv2.getTextSize(text, font, scale, thick)
    org = ((size - w) // 2, (size + h) // 2)
    cv2.putText(canvas, text, org, font, scale, 255, thick, cv2.LINE_AA)
    dx, dy = rng.uniform(-shift, shift, 2) * size
    m = cv2.getRotationMatrix2D((size / 2, size / 2), rot, 1.0)
    m[:, 2] += (dx, dy)
    return cv2.warpAffine(canvas, m, (size, size)).astype(np.float32) / 255.0


def _colour(rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(0, 255, 3).astype(np.float32)


def _draw(rng: np.random.Generator, style: str, digit: int) -> np.ndarray:
    s = SIZE
    if style == "mnist":  # white, thick, centred strokes on black
        m = _glyph(rng, digit, s, cv2.FONT_HERSHEY_SIMPLEX, rng.uniform(0.8, 1.0), int(rng.integers(2, 4)),
                   rng.uniform(-12, 12), 0.06)
        img = np.repeat(m[..., None], 3, axis=2) * 255.0
    elif style == "usps":  # drawn small and upsampled: blocky, blurred, fills the frame
        m = _glyph(rng, digit, 16, cv2.FONT_HERSHEY_DUPLEX, rng.uniform(0.55, 0.65), 1, rng.uniform(-8, 8), 0.04)
        m = cv2.GaussianBlur(cv2.resize(m, (s, s), interpolation=cv2.INTER_NEAREST), (3, 3), 0.8)
        img = np.repeat(m[..., None], 3, axis=2) * 230.0 + 10.0
    elif style == "svhn":  # coloured house numbers with neighbouring digits at the sides
        bg, fg = _colour(rng), _colour(rng)
        while np.abs(bg - fg).mean() < 60:
            fg = _colour(rng)
        font = _FONTS[int(rng.integers(0, 4))]
        m = _glyph(rng, digit, s, font, rng.uniform(0.7, 1.0), int(rng.integers(1, 3)), rng.uniform(-5, 5), 0.04)
        for side in (-1, 1):
            if rng.random() < 0.7:
                nb = _glyph(rng, int(rng.integers(0, 10)), s, font, rng.uniform(0.7, 1.0), 1, 0.0, 0.0)
                m = np.maximum(m, np.roll(nb, side * int(rng.integers(17, 22)), axis=1))
        img = bg * (1 - m[..., None]) + fg * m[..., None]
        img = cv2.GaussianBlur(img, (3, 3), rng.uniform(0.3, 1.0)) + rng.normal(0, 8, img.shape)
    elif style == "synth":  # any font, colour and gradient background, larger rotations
        c0, c1, fg = _colour(rng), _colour(rng), _colour(rng)
        ramp = np.linspace(0, 1, s, dtype=np.float32)[None, :, None]
        bg = c0 * (1 - ramp) + c1 * ramp
        bg = np.broadcast_to(bg, (s, s, 3)).copy()
        if np.abs(bg.mean(axis=(0, 1)) - fg).mean() < 60:
            fg = 255.0 - bg.mean(axis=(0, 1))
        m = _glyph(rng, digit, s, _FONTS[int(rng.integers(0, len(_FONTS)))], rng.uniform(0.6, 1.1),
                   int(rng.integers(1, 4)), rng.uniform(-20, 20), 0.1)
        img = bg * (1 - m[..., None]) + fg * m[..., None] + rng.normal(0, 4, (s, s, 3))
    elif style == "mnistm":  # MNIST strokes blended into a random colour texture: |texture - mask|
        tex = rng.uniform(0, 255, (4, 4, 3)).astype(np.float32)
        tex = cv2.resize(tex, (s, s), interpolation=cv2.INTER_CUBIC) + rng.normal(0, 25, (s, s, 3))
        m = _glyph(rng, digit, s, cv2.FONT_HERSHEY_SIMPLEX, rng.uniform(0.8, 1.0), int(rng.integers(2, 4)),
                   rng.uniform(-12, 12), 0.06)
        img = np.abs(tex - m[..., None] * 255.0)
    else:
        raise ValueError(f"unknown digit style {style!r}; known: {list(DIGIT_DOMAINS)}")
    return np.clip(img, 0, 255).astype(np.uint8)


def make_digit_set(style: str, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images of one style with balanced labels (n // 10 per digit, the rest spread), shuffled."""
    if style not in DIGIT_DOMAINS:
        raise ValueError(f"unknown digit style {style!r}; known: {list(DIGIT_DOMAINS)}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rng = np.random.default_rng([seed, DIGIT_DOMAINS.index(style)])
    y = rng.permutation(np.arange(n) % 10).astype(np.int64)
    x = np.stack([_draw(rng, style, int(d)) for d in y])
    return x, y


def make_digit_domains(n_train: int = 500, n_test: int = 300, seed: int = 0,
                       domains: tuple[str, ...] = DIGIT_DOMAINS) -> list[Domain]:
    """One :class:`Domain` per style; train and test drawn from different seeds."""
    out = []
    for style in domains:
        xtr, ytr = make_digit_set(style, n_train, 2 * seed)
        xte, yte = make_digit_set(style, n_test, 2 * seed + 1)
        out.append(Domain(style, xtr, ytr, xte, yte, tuple(str(d) for d in range(10))))
    return out
