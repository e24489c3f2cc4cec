"""Fed-PLoRA: parallel rank-1 LoRA modules with Select-N-Fold and per-module aggregation.

Framework-free (plain torch); the Flower strategy and client app are thin adapters over these functions.
See ``shared/methods/fed-plora.md``.
"""

from __future__ import annotations

from training.peft.plora.aggregate import (
    ClientUpdate,
    aggregate,
    aggregation_noise,
    init_noise,
    split_valid,
    validate_update,
)
from training.peft.plora.layer import (
    PLoRALinear,
    PLoRAState,
    apply_plora,
    iter_plora,
    load_plora_state,
    plora_state,
)
from training.peft.plora.select_fold import (
    ClientRound,
    client_rng,
    extract_update,
    model_rank,
    prepare_client,
    select_modules,
)

__all__ = [
    "ClientRound",
    "ClientUpdate",
    "PLoRALinear",
    "PLoRAState",
    "aggregate",
    "aggregation_noise",
    "apply_plora",
    "client_rng",
    "extract_update",
    "init_noise",
    "iter_plora",
    "load_plora_state",
    "model_rank",
    "plora_state",
    "prepare_client",
    "select_modules",
    "split_valid",
    "validate_update",
]
