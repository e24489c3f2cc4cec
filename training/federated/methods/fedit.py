"""FedIT: homogeneous-rank federated LoRA (every client trains all R modules; plain FedAvg of A and B).

The reference that ignores the clients' rank budgets (as if every client could afford rank R). With every module
selected, Fed-PLoRA's per-module mean is exactly FedAvg of A and B, so FedIT reuses its math.
"""

from __future__ import annotations

from training.federated.methods.fedplora import FedPLoRA


class FedIT(FedPLoRA):
    """FedAvg of a rank-R LoRA on every client."""

    name = "fedit"
    heterogeneous = False
