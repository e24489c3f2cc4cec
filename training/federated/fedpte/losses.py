"""Client-side prototype losses (torch): FedPTE's multi-positive contrastive loss and FedProto's L2 pull."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check(z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, labels: torch.Tensor) -> None:
    if z.ndim != 2 or protos.ndim != 2 or z.shape[1] != protos.shape[1]:
        raise ValueError(f"z must be (B, D) and protos (P, D) with the same D; got {tuple(z.shape)}, "
                         f"{tuple(protos.shape)}")
    if y.shape != (z.shape[0],) or labels.shape != (protos.shape[0],):
        raise ValueError(f"y must be (B,) and labels (P,); got {tuple(y.shape)}, {tuple(labels.shape)}")


def proto_contrastive_loss(z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, labels: torch.Tensor,
                           tau: float = 0.06) -> torch.Tensor:
    """Prototype-topology-aware contrastive loss, mean over the samples whose class has a prototype:
    −log Σ_{g∈G+} exp(cos(z,g)/τ) / Σ_{g∈G+∪G−} exp(cos(z,g)/τ), G+ = every sub-prototype of the sample's class.
    Returns 0 (with a graph) when no sample has a prototype."""
    _check(z, y, protos, labels)
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    logits = F.normalize(z, dim=1) @ F.normalize(protos.to(z.dtype), dim=1).T / tau  # (B, P)
    pos = y[:, None] == labels.to(y.device)[None, :]
    has = pos.any(dim=1)
    if not bool(has.any()):
        return z.sum() * 0.0
    logits, pos = logits[has], pos[has]
    log_pos = torch.logsumexp(logits.masked_fill(~pos, float("-inf")), dim=1)
    return (torch.logsumexp(logits, dim=1) - log_pos).mean()


def proto_l2_loss(z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """FedProto's regulariser: mean squared distance of the unit-norm feature to its class's (single) prototype;
    with several prototypes per class, to the nearest one. Samples whose class has none are skipped."""
    _check(z, y, protos, labels)
    zn = F.normalize(z, dim=1)
    d2 = torch.cdist(zn, protos.to(z.dtype)) ** 2  # (B, P)
    pos = y[:, None] == labels.to(y.device)[None, :]
    has = pos.any(dim=1)
    if not bool(has.any()):
        return z.sum() * 0.0
    d2 = d2.masked_fill(~pos, float("inf"))[has]
    return d2.min(dim=1).values.mean()
