"""Server side of FedPTE: per-class prototype clusters evolved by NIW evidence (split, then merge), under a
stability constraint; plus the FedProto-style fixed prototypes (one weighted mean per class).

Uploaded points are unit-norm local prototypes with sample counts. Each round, per class, in sorted class order:
assign the points to the nearest current centre (round 1: one cluster), propose a 2-means split of every cluster
(evidence in a fixed random projection), then merge mutual-nearest pairs, then move each centre towards its
members' weighted mean, at most ``max_drift`` from its parent centre of the previous round.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from sklearn.cluster import KMeans

from training.federated.fedpte.config import EvolutionConfig
from training.federated.fedpte.evidence import NIWPrior, merge_score, split_score, within_prior

log = logging.getLogger(__name__)


@dataclass
class ClassUpload:
    """One client's prototypes for one class: ``points`` (k, D) and their sample ``counts`` (k,)."""

    points: np.ndarray
    counts: np.ndarray

    def __post_init__(self) -> None:
        self.points = np.asarray(self.points, dtype=np.float64)
        self.counts = np.asarray(self.counts, dtype=np.float64).reshape(-1)
        if self.points.ndim != 2 or self.points.shape[0] != self.counts.shape[0]:
            raise ValueError(f"points must be (k, D) with k = len(counts); got {self.points.shape} and "
                             f"{self.counts.shape}")
        if not (np.isfinite(self.points).all() and np.isfinite(self.counts).all()) or (self.counts <= 0).any():
            raise ValueError("points must be finite and counts finite and > 0")


@dataclass
class PrototypeSet:
    """Per class: centres (k_c, D), their total counts (k_c,). ``events`` logs the last round's splits/merges."""

    centres: dict[int, np.ndarray] = field(default_factory=dict)
    counts: dict[int, np.ndarray] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)

    def num_prototypes(self) -> dict[int, int]:
        return {c: int(v.shape[0]) for c, v in sorted(self.centres.items())}

    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        """All centres stacked (P, D) and their class labels (P,), classes in sorted order."""
        if not self.centres:
            return np.zeros((0, 0), np.float32), np.zeros((0,), np.int64)
        cs = sorted(self.centres)
        protos = np.concatenate([self.centres[c] for c in cs]).astype(np.float32)
        labels = np.concatenate([np.full(len(self.centres[c]), c, np.int64) for c in cs])
        return protos, labels

    @classmethod
    def from_flat(cls, protos: np.ndarray, labels: np.ndarray) -> "PrototypeSet":
        protos, labels = np.asarray(protos, np.float64), np.asarray(labels, np.int64).reshape(-1)
        if protos.ndim != 2 or protos.shape[0] != labels.shape[0]:
            raise ValueError(f"protos must be (P, D) with P = len(labels); got {protos.shape}, {labels.shape}")
        out = cls()
        for c in sorted(set(labels.tolist())):
            out.centres[c] = protos[labels == c]
            out.counts[c] = np.ones(int((labels == c).sum()))
        return out


def pool_uploads(uploads: Sequence[Mapping[int, ClassUpload]]) -> dict[int, ClassUpload]:
    """Concatenate every client's per-class uploads (clients in the given order)."""
    pooled: dict[int, list[ClassUpload]] = {}
    for up in uploads:
        for c, u in up.items():
            pooled.setdefault(int(c), []).append(u)
    return {c: ClassUpload(np.concatenate([u.points for u in us]), np.concatenate([u.counts for u in us]))
            for c, us in sorted(pooled.items())}


def fixed_prototypes(uploads: Sequence[Mapping[int, ClassUpload]]) -> PrototypeSet:
    """FedProto: one prototype per class, the count-weighted mean of all uploaded points of that class."""
    out = PrototypeSet()
    for c, u in pool_uploads(uploads).items():
        w = u.counts / u.counts.sum()
        out.centres[c] = (w[:, None] * u.points).sum(axis=0, keepdims=True)
        out.counts[c] = np.array([u.counts.sum()])
    return out


def _project(points: np.ndarray, dim: int, seed: int = 0) -> np.ndarray:
    """A fixed (seeded) random orthonormal projection to at most ``dim`` dims for the evidence tests. Data-driven
    PCA is avoided on purpose: with few points, the top sample components of a single Gaussian blob look
    inflated and bimodal, and the evidence then splits blobs that are one cluster."""
    d_in = points.shape[1]
    k = max(1, min(dim, d_in))
    if k == d_in:
        return points - points.mean(axis=0)
    q, _ = np.linalg.qr(np.random.default_rng([seed, d_in, k]).normal(size=(d_in, k)))
    return (points - points.mean(axis=0)) @ q


