"""Test-only fault injection (``FedConfig.faults``): turn a client's good upload into a bad one, or drop it.

Kinds: ``nan`` (a NaN in the first tensor), ``shape`` (first tensor gets an extra column), ``rank`` (claims a budget
of 2R and pads its tensors to match), ``crash`` (the client raises mid-round, i.e. drops out; Flower reports an
error reply, the plain loop records the exception).
"""

from __future__ import annotations

import torch

from training.federated.methods.base import Upload


class InjectedDropout(RuntimeError):
    """Raised by a client configured with fault ``crash``."""


def inject_fault(up: Upload, kind: str, rank: int) -> Upload:
    """A corrupted copy of ``up`` (``crash`` raises ``InjectedDropout``)."""
    tensors = {k: v.clone() for k, v in up.tensors.items()}
    first = sorted(tensors)[0]
    if kind == "crash":
        raise InjectedDropout(f"client {up.client_id}: injected dropout mid-round")
    if kind == "nan":
        tensors[first].view(-1)[0] = float("nan")
        return Upload(up.client_id, up.num_samples, up.budget, tensors)
    if kind == "shape":
        t = tensors[first]
        tensors[first] = torch.cat([t, t[..., :1]], dim=-1) if t.dim() else t.reshape(1)
        return Upload(up.client_id, up.num_samples, up.budget, tensors)
    if kind == "rank":
        return Upload(up.client_id, up.num_samples, 2 * rank, tensors)
    raise ValueError(f"unknown fault kind {kind!r}")
