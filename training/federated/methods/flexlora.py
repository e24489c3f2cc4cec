"""FlexLoRA: aggregate full-size updates, redistribute by truncated SVD.

State: the global dense update ``"<layer>.dW"`` [out, in] (starts at 0). A client with budget r_i gets the rank-r_i
truncated SVD ``dW ~ U_r S_r V_r^T`` as ``B = U_r sqrt(S_r / s)``, ``A = sqrt(S_r / s) V_r^T`` (s the LoRA scale), so
its start differs from the global function by the SVD tail (initialisation noise); directions with a zero singular
value (e.g. round 1) get the standard LoRA init (the base model's seeded random A, zero B). It trains and uploads
A [r_i, in], B [out, r_i]; the server sets ``dW = sum_i p_i s B_i A_i``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from training.federated.methods.base import FedMethod, State, Upload, drop_modules, factor_numel, zero_dense_state
from training.federated.methods.flora import dense_shapes, stacked_delta
from training.federated.methods.hetlora import truncated_upload, validate_truncated
from training.peft.plora import ClientRound, iter_plora


@torch.no_grad()
def svd_factors(dw: torch.Tensor, r: int, scale: float, eps: float = 1e-10) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Rank-r factors (A [r, in], B [out, r]) with ``scale * B @ A`` = best rank-r approximation of ``dw``; also the
    number of non-zero singular values used (the rest of the rows are zero)."""
    u, s, vh = torch.linalg.svd(dw.double(), full_matrices=False)
    r_eff = int((s[:r] > eps * max(float(s[0]) if s.numel() else 0.0, 1e-30)).sum()) if s.numel() else 0
    root = torch.sqrt(s[:r_eff] / scale)
    a = torch.zeros(r, dw.shape[1], dtype=torch.float64)
    b = torch.zeros(dw.shape[0], r, dtype=torch.float64)
    a[:r_eff] = root[:, None] * vh[:r_eff]
    b[:, :r_eff] = u[:, :r_eff] * root[None, :]
    return a.to(dw.dtype), b.to(dw.dtype), r_eff


class FlexLoRA(FedMethod):
    """Full-size aggregation with SVD-based redistribution."""

    name = "flexlora"

    def init_state(self, model: nn.Module) -> State:
        return zero_dense_state(model)

    @torch.no_grad()
    def start_client(self, model: nn.Module, state: State, budget: int, rng: np.random.Generator) -> ClientRound:
        for n, layer in iter_plora(model):
            a, b, r_eff = svd_factors(state[f"{n}.dW"], budget, self.scale)
            layer.lora_A[:r_eff] = a[:r_eff]  # rows >= r_eff keep the standard init from the base model
            layer.lora_B[:, :budget] = b
        return ClientRound(model=model, indices=drop_modules(model, budget))

    def upload(self, client: ClientRound) -> State:
        return truncated_upload(client)

    def validate(self, state: State, up: Upload) -> None:
        validate_truncated(dense_shapes(state), up, self.rank)

    def aggregate(self, state: State, uploads: Sequence[Upload]) -> State:
        if not uploads:
            return {k: v.clone() for k, v in state.items()}
        w = self.weights(uploads)
        return {f"{n}.dW": stacked_delta(uploads, w, n, self.scale).to(state[f"{n}.dW"].dtype)
                for n in dense_shapes(state)}

    @torch.no_grad()
    def global_model(self, model: nn.Module, state: State) -> nn.Module:
        for n, layer in iter_plora(model):
            w = layer.base.weight
            w.copy_((w.double() + state[f"{n}.dW"].double()).to(w.dtype))
            layer.lora_B.zero_()
        return model

    def downlink_numel(self, state: State, budget: int) -> int:
        return factor_numel(state, budget)

