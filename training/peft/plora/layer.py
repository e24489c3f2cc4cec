"""PLoRA linear layer: a frozen ``nn.Linear`` plus R parallel rank-1 LoRA modules.

Module j is the pair (B[:, j], A[j, :]); the layer computes ``base(x) + s * sum_{j active} B[:, j] (A[j, :] x)``
with one scale ``s = alpha / R`` on every client (the methods file's pitfall: never ``alpha / r_i``).
No LoRA dropout: with dropout, folding would not be equivalent to masking.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import torch
from torch import nn

log = logging.getLogger(__name__)

PLoRAState = dict[str, tuple[torch.Tensor, torch.Tensor]]
"""Layer name -> (A [R, in], B [out, R]): the full global module values, one entry per adapted layer."""


def _as_indices(indices: Iterable[int] | None, rank: int) -> list[int]:
    """Sorted unique indices in ``[0, rank)``; ``None`` means all of them."""
    if indices is None:
        return list(range(rank))
    out = sorted({int(j) for j in indices})
    if out and (out[0] < 0 or out[-1] >= rank):
        raise ValueError(f"module indices {out} out of range for rank {rank}")
    return out


class PLoRALinear(nn.Module):
    """Frozen linear layer with ``rank`` parallel, independently foldable rank-1 adapters."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"PLoRALinear wraps nn.Linear, got {type(base).__name__}")
        if rank < 1:
            raise ValueError(f"rank must be >= 1, got {rank}")
        if not math.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"alpha must be a positive finite number, got {alpha}")
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.rank = int(rank)
        self.alpha = float(alpha)
        self.scale = self.alpha / self.rank
        w = base.weight
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, dtype=w.dtype, device=w.device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=w.dtype, device=w.device))
        # Same init as standard LoRA (kaiming-uniform A, zero B), so the adapted model starts equal to the base.
        bound = 1.0 / math.sqrt(base.in_features)
        with torch.no_grad():
            self.lora_A.uniform_(-bound, bound, generator=generator)
        self.register_buffer("active", torch.ones(rank, dtype=torch.bool, device=w.device), persistent=False)
        self._folded: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    # ----------------------------------------------------------------------------------------------- indices
    @property
    def active_indices(self) -> list[int]:
        """Indices of the modules used in ``forward`` (the trainable ones on a client)."""
        return torch.nonzero(self.active).flatten().tolist()

    @property
    def folded_indices(self) -> list[int]:
        """Indices currently folded into the base weight."""
        return sorted(self._folded)

    # ----------------------------------------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        n_active = int(self.active.sum())
        if n_active == 0:
            return out
        if n_active == self.rank:
            a, b = self.lora_A, self.lora_B
        else:
            idx = torch.nonzero(self.active).flatten()
            a, b = self.lora_A[idx], self.lora_B[:, idx]
        return out + self.scale * ((x @ a.T) @ b.T)

    def delta_weight(self, indices: Iterable[int] | None = None) -> torch.Tensor:
        """``s * sum_{j in indices} B[:, j] A[j, :]`` as an [out, in] tensor (all modules if ``None``)."""
        idx = _as_indices(indices, self.rank)
        if not idx:
            return torch.zeros_like(self.base.weight)
        return self.scale * (self.lora_B[:, idx] @ self.lora_A[idx])

    # -------------------------------------------------------------------------------------------- fold/unfold
    @torch.no_grad()
    def fold(self, indices: Iterable[int]) -> None:
        """Add the modules' delta to the frozen base weight, then zero and deactivate them.

        The delta is accumulated in float64 before one rounding to the weight dtype. The folded values are
        kept aside (R x (in + out) at most) so ``unfold`` can restore them. Zeroed modules get zero gradients
        and zero optimiser updates (SGD, Adam, AdamW alike), so they stay out of training.
        """
        idx = _as_indices(indices, self.rank)
        already = [j for j in idx if j in self._folded]
        if already:
            raise ValueError(f"modules {already} are already folded")
        if not idx:
            return
        w = self.base.weight
        delta = self.scale * (self.lora_B[:, idx].double() @ self.lora_A[idx].double())
        w.copy_((w.double() + delta).to(w.dtype))
        for j in idx:
            self._folded[j] = (self.lora_A[j].detach().clone(), self.lora_B[:, j].detach().clone())
        self.lora_A[idx] = 0.0
        self.lora_B[:, idx] = 0.0
        self.active[idx] = False

    @torch.no_grad()
    def unfold(self) -> list[int]:
        """Subtract the folded modules from the base weight and restore them; returns the restored indices.

        Exact up to one float rounding of the base weight; reload a pristine base for bit-exactness.
        """
        idx = self.folded_indices
        if not idx:
            return []
        a = torch.stack([self._folded[j][0] for j in idx])
        b = torch.stack([self._folded[j][1] for j in idx], dim=1)
        w = self.base.weight
        delta = self.scale * (b.double() @ a.double())
        w.copy_((w.double() - delta).to(w.dtype))
        self.lora_A[idx] = a
        self.lora_B[:, idx] = b
        self.active[idx] = True
        self._folded.clear()
        return idx

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha}, active={len(self.active_indices)}"


