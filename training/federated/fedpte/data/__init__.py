"""Cross-domain classification sets for FedPTE: one domain per client, 32x32 RGB uint8 images.

``DATASETS`` maps a name to a builder ``(n_train, n_test, seed, **kw) -> list[Domain]``: ``digits`` (five generated
digit styles) and ``sim_views`` (furniture seen by the simulator's camera under the four all-day conditions).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from agents.core.registry import Registry


@dataclass
class Domain:
    """One domain: train and test images (N, H, W, 3) uint8 with int64 labels, and the class names."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.ndim != 4 or x.shape[-1] != 3 or x.dtype != np.uint8 or len(x) != len(y):
                raise ValueError(f"domain {self.name!r}: x_{split} must be uint8 (N, H, W, 3) with N = len(y_{split}),"
                                 f" got {x.dtype} {x.shape} and {len(y)} labels")
            if len(y) and (y.min() < 0 or y.max() >= len(self.classes)):
                raise ValueError(f"domain {self.name!r}: y_{split} outside 0..{len(self.classes) - 1}")


DATASETS: Registry[str] = Registry("fedpte dataset")
DATASETS.register("digits")("training.federated.fedpte.data.digits:make_digit_domains")
DATASETS.register("sim_views")("training.federated.fedpte.data.sim_views:make_sim_view_domains")


def _builder(name: str):
    import importlib

    module, _, fn = DATASETS.get(name).partition(":")
    return getattr(importlib.import_module(module), fn)


def check_dataset_keys(name: str, keys: Iterable[str]) -> None:
    """``ValueError`` naming the keys of a ``dataset:`` section that dataset ``name``'s builder does not take (a
    misspelt or leftover key would otherwise be dropped silently)."""
    import inspect

    known = set(inspect.signature(_builder(name)).parameters)
    unknown = sorted(set(keys) - known - {"name"})
    if unknown:
        raise ValueError(f"dataset {name!r} does not take {unknown}; it takes {sorted(known)}")


def load_domains(name: str, **kwargs) -> list[Domain]:
    """Build a dataset's domains by registry name (the builder module is imported lazily)."""
    check_dataset_keys(name, kwargs)
    return _builder(name)(**kwargs)


__all__ = ["DATASETS", "Domain", "check_dataset_keys", "load_domains"]
