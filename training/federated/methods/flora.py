"""FLoRA: stacking-based heterogeneous LoRA.

State: the accumulated dense update ``"<layer>.dW"`` [out, in] (starts at 0). Each round a client merges dW into its
frozen base, re-initialises a fresh rank-r_i LoRA (random A seeded from (seed, round, client), zero B), trains it and
uploads ``A`` [r_i, in], ``B`` [out, r_i]. The server stacks the uploads, ``[p_1 B_1 | ... | p_n B_n] @ [A_1; ...;
A_n] = sum_i p_i B_i A_i`` (p_i the normalised weights), multiplies by the LoRA scale and adds it to dW. The
broadcast here is the dense dW (a client that skipped rounds cannot rebuild it from one round's stack).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from training.federated.methods.base import (
    FedMethod,
    State,
    Upload,
    add_dense_delta,
    dense_numel,
    drop_modules,
    zero_dense_state,
)
from training.federated.methods.hetlora import truncated_upload, validate_truncated
from training.peft.plora import ClientRound, iter_plora


def dense_shapes(state: State) -> dict[str, tuple[int, int]]:
    """``{layer: (in, out)}`` from the ``"<layer>.dW"`` entries."""
    return {k[: -len(".dW")]: (t.shape[1], t.shape[0]) for k, t in state.items() if k.endswith(".dW")}


def stacked_delta(uploads: Sequence[Upload], weights: Sequence[float], layer: str, scale: float) -> torch.Tensor:
    """``scale * [w_1 B_1 | ... ] @ [A_1; ...]`` in float64 (sorted by client id, so order-independent)."""
    pairs = sorted(zip(weights, uploads), key=lambda p: p[1].client_id)
    b = torch.cat([w * u.tensors[f"{layer}.B"].double() for w, u in pairs], dim=1)
    a = torch.cat([u.tensors[f"{layer}.A"].double() for _, u in pairs], dim=0)
    return scale * (b @ a)


class FLoRA(FedMethod):
    """Stacking aggregation with a fresh LoRA every round."""

    name = "flora"

    def init_state(self, model: nn.Module) -> State:
        return zero_dense_state(model)

    @torch.no_grad()
    def start_client(self, model: nn.Module, state: State, budget: int, rng: np.random.Generator) -> ClientRound:
        add_dense_delta(model, state)
        gen = torch.Generator().manual_seed(int(rng.integers(0, 2**31 - 1)))
        for _, layer in iter_plora(model):
            bound = 1.0 / math.sqrt(layer.base.in_features)
            layer.lora_A.uniform_(-bound, bound, generator=gen)
            layer.lora_B.zero_()
        return ClientRound(model=model, indices=drop_modules(model, budget))

    def upload(self, client: ClientRound) -> State:
        return truncated_upload(client)

    def validate(self, state: State, up: Upload) -> None:
        validate_truncated(dense_shapes(state), up, self.rank)

    def aggregate(self, state: State, uploads: Sequence[Upload]) -> State:
        out = {k: v.clone() for k, v in state.items()}
        if not uploads:
            return out
        w = self.weights(uploads)
        for n in dense_shapes(state):
            dw = out[f"{n}.dW"]
            out[f"{n}.dW"] = (dw.double() + stacked_delta(uploads, w, n, self.scale)).to(dw.dtype)
        return out

    def global_model(self, model: nn.Module, state: State) -> nn.Module:
        add_dense_delta(model, state)
        with torch.no_grad():
            for _, layer in iter_plora(model):
                layer.lora_B.zero_()
        return model

    def downlink_numel(self, state: State, budget: int) -> int:
        return dense_numel(state)
