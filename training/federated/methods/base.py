"""The ``FedMethod`` interface every federated method implements, plus helpers shared by the LoRA methods.

A method owns three pieces of math, all framework-free:

- server state: ``State`` = flat ``{key: tensor}`` (what is checkpointed and broadcast; ``init_state``),
- client side: ``start_client`` turns a fresh copy of the frozen base model + the broadcast state into the model a
  client with rank budget r_i trains (``ClientRound``: the model and its trainable module indices), and ``upload``
  extracts what the client sends back (flat ``{key: tensor}``),
- server side: ``validate`` (raise ``ValueError`` with the reason) and ``aggregate`` (valid uploads -> new state);
  ``global_model`` loads a state into a base model for evaluation.

The Flower apps (``training.federated.flower``) and the plain loop (``training.federated.loop``) both only call
these functions, so both runtimes run the same math. ``*_numel`` give the protocol's communication cost per
client (float32 values); the Flower apps broadcast the full state for simplicity and report the same counts.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from training.peft.plora import ClientRound, iter_plora

State = dict[str, torch.Tensor]


@dataclass
class Upload:
    """One client's reply: its id, sample count, rank budget and tensors."""

    client_id: str
    num_samples: int
    budget: int
    tensors: State = field(default_factory=dict)


class FedMethod(ABC):
    """Base class; subclasses set ``name`` and implement the abstract methods."""

    name: ClassVar[str] = ""
    #: whether clients train their own budget r_i (False: everyone trains the full rank R, e.g. FedIT)
    heterogeneous: ClassVar[bool] = True

    def __init__(self, rank: int, scale: float, weighting: str = "samples") -> None:
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        if weighting not in ("samples", "uniform"):
            raise ValueError(f"weighting must be 'samples' or 'uniform', got {weighting!r}")
        self.rank, self.scale, self.weighting = int(rank), float(scale), weighting

    def effective_budget(self, budget: int) -> int:
        """The rank a client with budget r_i trains under this method."""
        return budget if self.heterogeneous else self.rank

    @abstractmethod
    def init_state(self, model: nn.Module) -> State: ...

    @abstractmethod
    def start_client(self, model: nn.Module, state: State, budget: int, rng: np.random.Generator) -> ClientRound:
        """Set up ``model`` (a fresh copy of the frozen base, modified in place) for one round of local training."""

    @abstractmethod
    def upload(self, client: ClientRound) -> State: ...

    @abstractmethod
    def validate(self, state: State, up: Upload) -> None: ...

    @abstractmethod
    def aggregate(self, state: State, uploads: Sequence[Upload]) -> State: ...

    @abstractmethod
    def global_model(self, model: nn.Module, state: State) -> nn.Module:
        """Load ``state`` into ``model`` (a fresh copy of the frozen base) so it computes the global function."""

    @abstractmethod
    def downlink_numel(self, state: State, budget: int) -> int: ...

    def uplink_numel(self, up: Upload) -> int:
        return sum(int(t.numel()) for t in up.tensors.values())

    def split_valid(self, state: State, uploads: Sequence[Upload]) -> tuple[list[Upload], dict[str, str]]:
        """(valid uploads, {client_id: reason}) using ``validate``."""
        valid, rejected = [], {}
        for u in uploads:
            try:
                check_common(u, self.rank)
                self.validate(state, u)
            except ValueError as e:
                rejected[u.client_id] = str(e)
            else:
                valid.append(u)
        return valid, rejected

    def weights(self, uploads: Sequence[Upload]) -> list[float]:
        w = [float(u.num_samples) if self.weighting == "samples" else 1.0 for u in uploads]
        total = sum(w)
        return [x / total for x in w]


# ------------------------------------------------------------------------------------------------------ helpers
def check_common(up: Upload, rank: int) -> None:
    """Checks every method shares: positive sample count, budget in [1, R], finite floating tensors."""
    cid = up.client_id
    if isinstance(up.num_samples, bool) or not isinstance(up.num_samples, int) or up.num_samples < 1:
        raise ValueError(f"client {cid!r}: num_samples must be a positive int, got {up.num_samples!r}")
    if isinstance(up.budget, bool) or not isinstance(up.budget, int) or not 1 <= up.budget <= rank:
        raise ValueError(f"client {cid!r}: rank budget {up.budget!r} outside [1, R={rank}]")
    for k, t in up.tensors.items():
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise ValueError(f"client {cid!r}: {k} is not a floating-point tensor")
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"client {cid!r}: {k} has non-finite values (NaN or inf)")


@torch.no_grad()
def drop_modules(model: nn.Module, keep: int) -> list[int]:
    """Zero and deactivate modules ``keep..R-1`` of every PLoRA layer (truncation, NOT a fold: the function
    changes). Returns the kept indices ``[0, keep)``."""
    for _, layer in iter_plora(model):
        layer.lora_A[keep:] = 0.0
        layer.lora_B[:, keep:] = 0.0
        layer.active[:] = False
        layer.active[:keep] = True
    return list(range(keep))


def zero_dense_state(model: nn.Module) -> State:
    """A zero full-size update ``"<layer>.dW"`` per PLoRA layer (the state of the dense-delta methods)."""
    return {f"{n}.dW": torch.zeros_like(layer.base.weight) for n, layer in iter_plora(model)}


@torch.no_grad()
def add_dense_delta(model: nn.Module, state: State) -> None:
    """``W0 += dW`` for every layer with a ``"<layer>.dW"`` entry (float64 accumulation, one rounding)."""
    for name, layer in iter_plora(model):
        dw = state[f"{name}.dW"]
        w = layer.base.weight
        w.copy_((w.double() + dw.double()).to(w.dtype))


def dense_numel(state: State) -> int:
    return sum(int(t.numel()) for k, t in state.items() if k.endswith(".dW"))


def factor_numel(model_or_state: State, budget: int) -> int:
    """Values in rank-``budget`` factors (A [r, in], B [out, r]) for every dense ``dW`` [out, in] in ``state``."""
    return sum(budget * (t.shape[0] + t.shape[1]) for k, t in model_or_state.items() if k.endswith(".dW"))


def fresh_copy(base: nn.Module) -> nn.Module:
    return copy.deepcopy(base)
