"""Fed-PLoRA: R parallel rank-1 modules, per-round uniform selection, Select-N-Fold, per-module averaging.

State: ``"<layer>.A"`` [R, in] and ``"<layer>.B"`` [out, R]. A client with budget r_i loads all R modules, picks r_i
of them (seeded from (seed, round, client)), folds the others into its frozen base (so it starts from exactly the
global function) and uploads its modules by index as ``"<layer>.<j>.A"`` [in] / ``"<layer>.<j>.B"`` [out]. The
server averages each module over the clients that trained it (``training.peft.plora.aggregate``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from training.federated.methods.base import FedMethod, State, Upload
from training.peft.plora import (
    ClientRound,
    ClientUpdate,
    aggregate,
    extract_update,
    load_plora_state,
    plora_state,
    prepare_client,
    validate_update,
)

_KEY = re.compile(r"^(?P<layer>.+)\.(?P<j>\d+)\.(?P<ab>[AB])$")


def to_state(pstate: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> State:
    out: State = {}
    for name, (a, b) in pstate.items():
        out[f"{name}.A"], out[f"{name}.B"] = a, b
    return out


def from_state(state: State) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    layers = sorted({k[:-2] for k in state if k.endswith((".A", ".B"))})
    try:
        return {n: (state[f"{n}.A"], state[f"{n}.B"]) for n in layers}
    except KeyError as e:
        raise ValueError(f"PLoRA state is missing {e.args[0]}") from None


def update_to_tensors(update: ClientUpdate) -> State:
    """Per-module upload keyed by rank index: ``"<layer>.<j>.A"`` / ``"<layer>.<j>.B"``."""
    out: State = {}
    for name, (a, b) in update.modules.items():
        for k, j in enumerate(update.indices):
            out[f"{name}.{j}.A"] = a[k].clone()
            out[f"{name}.{j}.B"] = b[:, k].clone()
    return out


def tensors_to_update(up: Upload) -> ClientUpdate:
    """Inverse of ``update_to_tensors``; raises ``ValueError`` on malformed keys or uneven module sets."""
    per_layer: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for key, t in up.tensors.items():
        m = _KEY.match(key)
        if m is None:
            raise ValueError(f"client {up.client_id!r}: unexpected upload key {key!r}")
        per_layer.setdefault(m["layer"], {}).setdefault(int(m["j"]), {})[m["ab"]] = t
    if not per_layer:
        raise ValueError(f"client {up.client_id!r}: empty upload")
    index_sets = {name: sorted(mods) for name, mods in per_layer.items()}
    indices = next(iter(index_sets.values()))
    if any(v != indices for v in index_sets.values()):
        raise ValueError(f"client {up.client_id!r}: layers upload different module indices {index_sets}")
    modules = {}
    for name, mods in per_layer.items():
        if any(set(mods[j]) != {"A", "B"} for j in indices):
            raise ValueError(f"client {up.client_id!r}: layer {name} lacks an A or B vector")
        if any(mods[j][ab].dim() != 1 for j in indices for ab in "AB"):
            raise ValueError(f"client {up.client_id!r}: layer {name}: module vectors must be 1-D (wrong shape)")
        if len({mods[j]["A"].shape for j in indices}) > 1 or len({mods[j]["B"].shape for j in indices}) > 1:
            raise ValueError(f"client {up.client_id!r}: layer {name}: modules of different shapes")
        modules[name] = (torch.stack([mods[j]["A"] for j in indices]), torch.stack([mods[j]["B"] for j in indices], 1))
    return ClientUpdate(client_id=up.client_id, num_samples=up.num_samples, indices=indices, modules=modules)


class FedPLoRA(FedMethod):
    """Fed-PLoRA (parallel one-rank adaptation)."""

    name = "fedplora"

    def init_state(self, model: nn.Module) -> State:
        return to_state(plora_state(model))

    def start_client(self, model: nn.Module, state: State, budget: int, rng: np.random.Generator) -> ClientRound:
        load_plora_state(model, from_state(state))
        return prepare_client(model, self.effective_budget(budget), rng, inplace=True)

    def upload(self, client: ClientRound) -> State:
        return update_to_tensors(extract_update(client, "self", num_samples=1))

    def validate(self, state: State, up: Upload) -> None:
        update = tensors_to_update(up)
        if len(update.indices) != self.effective_budget(up.budget):
            raise ValueError(
                f"client {up.client_id!r}: uploaded {len(update.indices)} modules but its rank budget is {up.budget}"
            )
        validate_update(from_state(state), update)

    def aggregate(self, state: State, uploads: Sequence[Upload]) -> State:
        updates = [tensors_to_update(u) for u in uploads]
        return to_state(aggregate(from_state(state), updates, weighting=self.weighting))  # type: ignore[arg-type]

    def global_model(self, model: nn.Module, state: State) -> nn.Module:
        load_plora_state(model, from_state(state))
        return model

    def downlink_numel(self, state: State, budget: int) -> int:
        return sum(int(t.numel()) for t in state.values())
