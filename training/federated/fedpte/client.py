"""Client-side steps shared by the plain loop and the Flower ClientApp: local training, local prototypes,
evaluation; plus the sample-weighted FedAvg of model states."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.cluster import KMeans
from torch import nn

from training.federated.fedpte.config import ClientConfig
from training.federated.fedpte.evolve import ClassUpload, PrototypeSet
from training.federated.fedpte.methods import ProtoMethod

log = logging.getLogger(__name__)


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 images (N, H, W, 3) -> float (N, 3, H, W) in [-1, 1]."""
    x = np.asarray(images)
    if x.ndim != 4 or x.shape[-1] != 3 or x.dtype != np.uint8:
        raise ValueError(f"images must be uint8 (N, H, W, 3), got {x.dtype} {x.shape}")
    return torch.from_numpy(x).permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)


def _protos_tensors(protos: PrototypeSet | None) -> tuple[torch.Tensor, torch.Tensor] | None:
    if protos is None or not protos.centres:
        return None
    p, lab = protos.flat()
    return torch.from_numpy(p), torch.from_numpy(lab)


def local_train(model: nn.Module, images: np.ndarray, labels: np.ndarray, method: ProtoMethod,
                protos: PrototypeSet | None, cfg: ClientConfig, seed: int = 0) -> dict[str, float]:
    """``cfg.local_epochs`` of Adam on CE + ``cfg.lam`` x the method's prototype term; returns mean losses."""
    x, y = to_tensor(images), torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"need as many labels as images (> 0), got {len(x)} images and {len(y)} labels")
    pt = _protos_tensors(protos)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(int(seed))
    model.train()
    tot = {"loss": 0.0, "ce": 0.0, "proto": 0.0}
    steps = 0
    for _ in range(cfg.local_epochs):
        for idx in torch.randperm(len(x), generator=gen).split(cfg.batch_size):
            if len(idx) < 2:  # BatchNorm needs two samples
                continue
            logits, z = model(x[idx])
            ce = F.cross_entropy(logits, y[idx])
            extra = method.client_loss(z, y[idx], *pt, cfg) if pt is not None else ce * 0.0
            loss = ce + cfg.lam * extra
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tot["loss"] += float(loss.detach())
            tot["ce"] += float(ce.detach())
            tot["proto"] += float(extra.detach())
            steps += 1
    return {k: v / max(steps, 1) for k, v in tot.items()}


@torch.no_grad()
def features(model: nn.Module, images: np.ndarray, batch_size: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """(logits, unit-norm features) of ``images`` in eval mode."""
    model.eval()
    x = to_tensor(images)
    outs = [model(x[i:i + batch_size]) for i in range(0, len(x), batch_size)]
    logits = torch.cat([o[0] for o in outs]).numpy()
    z = F.normalize(torch.cat([o[1] for o in outs]), dim=1).numpy()
    return logits, z


def local_prototypes(model: nn.Module, images: np.ndarray, labels: np.ndarray, k: int,
                     seed: int = 0) -> dict[int, ClassUpload]:
    """Per class: ``k`` k-means centres of the unit-norm features (class mean if k = 1) with member counts."""
    _, z = features(model, images)
    labels = np.asarray(labels)
    out: dict[int, ClassUpload] = {}
    for c in sorted(set(labels.tolist())):
        zc = z[labels == c].astype(np.float64)
        kc = min(k, len(zc))
        if kc <= 1:
            out[int(c)] = ClassUpload(zc.mean(axis=0, keepdims=True), np.array([len(zc)]))
            continue
        km = KMeans(n_clusters=kc, n_init=2, random_state=seed).fit(zc)
        counts = np.bincount(km.labels_, minlength=kc)
        keep = counts > 0
        out[int(c)] = ClassUpload(km.cluster_centers_[keep], counts[keep])
    return out


def evaluate(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Cross-entropy and accuracy of ``model`` on a labelled set."""
    logits, _ = features(model, images)
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    lt = torch.from_numpy(logits)
    return {"loss": float(F.cross_entropy(lt, y)), "accuracy": float((lt.argmax(1) == y).float().mean())}


def fedavg(states: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float]) -> dict[str, torch.Tensor]:
    """Weighted average of model state dicts (float64 accumulation; integer buffers take the first client's)."""
    if not states or len(states) != len(weights):
        raise ValueError(f"need one weight per state (> 0 states), got {len(states)} states, {len(weights)} weights")
    w = np.asarray(weights, dtype=np.float64)
    if (w <= 0).any() or not np.isfinite(w).all():
        raise ValueError(f"weights must be finite and > 0, got {weights}")
    w = w / w.sum()
    keys = list(states[0])
    for i, s in enumerate(states[1:], 1):
        if list(s) != keys or any(s[k].shape != states[0][k].shape for k in keys):
            raise ValueError(f"state {i} has different keys or shapes than state 0")
    out: dict[str, torch.Tensor] = {}
    for k in keys:
        t0 = states[0][k]
        if not t0.is_floating_point():
            out[k] = t0.clone()
            continue
        acc = sum(float(wi) * s[k].double() for wi, s in zip(w, states))
        out[k] = acc.to(t0.dtype)
    return out
