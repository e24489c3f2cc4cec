"""Fixtures of the VLA training tests: a tiny random-weight PaliGemma (32 px) and synthetic episodes."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from training.vla.data.episode import Episode

# triton's native library (pulled in by transformers) segfaults when first imported after MuJoCo has created an
# EGL context (robosuite tests run earlier in the session): load the model stack at collection time
if importlib.util.find_spec("triton") is not None:
    import triton  # noqa: F401
import peft  # noqa: E402,F401
from transformers import AutoModelForImageTextToText  # noqa: E402,F401

TINY = dict(image_size=32, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128,
            vision_hidden_size=32, vision_layers=1, vision_heads=2, vision_intermediate_size=64, bpe_vocab_size=400)


def lift_like_episode(seed: int = 0, size: int = 32, phases: bool = True) -> Episode:
    """A Lift-shaped demonstration: move above (forward+down), descend, grasp (still, close), lift (up)."""
    rng = np.random.default_rng(seed)
    d = np.array([[0.03, 0.004, -0.02]] * 3 + [[0.0, 0.0, -0.03]] * 3 + [[0.0, 0.0, 0.0]] * 3 + [[0.0, 0.0, 0.03]] * 2)
    d += rng.normal(0, 1e-4, d.shape)
    g = np.array([-1.0] * 6 + [1.0] * 5)
    ph = ["move above"] * 3 + ["descend"] * 3 + ["grasp"] * 3 + ["lift"] * 2
    frames = rng.integers(0, 255, (len(d), size, size, 3), dtype=np.uint8)
    return Episode(frames, d, g, ph if phases else [""] * len(d), "pick up the red cube", "lift", {"seed": seed})


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory):
    from agents.vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "base", **TINY)


@pytest.fixture
def bundle(tiny_base):
    from agents.vlm import load_vlm

    return load_vlm(tiny_base)
