"""EWC on the core *as each learned (scene, env) pair sees it* (``DKILConfig.core_fisher = "pair"``).

A task ``(s, e)`` depends on the core ``G`` (r1 x r2 x r3 x r4) and on its two expert rows only through the
contraction ``C_se = G x3 U3[s] x4 U4[e]`` (r1 x r2). The diagonal Fisher of DKIL's default EWC term treats the
``r3 * r4`` expert-mode coordinates of ``G`` as independent and says nothing about the expert rows, so a later task
that reuses a row (a second building's night reuses the night expert) can rewrite ``C`` of an earlier pair freely.
This term instead anchors ``C_p`` of every learned pair ``p``, as a function of the live ``G``, ``U3[s]`` and
``U4[e]``:

``L_pair = sum_p sum_layers sum_ij F_p[ij] (C_p[ij] - C*_p[ij])^2 / rms(C*_p)^2``

- ``F_p`` is the diagonal Fisher of the task loss in ``C_p`` (exact: ``dL/dG = dL/dC (x) U3[s] (x) U4[e]`` when
  the forward uses that one route, so ``dL/dC = (dL/dG x3 U3[s] x4 U4[e]) / (|U3[s]|^2 |U4[e]|^2)``);
- the division by the mean square of ``C*_p`` makes it a relative change of the pair's own core (the Fisher is
  normalised by ``DKILConfig.fisher_norm`` as the diagonal one is), so the term does not depend on the scale of
  ``G`` or of the rows: a whole rewrite of one pair's core in one layer costs about ``r1 * r2``. Measured in
  ``G``'s own units instead, it would be ``r3 * r4`` times weaker than the diagonal term for the same drift;
- a change of ``G`` orthogonal to every learned pair's ``U3[s] (x) U4[e]`` costs nothing; a reused row moves
  freely only where no earlier pair's contraction changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

Pair = tuple[int, int]


def pair_key(layer: str, pair: Pair) -> str:
    """``"<layer>.C.<s>.<e>"``: the key of one pair's contraction in one layer."""
    return f"{layer}.C.{pair[0]}.{pair[1]}"


def contract(g: torch.Tensor, u3: torch.Tensor, u4: torch.Tensor) -> torch.Tensor:
    """``G x3 u3 x4 u4`` (r1 x r2) in fp32, differentiable in all three."""
    return torch.einsum("ijkl,k,l->ij", g.float(), u3.float(), u4.float())


def core_grad_to_pair(grad_g: torch.Tensor, u3: torch.Tensor, u4: torch.Tensor) -> torch.Tensor:
    """``dL/dC`` from ``dL/dG`` of a forward routed through ``(u3, u4)`` (see the module docstring)."""
    scale = (u3.float().pow(2).sum() * u4.float().pow(2).sum()).clamp_min(1e-30)
    return contract(grad_g, u3, u4) / scale


def pair_snapshot(factors: Mapping[str, Mapping[str, torch.Tensor]], pairs: set[Pair]
                  ) -> dict[str, tuple[torch.Tensor, float]]:
    """``{pair_key: (C*, rms(C*))}`` for every layer and learned pair, detached."""
    out: dict[str, tuple[torch.Tensor, float]] = {}
    with torch.no_grad():
        for ln, f in factors.items():
            for s, e in sorted(pairs):
                c = contract(f["G"], f["U3"][s], f["U4"][e]).clone()
                out[pair_key(ln, (s, e))] = (c, max(float(c.pow(2).mean().sqrt()), 1e-12))
    return out


def pair_penalty(factors: Mapping[str, Mapping[str, torch.Tensor]], pairs: set[Pair],
                 anchors: Mapping[str, tuple[torch.Tensor, float]], fisher: Mapping[str, torch.Tensor]
                 ) -> torch.Tensor:
    """``L_pair`` over ``pairs`` (those with an anchor and a Fisher; ``fisher`` already normalised)."""
    total: torch.Tensor | None = None
    for ln, f in factors.items():
        for pair in sorted(pairs):
            key = pair_key(ln, pair)
            if key not in anchors or key not in fisher:
                continue
            ref, norm = anchors[key]
            c = contract(f["G"], f["U3"][pair[0]], f["U4"][pair[1]])
            term = (fisher[key].to(c) * (c - ref.to(c)) ** 2).sum() / norm ** 2
            total = term if total is None else total + term
    if total is None:
        any_p = next(iter(next(iter(factors.values())).values()))
        return any_p.new_zeros((), dtype=torch.float32)
    return total


def pair_freedom(u3: torch.Tensor, u4: torch.Tensor, held: set[Pair] | list[Pair], pair: Pair) -> float:
    """How much of ``pair``'s core direction ``u3[s] (x) u4[e]`` lies outside the span of the ``held`` pairs'
    directions, as a fraction of its norm (0: none, 1: orthogonal to all of them).

    Under ``core_fisher="pair"`` the core ``G`` can change a new pair's contraction without moving a held pair's
    only along that outside part, so a pair whose two rows are both reused (and anchored by held pairs) learns
    through ``G`` at a rate that scales with this number. A row copied from another one gives 0 until it moves."""
    s, e = pair
    held = [p for p in held if p != pair]
    a3, a4 = u3.detach().double(), u4.detach().double()
    own = float(a3[s].dot(a3[s]) * a4[e].dot(a4[e]))
    if own <= 0.0:
        return 0.0
    if not held:
        return 1.0
    i3 = torch.tensor([p[0] for p in held])
    i4 = torch.tensor([p[1] for p in held])
    gram = (a3[i3] @ a3[i3].T) * (a4[i4] @ a4[i4].T)  # <u3[s']u4[e'], u3[s'']u4[e'']> = (u3.u3)(u4.u4)
    cross = (a3[i3] @ a3[s]) * (a4[i4] @ a4[e])
    inside = float(cross @ torch.linalg.pinv(gram, hermitian=True) @ cross)
    return math.sqrt(max(own - inside, 0.0) / own)
