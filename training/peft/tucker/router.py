"""Expert routing without a task id: scene and environment prototype banks of visual features.

During training, ``router.add(features, scene=s, env=e)`` accumulates the features of task (s, e) into one
prototype per scene and one per environment (the mean feature). At test time ``router.route(features)``
picks, independently, the scene and the environment whose prototype has the highest cosine similarity with
the (mean of the) query features. With ``center=True`` (default) features and prototypes are first centred
on the mean of everything stored, which removes the large common component of CLIP-like features.

``memory=N`` (N > 0) keeps, besides the mean, up to N feature rows of each expert (every ``add`` of an expert,
e.g. every task of a scene, keeps an equal share, spread evenly over its rows) and makes every kept row a
prototype of its expert: nearest-prototype routing with many prototypes per expert (1-NN). A building seen from
many rooms is not one mean: on the 8 px navigator's two houses the mean prototype routes held-out first frames to
the right scene about half the time (chance), a memory most of the time (``benchmarks/vln_routing.py``).
``memory=0`` (default) is the paper's rule, one mean per expert.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from agents.core.io import atomic_path


class NoPrototypesError(ValueError):
    """Routing was asked of a bank that holds no prototypes."""


def _evenly(rows: torch.Tensor, n: int) -> torch.Tensor:
    """At most ``n`` of ``rows``, spread evenly (first and last kept)."""
    if len(rows) <= n:
        return rows
    return rows[torch.linspace(0, len(rows) - 1, n, dtype=torch.float64).round().long()]


def _share(blocks: list[torch.Tensor], n: int) -> list[torch.Tensor]:
    """The blocks cut to an equal share of ``n`` rows in all (at least one row each), each spread evenly."""
    if sum(len(b) for b in blocks) <= n:
        return blocks
    return [_evenly(b, max(1, n // len(blocks))) for b in blocks]


def _as_2d(features: torch.Tensor, dim: int | None, who: str) -> torch.Tensor:
    if not isinstance(features, torch.Tensor):
        raise TypeError(f"{who}: features must be a torch.Tensor, got {type(features).__name__}")
    if features.dim() == 1:
        features = features[None]
    if features.dim() != 2 or features.shape[0] == 0:
        raise ValueError(f"{who}: features must be (D,) or (B, D) with B > 0, got {tuple(features.shape)}")
    if dim is not None and features.shape[1] != dim:
        raise ValueError(f"{who}: feature dim {features.shape[1]} != bank dim {dim}")
    if not torch.isfinite(features).all():
        raise ValueError(f"{who}: features contain NaN/inf")
    return features.detach().double().cpu()


class PrototypeBank:
    """One mean-feature prototype per expert id (or, with ``memory``, up to that many stored feature rows per
    expert), nearest-prototype (cosine) lookup."""

    def __init__(self, kind: str = "expert", center: bool = True, memory: int = 0) -> None:
        if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
            raise ValueError(f"{kind} bank memory must be an int >= 0 (0: one mean prototype), got {memory!r}")
        self.kind = kind
        self.center = center
        self.memory = memory
        self.dim: int | None = None
        self._sum: dict[int, torch.Tensor] = {}
        self._count: dict[int, int] = {}
        self._rows: dict[int, list[torch.Tensor]] = {}  # memory: one block of rows per add, equal shares

    def __len__(self) -> int:
        return len(self._sum)

    @property
    def ids(self) -> list[int]:
        return sorted(self._sum)

    def add(self, expert_id: int, features: torch.Tensor) -> None:
        """Accumulate ``features`` ((D,) or (B, D)) into the prototype of ``expert_id``."""
        if isinstance(expert_id, bool) or not isinstance(expert_id, int) or expert_id < 0:
            raise ValueError(f"{self.kind} id must be an int >= 0, got {expert_id!r}")
        x = _as_2d(features, self.dim, f"{self.kind} bank add")
        self.dim = x.shape[1]
        self._sum[expert_id] = self._sum.get(expert_id, torch.zeros(self.dim, dtype=torch.float64)) + x.sum(0)
        self._count[expert_id] = self._count.get(expert_id, 0) + x.shape[0]
        if self.memory:
            self._rows[expert_id] = _share(self._rows.get(expert_id, []) + [x], self.memory)

    def _origin(self) -> torch.Tensor:
        if not self.center or len(self._sum) < 2:
            return torch.zeros(self.dim or 0, dtype=torch.float64)
        return sum(self._sum.values()) / sum(self._count.values())

    def _raw(self) -> tuple[list[int], torch.Tensor]:
        """``(labels, P)``: the expert id of each prototype row and the rows (K x D, uncentred)."""
        if not self._sum:
            raise NoPrototypesError(f"no {self.kind} prototypes stored: add features for each {self.kind} during "
                                    "training (or load a router) before routing")
        if self.memory:
            rows = [torch.cat(self._rows[i]) for i in self.ids]
            return [i for i, r in zip(self.ids, rows) for _ in range(len(r))], torch.cat(rows)
        return self.ids, torch.stack([self._sum[i] / self._count[i] for i in self.ids])

    def prototypes(self) -> tuple[list[int], torch.Tensor]:
        """``(labels, P)``: the expert id of each prototype and the unit-norm (centred) prototypes (K x D); one
        per expert (labels == ids) unless the bank has a memory."""
        labels, protos = self._raw()
        return labels, F.normalize(protos - self._origin(), dim=1)

    def similarities(self, features: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """Cosine similarities (B x K) of each query row to each prototype, and each prototype's expert id."""
        labels, protos = self.prototypes()
        x = _as_2d(features, self.dim, f"{self.kind} routing") - self._origin()
        return labels, F.normalize(x, dim=1) @ protos.T

    def nearest(self, features: torch.Tensor) -> torch.Tensor:
        """Nearest expert id for each query row (LongTensor, B): the expert of the most similar prototype."""
        labels, sims = self.similarities(features)
        return torch.tensor(labels, dtype=torch.long)[sims.argmax(1)]

    def nearest_one(self, features: torch.Tensor) -> int:
        """Nearest expert id for the mean of the query rows (e.g. a window of frames)."""
        x = _as_2d(features, self.dim, f"{self.kind} routing").mean(0, keepdim=True)
        return int(self.nearest(x)[0])

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(P, labels, origin)``: raw prototypes (K x D, float32), the expert id of each (K, int64; ids must
        cover 0..M-1) and the centring origin (D)."""
        if self.ids != list(range(len(self))):
            raise ValueError(f"{self.kind} prototypes must cover expert ids 0..K-1, got {self.ids}")
        labels, protos = self._raw()
        return protos.float(), torch.tensor(labels, dtype=torch.long), self._origin().float()

    def state_dict(self) -> dict[str, Any]:
        state = {"kind": self.kind, "center": self.center, "ids": self.ids, "memory": self.memory,
                 "sums": [self._sum[i].clone() for i in self.ids], "counts": [self._count[i] for i in self.ids]}
        if self.memory:
            state["rows"] = [[b.clone() for b in self._rows[i]] for i in self.ids]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            ids, sums, counts = list(state["ids"]), list(state["sums"]), list(state["counts"])
            if not len(ids) == len(sums) == len(counts):
                raise ValueError("ids/sums/counts lengths differ")
            memory = int(state.get("memory", 0))
            rows = list(state["rows"]) if memory else []
            blocks = [b for r in rows for b in r]
            if memory < 0 or (memory and (len(rows) != len(ids) or not all(rows) or
                                          any(b.dim() != 2 or len(b) == 0 for b in blocks))):
                raise ValueError(f"memory {memory} with row blocks for {len(rows)} of {len(ids)} ids")
            dims = {int(s.shape[-1]) for s in sums} | {int(b.shape[-1]) for b in blocks}
            if len(dims) > 1 or any(c <= 0 for c in counts):
                raise ValueError("inconsistent prototype dims or counts")
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"corrupt {self.kind} prototype bank: {exc!r}") from exc
        self.kind, self.center = str(state.get("kind", self.kind)), bool(state.get("center", self.center))
        self.memory = memory
        self._sum = {int(i): s.double().clone() for i, s in zip(ids, sums)}
        self._count = {int(i): int(c) for i, c in zip(ids, counts)}
        self._rows = {int(i): [b.double().clone() for b in r] for i, r in zip(ids, rows)}
        self.dim = dims.pop() if dims else None


class PrototypeRouter:
    """A scene bank and an environment bank over the same visual features (``memory``: see the module doc)."""

    def __init__(self, center: bool = True, memory: int = 0) -> None:
        self.scene = PrototypeBank("scene", center, memory)
        self.env = PrototypeBank("env", center, memory)

    def add(self, features: torch.Tensor, scene: int | None = None, env: int | None = None) -> None:
        """Store features of a training task under its scene and/or environment id."""
        if scene is None and env is None:
            raise ValueError("PrototypeRouter.add needs a scene and/or an env id")
        if scene is not None:
            self.scene.add(scene, features)
        if env is not None:
            self.env.add(env, features)

    def route(self, features: torch.Tensor) -> tuple[int, int]:
        """``(scene, env)`` for the mean of the query features ((D,) or a window (B, D))."""
        return self.scene.nearest_one(features), self.env.nearest_one(features)

    def route_batch(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row ``(scenes, envs)`` LongTensors (B each)."""
        return self.scene.nearest(features), self.env.nearest(features)

    def to_table(self) -> Any:
        """The serving-side :class:`agents.vln.router.PrototypeTable` (same routing rule, no ``training``)."""
        from agents.vln.router import PrototypeTable

        (sp, sl, so), (ep, el, eo) = self.scene.dense(), self.env.dense()
        return PrototypeTable(sp, ep, so, eo, scene_labels=sl, env_labels=el)

    def state_dict(self) -> dict[str, Any]:
        return {"scene": self.scene.state_dict(), "env": self.env.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if not isinstance(state, Mapping) or "scene" not in state or "env" not in state:
            raise ValueError("corrupt router state: needs 'scene' and 'env' banks")
        self.scene.load_state_dict(state["scene"])
        self.env.load_state_dict(state["env"])

    def save(self, path: str | Path) -> None:
        """Write the prototype banks to ``path`` (atomically: an interrupted save keeps the previous file)."""
        with atomic_path(path) as tmp:
            torch.save(self.state_dict(), str(tmp))

    @classmethod
    def load(cls, path: str | Path) -> PrototypeRouter:
        """Load a router saved by ``save``; a missing or corrupt file is a ``ValueError``."""
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except FileNotFoundError as exc:
            raise ValueError(f"router file not found: {path}") from exc
        except Exception as exc:  # torch raises several unpickling error types
            raise ValueError(f"corrupt router file {path}: {exc}") from exc
        router = cls()
        router.load_state_dict(state)
        return router


def routing_accuracy(router: PrototypeRouter, features: torch.Tensor, scenes: Sequence[int],
                     envs: Sequence[int]) -> dict[str, float]:
    """Per-row routing accuracy: ``{"scene": ..., "env": ..., "joint": ...}`` (fractions in [0, 1])."""
    x = _as_2d(features, None, "routing_accuracy")
    s_true, e_true = torch.as_tensor(list(scenes)), torch.as_tensor(list(envs))
    if len(s_true) != x.shape[0] or len(e_true) != x.shape[0]:
        raise ValueError(f"routing_accuracy: {x.shape[0]} feature rows but {len(s_true)} scenes / {len(e_true)} envs")
    s_hat, e_hat = router.route_batch(x)
    s_ok, e_ok = s_hat == s_true, e_hat == e_true
    return {"scene": float(s_ok.double().mean()), "env": float(e_ok.double().mean()),
            "joint": float((s_ok & e_ok).double().mean())}
