"""Fed-PLoRA server side: validate client uploads and average each rank-1 module over the clients that trained it.

For module j with trainers Q_j: ``B_j <- sum_{i in Q_j} w_i B_ij / sum w_i`` (same for A_j), ``w_i`` = sample count
(default) or 1 (``weighting="uniform"``); if Q_j is empty the global value is kept. Clients are summed in sorted
``client_id`` order in float64, so the result does not depend on message order.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

log = logging.getLogger(__name__)

Weighting = Literal["samples", "uniform"]
GlobalState = Mapping[str, tuple[torch.Tensor, torch.Tensor]]


@dataclass
class ClientUpdate:
    """One client's upload: per layer, (A[K_i] [r_i, in], B[:, K_i] [out, r_i]) for the sorted indices K_i."""

    client_id: str
    num_samples: int
    indices: list[int]
    modules: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


def validate_update(global_state: GlobalState, update: ClientUpdate) -> None:
    """Raise ``ValueError`` naming the client if the update cannot be aggregated into ``global_state``."""
    cid = update.client_id

    def bad(msg: str) -> ValueError:
        return ValueError(f"client {cid!r}: {msg}")

    if isinstance(update.num_samples, bool) or not isinstance(update.num_samples, int) or update.num_samples < 1:
        raise bad(f"num_samples must be a positive int, got {update.num_samples!r}")
    idx = update.indices
    if not idx or any(isinstance(j, bool) or not isinstance(j, int) for j in idx):
        raise bad(f"indices must be a non-empty list of ints, got {idx!r}")
    if len(set(idx)) != len(idx):
        raise bad(f"duplicate module indices {idx}")
    if set(update.modules) != set(global_state):
        missing, extra = (
            sorted(set(global_state) - set(update.modules)),
            sorted(set(update.modules) - set(global_state)),
        )
        raise bad(f"layer mismatch (missing {missing}, unexpected {extra})")
    for name, (ga, gb) in global_state.items():
        rank, d_in, d_out = ga.shape[0], ga.shape[1], gb.shape[0]
        if min(idx) < 0 or max(idx) >= rank:
            raise bad(f"module indices {idx} out of range [0, {rank}) in layer {name}")
        pair = update.modules[name]
        if len(pair) != 2 or not all(isinstance(t, torch.Tensor) for t in pair):
            raise bad(f"layer {name}: expected an (A, B) tensor pair")
        a, b = pair
        if tuple(a.shape) != (len(idx), d_in) or tuple(b.shape) != (d_out, len(idx)):
            raise bad(
                f"layer {name}: shapes A{tuple(a.shape)} B{tuple(b.shape)}, "
                f"expected A{(len(idx), d_in)} B{(d_out, len(idx))}"
            )
        if not (a.is_floating_point() and b.is_floating_point()):
            raise bad(f"layer {name}: tensors must be floating point")
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            raise bad(f"layer {name}: non-finite values (NaN or inf)")


def split_valid(
    global_state: GlobalState, updates: Sequence[ClientUpdate]
) -> tuple[list[ClientUpdate], dict[str, str]]:
    """Partition updates into (valid, {client_id: reason}) so a server can exclude bad clients and go on."""
    valid: list[ClientUpdate] = []
    rejected: dict[str, str] = {}
    for u in updates:
        try:
            validate_update(global_state, u)
        except ValueError as e:
            rejected[str(u.client_id)] = str(e)
            log.warning("excluding update: %s", e)
        else:
            valid.append(u)
    return valid, rejected


def aggregate(
    global_state: GlobalState, updates: Sequence[ClientUpdate], *, weighting: Weighting = "samples"
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per-module weighted mean over the clients that trained each module; untouched modules keep global values.

    Every update is validated first; the first bad one raises ``ValueError`` naming its client (use
    ``split_valid`` to drop bad clients instead).
    """
    if weighting not in ("samples", "uniform"):
        raise ValueError(f"weighting must be 'samples' or 'uniform', got {weighting!r}")
    ids = [str(u.client_id) for u in updates]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate client ids in updates: {sorted(ids)}")
    for u in updates:
        validate_update(global_state, u)
    ordered = sorted(updates, key=lambda u: str(u.client_id))
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, (ga, gb) in global_state.items():
        rank = ga.shape[0]
        acc_a = torch.zeros(ga.shape, dtype=torch.float64)
        acc_b = torch.zeros(gb.shape, dtype=torch.float64)
        wsum = torch.zeros(rank, dtype=torch.float64)
        for u in ordered:
            w = float(u.num_samples) if weighting == "samples" else 1.0
            a, b = u.modules[name]
            acc_a[u.indices] += w * a.detach().to("cpu", torch.float64)
            acc_b[:, u.indices] += w * b.detach().to("cpu", torch.float64)
            wsum[u.indices] += w
        trained = wsum > 0
        new_a, new_b = ga.detach().clone(), gb.detach().clone()
        if bool(trained.any()):
            new_a[trained] = (acc_a[trained] / wsum[trained, None]).to(ga)
            new_b[:, trained] = (acc_b[:, trained] / wsum[trained]).to(gb)
        out[name] = (new_a, new_b)
    log.debug("aggregated %d updates over %d layers (%s weights)", len(updates), len(out), weighting)
    return out


def aggregation_noise(new_state: GlobalState, updates: Sequence[ClientUpdate]) -> float:
    """Methods-file bound: sum_j (1/|Q_j|) sum_{i in Q_j} (||B_ij - B_j|| + ||A_ij - A_j||), over all layers."""
    total = 0.0
    for name, (na, nb) in new_state.items():
        per_module: dict[int, list[float]] = {}
        for u in updates:
            a, b = u.modules[name]
            for k, j in enumerate(u.indices):
                d = float(torch.linalg.vector_norm(b[:, k].double() - nb[:, j].double()))
                d += float(torch.linalg.vector_norm(a[k].double() - na[j].double()))
                per_module.setdefault(j, []).append(d)
        total += sum(sum(v) / len(v) for v in per_module.values())
    return total


@torch.no_grad()
def init_noise(global_model: nn.Module, client_model: nn.Module, x: torch.Tensor, *more: torch.Tensor) -> float:
    """Initialisation noise at the start of a round: ``max |f_client(x) - f_global(x)|`` (0 for exact Select-N-Fold).

    Extra positional inputs (e.g. an attention mask) are passed to both models after ``x``.
    """
    diff = (client_model(x, *more).double() - global_model(x, *more).double()).abs()
    value = float(diff.max()) if diff.numel() else 0.0
    if not math.isfinite(value):
        raise ValueError("init_noise: non-finite model outputs")
    return value