# --------------------------------------------------------------------------------------------------- model helpers
Target = str | Callable[[str, nn.Module], bool]


def apply_plora(
    model: nn.Module,
    target: Target,
    rank: int,
    alpha: float,
    *,
    freeze_base: bool = True,
    generator: torch.Generator | None = None,
) -> list[str]:
    """Replace every ``nn.Linear`` whose qualified name matches ``target`` by a ``PLoRALinear``.

    ``target`` is a regex (``re.search`` on the module name) or a predicate ``(name, module) -> bool``.
    With ``freeze_base`` every pre-existing parameter of ``model`` is frozen. Returns the replaced names.
    """
    match: Callable[[str, nn.Module], bool]
    if isinstance(target, str):
        pattern = re.compile(target)
        match = lambda name, _m: pattern.search(name) is not None
    else:
        match = target
    if freeze_base:
        for p in model.parameters():
            p.requires_grad_(False)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n and match(n, m)]
    if not names:
        raise ValueError(f"apply_plora: no nn.Linear matched target {target!r}")
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, PLoRALinear(getattr(parent, child), rank, alpha, generator=generator))
    log.info("apply_plora: %d layers, rank %d, alpha %g", len(names), rank, alpha)
    return names


def iter_plora(model: nn.Module) -> Iterator[tuple[str, PLoRALinear]]:
    """Yield ``(name, layer)`` for every PLoRA layer, in module order."""
    for name, m in model.named_modules():
        if isinstance(m, PLoRALinear):
            yield name, m


def plora_state(model: nn.Module) -> PLoRAState:
    """Detached copies of every layer's full (A, B); folded modules are reported with their pre-fold values."""
    out: PLoRAState = {}
    for name, layer in iter_plora(model):
        a, b = layer.lora_A.detach().clone(), layer.lora_B.detach().clone()
        for j, (aj, bj) in layer._folded.items():
            a[j], b[:, j] = aj, bj
        out[name] = (a, b)
    return out


@torch.no_grad()
def load_plora_state(
    model: nn.Module, state: Mapping[str, Sequence[torch.Tensor]], indices: Iterable[int] | None = None
) -> None:
    """Copy modules ``indices`` (all if ``None``) of a full state into the model's unfolded PLoRA layers."""
    layers = dict(iter_plora(model))
    if set(layers) != set(state):
        raise ValueError(f"state layers {sorted(state)} do not match model layers {sorted(layers)}")
    for name, layer in layers.items():
        if layer.folded_indices:
            raise ValueError(f"{name}: unfold before loading a state (folded {layer.folded_indices})")
        a, b = state[name]
        if tuple(a.shape) != tuple(layer.lora_A.shape) or tuple(b.shape) != tuple(layer.lora_B.shape):
            raise ValueError(f"{name}: state shapes {tuple(a.shape)}, {tuple(b.shape)} do not match the layer")
        idx = _as_indices(indices, layer.rank)
        layer.lora_A[idx] = a[idx].to(layer.lora_A)
        layer.lora_B[:, idx] = b[:, idx].to(layer.lora_B)
