"""HETLoRA: heterogeneous ranks by truncation and zero-padding.

State: the global rank-R ``"<layer>.A"`` / ``"<layer>.B"``. A client with budget r_i keeps the first r_i modules and
drops the rest (truncation, so its start differs from the global function: initialisation noise), trains them and
uploads ``A[:r_i]``, ``B[:, :r_i]``. The server zero-pads every upload to rank R and takes the weighted mean over all
clients of the round, so high-rank modules are shrunk by the clients that lack them (a module no client of the round
covers keeps its global value, otherwise A = B = 0 would kill it for good). HetLoRA's rank self-pruning and
sparsity-weighted aggregation are not implemented (plain zero-pad averaging).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from training.federated.methods.base import FedMethod, State, Upload, drop_modules
from training.federated.methods.fedplora import from_state, to_state
from training.peft.plora import ClientRound, iter_plora, load_plora_state, plora_state


def truncated_upload(client: ClientRound) -> State:
    """``"<layer>.A"`` [r, in] and ``"<layer>.B"`` [out, r] of the client's first r modules."""
    r = len(client.indices)
    out: State = {}
    for name, layer in iter_plora(client.model):
        out[f"{name}.A"] = layer.lora_A.detach()[:r].clone()
        out[f"{name}.B"] = layer.lora_B.detach()[:, :r].clone()
    return out


def validate_truncated(shapes: dict[str, tuple[int, int]], up: Upload, rank: int) -> int:
    """Check an upload of rank-r factors against layer shapes ``{layer: (in, out)}``; returns r."""
    cid = up.client_id
    expected = {f"{n}.{ab}" for n in shapes for ab in "AB"}
    if set(up.tensors) != expected:
        raise ValueError(f"client {cid!r}: keys mismatch (missing {sorted(expected - set(up.tensors))[:3]}, "
                         f"unexpected {sorted(set(up.tensors) - expected)[:3]})")
    r = up.budget
    for n, (d_in, d_out) in shapes.items():
        a, b = up.tensors[f"{n}.A"], up.tensors[f"{n}.B"]
        if tuple(a.shape) != (r, d_in) or tuple(b.shape) != (d_out, r):
            raise ValueError(f"client {cid!r}: layer {n}: shapes A{tuple(a.shape)} B{tuple(b.shape)}, expected "
                             f"A{(r, d_in)} B{(d_out, r)} for rank budget {r} (R={rank})")
    return r


class HetLoRA(FedMethod):
    """Zero-pad / truncate heterogeneous LoRA."""

    name = "hetlora"

    def init_state(self, model: nn.Module) -> State:
        return to_state(plora_state(model))

    def start_client(self, model: nn.Module, state: State, budget: int, rng: np.random.Generator) -> ClientRound:
        load_plora_state(model, from_state(state))
        return ClientRound(model=model, indices=drop_modules(model, budget))

    def upload(self, client: ClientRound) -> State:
        return truncated_upload(client)

    def validate(self, state: State, up: Upload) -> None:
        shapes = {n: (a.shape[1], b.shape[0]) for n, (a, b) in from_state(state).items()}
        validate_truncated(shapes, up, self.rank)

    def aggregate(self, state: State, uploads: Sequence[Upload]) -> State:
        if not uploads:
            return {k: v.clone() for k, v in state.items()}
        w = self.weights(uploads)
        out: State = {}
        for n, (ga, gb) in from_state(state).items():
            acc_a = torch.zeros(ga.shape, dtype=torch.float64)
            acc_b = torch.zeros(gb.shape, dtype=torch.float64)
            for wi, u in sorted(zip(w, uploads), key=lambda p: p[1].client_id):
                r = u.budget
                acc_a[:r] += wi * u.tensors[f"{n}.A"].double()
                acc_b[:, :r] += wi * u.tensors[f"{n}.B"].double()
            covered = max(u.budget for u in uploads)
            new_a, new_b = ga.clone(), gb.clone()
            new_a[:covered], new_b[:, :covered] = acc_a[:covered].to(ga.dtype), acc_b[:, :covered].to(gb.dtype)
            out[f"{n}.A"], out[f"{n}.B"] = new_a, new_b
        return out

    def global_model(self, model: nn.Module, state: State) -> nn.Module:
        load_plora_state(model, from_state(state))
        return model

    def downlink_numel(self, state: State, budget: int) -> int:
        return sum(budget * (t.shape[1] if k.endswith(".A") else t.shape[0]) for k, t in state.items())
