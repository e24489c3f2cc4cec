"""FedPTE settings: the server's evolution (NIW prior, split/merge, stability) and the client loss, validated."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


def _check(name: str, value: Any, lo: float, hi: float = math.inf, *, integer: bool = False,
           lo_open: bool = False) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} must be {'an int' if integer else 'a number'}, got {value!r}")
    if not math.isfinite(float(value)) or (value <= lo if lo_open else value < lo) or value > hi:
        raise ValueError(f"{name} must be in {'(' if lo_open else '['}{lo}, {hi}], got {value!r}")


@dataclass
class EvolutionConfig:
    """Server-side prototype evolution.

    Evidence is computed in a fixed random projection to ``proj_dim`` dimensions (few prototypes in a
    high-dimensional space would leave the evidence to the prior). NIW prior: ``m0`` = class mean, ``kappa0``,
    ``nu0 = proj_dim + nu0_extra`` and ``S0 = prior_scale * w * (nu0 - d - 1) * I`` where ``w`` is a robust
    within-cluster variance of the class's points (``evidence.within_scale``), so the prior's expected cluster
    covariance is ``prior_scale * w * I``; a large ``nu0_extra`` holds clusters to that size. Defaults chosen on
    synthetic blobs (one blob of 12-24 points: never split; two blobs 20 sigma apart: always split).
    Stability: a prototype moves at most ``max_drift`` (L2, features are unit-norm) per round from its parent,
    after an EMA step with ``momentum`` (0 = jump to the new mean).
    """

    beta_split: float = 1.0
    beta_merge: float = 1.5
    proj_dim: int = 8
    kappa0: float = 0.01
    nu0_extra: float = 20.0
    prior_scale: float = 1.0
    min_split_points: int = 4
    max_prototypes: int = 4
    js_samples: int = 512
    max_drift: float = 0.5
    momentum: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        _check("beta_split", self.beta_split, 0.0)
        _check("beta_merge", self.beta_merge, 0.0)
        _check("proj_dim", self.proj_dim, 1, 512, integer=True)
        _check("kappa0", self.kappa0, 0.0, lo_open=True)
        _check("nu0_extra", self.nu0_extra, 1.0, lo_open=True)  # nu0 > d + 1: the prior mean covariance exists
        _check("prior_scale", self.prior_scale, 0.0, lo_open=True)
        _check("min_split_points", self.min_split_points, 2, integer=True)
        _check("max_prototypes", self.max_prototypes, 1, 1024, integer=True)
        _check("js_samples", self.js_samples, 16, 1 << 20, integer=True)
        _check("max_drift", self.max_drift, 0.0, lo_open=True)
        _check("momentum", self.momentum, 0.0, 0.999)
        _check("seed", self.seed, 0, integer=True)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ClientConfig:
    """Local training: ``lam`` weighs the prototype term, ``tau`` is the contrastive temperature, ``local_k`` the
    number of local prototypes per class a FedPTE client uploads (k-means centres of its features)."""

    lam: float = 1.0
    tau: float = 0.06
    local_k: int = 3
    local_epochs: int = 2
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        _check("lam", self.lam, 0.0)
        _check("tau", self.tau, 0.0, lo_open=True)
        _check("local_k", self.local_k, 1, 64, integer=True)
        _check("local_epochs", self.local_epochs, 1, 1000, integer=True)
        _check("batch_size", self.batch_size, 1, 1 << 16, integer=True)
        _check("lr", self.lr, 0.0, 10.0, lo_open=True)
        _check("weight_decay", self.weight_decay, 0.0, 1.0)
        _check("seed", self.seed, 0, integer=True)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
