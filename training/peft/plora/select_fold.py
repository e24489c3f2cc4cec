"""Fed-PLoRA client side: seeded module selection, Select-N-Fold and update extraction.

A client with budget r_i picks r_i of the R modules uniformly without replacement, folds every other module into its
frozen base (so its starting function equals the global one: zero initialisation noise) and trains only the picked
modules. The same index set is used for every PLoRA layer of the model.
"""

from __future__ import annotations

import copy
import logging
import zlib
from dataclasses import dataclass

import numpy as np
from torch import nn

from training.peft.plora.aggregate import ClientUpdate
from training.peft.plora.layer import iter_plora

log = logging.getLogger(__name__)


def client_rng(seed: int, round_idx: int, client_id: int | str) -> np.random.Generator:
    """Generator seeded from (seed, round, client id), so simulated selections are reproducible."""
    cid = client_id if isinstance(client_id, int) else zlib.crc32(str(client_id).encode())
    if cid < 0 or seed < 0 or round_idx < 0:
        raise ValueError(f"seed, round and client id must be >= 0, got {seed}, {round_idx}, {client_id}")
    return np.random.default_rng(np.random.SeedSequence([seed, round_idx, cid]))


def select_modules(rank: int, budget: int, rng: np.random.Generator) -> list[int]:
    """Sorted ``budget`` distinct module indices drawn uniformly from ``range(rank)``."""
    if rank < 1:
        raise ValueError(f"rank must be >= 1, got {rank}")
    if not 1 <= budget <= rank:
        raise ValueError(f"budget must be in [1, R={rank}], got {budget}")
    return sorted(int(j) for j in rng.choice(rank, size=budget, replace=False))


def model_rank(model: nn.Module) -> int:
    """The common rank R of every PLoRA layer; raises if there are none or they differ."""
    ranks = {layer.rank for _, layer in iter_plora(model)}
    if not ranks:
        raise ValueError("model has no PLoRA layers")
    if len(ranks) > 1:
        raise ValueError(f"PLoRA layers have different ranks {sorted(ranks)}; selection needs one R")
    return ranks.pop()


@dataclass
class ClientRound:
    """A client's model for one round: unselected modules folded, ``indices`` active and trainable."""

    model: nn.Module
    indices: list[int]

    def __post_init__(self) -> None:
        if not self.indices or self.indices != sorted(set(self.indices)):
            raise ValueError(f"indices must be non-empty, sorted and unique, got {self.indices}")


def fold_unselected(model: nn.Module, indices: list[int]) -> None:
    """Fold every module not in ``indices`` into the base weights of all PLoRA layers, in place."""
    rank = model_rank(model)
    keep = set(indices)
    if any(not 0 <= j < rank for j in keep):
        raise ValueError(f"indices {sorted(keep)} out of range for rank {rank}")
    for name, layer in iter_plora(model):
        if layer.folded_indices:
            raise ValueError(f"{name}: model already has folded modules {layer.folded_indices}")
        layer.fold([j for j in range(rank) if j not in keep])


def prepare_client(
    global_model: nn.Module, budget: int, rng: np.random.Generator, *, inplace: bool = False
) -> ClientRound:
    """Select-N-Fold: copy the global model, pick ``budget`` modules and fold all the others into the base.

    ``global_model`` holds the pristine base W0 and the current global modules (see ``load_plora_state``). The
    returned model computes the same function as ``global_model`` up to one float rounding of each base weight.
    """
    rank = model_rank(global_model)
    indices = select_modules(rank, budget, rng)
    model = global_model if inplace else copy.deepcopy(global_model)
    fold_unselected(model, indices)
    log.debug("prepare_client: budget %d of R=%d -> modules %s", budget, rank, indices)
    return ClientRound(model=model, indices=indices)


def extract_update(client: ClientRound, client_id: str, num_samples: int) -> ClientUpdate:
    """The upload: for each PLoRA layer, (A[K_i] [r_i, in], B[:, K_i] [out, r_i]) keyed by layer name."""
    idx = client.indices
    modules = {
        name: (layer.lora_A.detach()[idx].clone(), layer.lora_B.detach()[:, idx].clone())
        for name, layer in iter_plora(client.model)
    }
    return ClientUpdate(client_id=client_id, num_samples=num_samples, indices=list(idx), modules=modules)