def bound_drift(new: np.ndarray, old: np.ndarray, max_drift: float, momentum: float = 0.0) -> np.ndarray:
    """Stability constraint: EMA step ``old + (1 - momentum)(new - old)``, then at most ``max_drift`` (L2) from
    ``old``. Rows of ``new`` and ``old`` are paired."""
    step = (1.0 - momentum) * (np.asarray(new, np.float64) - np.asarray(old, np.float64))
    norm = np.linalg.norm(step, axis=1, keepdims=True)
    scale = np.minimum(1.0, max_drift / np.maximum(norm, 1e-12))
    return old + step * scale


class _Cluster:
    __slots__ = ("idx", "parent")

    def __init__(self, idx: np.ndarray, parent: int | None) -> None:
        self.idx, self.parent = idx, parent


def _weighted_mean(points: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return (counts[:, None] * points).sum(axis=0) / counts.sum()


def evolve_class(prev: np.ndarray | None, upload: ClassUpload, cfg: EvolutionConfig, cls: int = 0,
                 events: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One round of evolution for one class: returns (centres (k, D), counts (k,))."""
    events = events if events is not None else []
    pts, cnt = upload.points, upload.counts
    z = _project(pts, cfg.proj_dim, cfg.seed)
    prior: NIWPrior = within_prior(z, cfg.kappa0, cfg.nu0_extra, cfg.prior_scale)
    if prev is None or len(prev) == 0:
        clusters = [_Cluster(np.arange(len(pts)), None)]
    else:
        d2 = ((pts[:, None, :] - prev[None, :, :]) ** 2).sum(-1)
        near = d2.argmin(axis=1)
        clusters = [_Cluster(np.flatnonzero(near == j), j) for j in range(len(prev)) if (near == j).any()]
        dropped = len(prev) - len(clusters)
        if dropped:
            events.append(f"class {cls}: dropped {dropped} prototype(s) with no points")
    # split: every cluster once, in order, while under the cap
    out: list[_Cluster] = []
    for k, cl in enumerate(clusters):
        room = len(out) + (len(clusters) - k) < cfg.max_prototypes
        if room and len(cl.idx) >= cfg.min_split_points:
            lab = KMeans(n_clusters=2, n_init=4, random_state=cfg.seed).fit_predict(z[cl.idx])
            a, b = cl.idx[lab == 0], cl.idx[lab == 1]
            if len(a) and len(b):
                s = split_score(z[a], z[b], prior, cfg.beta_split)
                if s > 0:
                    events.append(f"class {cls}: split a prototype ({len(a)}+{len(b)} points, score {s:.2f})")
                    out += [_Cluster(a, cl.parent), _Cluster(b, cl.parent)]
                    continue
        out.append(cl)
    # merge: mutual nearest centres (projected), closest pairs first
    if len(out) > 1:
        cz = np.stack([z[cl.idx].mean(axis=0) for cl in out])
        d2 = ((cz[:, None] - cz[None]) ** 2).sum(-1)
        np.fill_diagonal(d2, np.inf)
        nn = d2.argmin(axis=1)
        pairs = sorted({(min(i, int(j)), max(i, int(j))) for i, j in enumerate(nn) if nn[j] == i},
                       key=lambda p: d2[p])
        gone: set[int] = set()
        for i, j in pairs:
            a, b = out[i].idx, out[j].idx
            s = merge_score(z[a], z[b], prior, cfg.beta_merge, cfg.js_samples, cfg.seed)
            if s > 0:
                events.append(f"class {cls}: merged two prototypes ({len(a)}+{len(b)} points, score {s:.2f})")
                wa, wb = cnt[a].sum(), cnt[b].sum()
                parent = out[i].parent if wa >= wb else out[j].parent
                out[i] = _Cluster(np.concatenate([a, b]), parent)
                gone.add(j)
        out = [cl for k, cl in enumerate(out) if k not in gone]
    centres = np.stack([_weighted_mean(pts[cl.idx], cnt[cl.idx]) for cl in out])
    counts = np.array([cnt[cl.idx].sum() for cl in out])
    if prev is not None and len(prev):
        parents = np.stack([prev[cl.parent] for cl in out])
        centres = bound_drift(centres, parents, cfg.max_drift, cfg.momentum)
    return centres, counts


def evolve(prev: PrototypeSet | None, uploads: Sequence[Mapping[int, ClassUpload]],
           cfg: EvolutionConfig) -> PrototypeSet:
    """One server round of FedPTE over all classes (classes nobody uploaded keep their prototypes)."""
    prev = prev or PrototypeSet()
    out = PrototypeSet()
    pooled = pool_uploads(uploads)
    dims = {u.points.shape[1] for u in pooled.values()} | {v.shape[1] for v in prev.centres.values()}
    if len(dims) > 1:
        raise ValueError(f"prototype dimensions disagree: {sorted(dims)}")
    for c in sorted(set(pooled) | set(prev.centres)):
        if c not in pooled:
            out.centres[c], out.counts[c] = prev.centres[c], prev.counts[c]
            continue
        out.centres[c], out.counts[c] = evolve_class(prev.centres.get(c), pooled[c], cfg, c, out.events)
    for e in out.events:
        log.info("%s", e)
    return out
