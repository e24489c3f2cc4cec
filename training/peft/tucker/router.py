"""Expert routing without a task id: scene and environment prototype banks of visual features.

During training, ``router.add(features, scene=s, env=e)`` accumulates the features of task (s, e) into one
prototype per scene and one per environment (the mean feature). At test time ``router.route(features)``
picks, independently, the scene and the environment whose prototype has the highest cosine similarity with
the (mean of the) query features. With ``center=True`` (default) features and prototypes are first centred
on the mean of everything stored, which removes the large common component of CLIP-like features.
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
    """One mean-feature prototype per expert id, nearest-prototype (cosine) lookup."""

    def __init__(self, kind: str = "expert", center: bool = True) -> None:
        self.kind = kind
        self.center = center
        self.dim: int | None = None
        self._sum: dict[int, torch.Tensor] = {}
        self._count: dict[int, int] = {}

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

    def _origin(self) -> torch.Tensor:
        if not self.center or len(self._sum) < 2:
            return torch.zeros(self.dim or 0, dtype=torch.float64)
        return sum(self._sum.values()) / sum(self._count.values())

    def prototypes(self) -> tuple[list[int], torch.Tensor]:
        """``(ids, P)``: ids and unit-norm (centred) prototypes (K x D)."""
        if not self._sum:
            raise NoPrototypesError(f"no {self.kind} prototypes stored: add features for each {self.kind} during "
                                    "training (or load a router) before routing")
        ids = self.ids
        protos = torch.stack([self._sum[i] / self._count[i] for i in ids]) - self._origin()
        return ids, F.normalize(protos, dim=1)

    def similarities(self, features: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """Cosine similarities (B x K) of each query row to each prototype."""
        ids, protos = self.prototypes()
        x = _as_2d(features, self.dim, f"{self.kind} routing") - self._origin()
        return ids, F.normalize(x, dim=1) @ protos.T

    def nearest(self, features: torch.Tensor) -> torch.Tensor:
        """Nearest expert id for each query row (LongTensor, B)."""
        ids, sims = self.similarities(features)
        return torch.tensor(ids, dtype=torch.long)[sims.argmax(1)]

    def nearest_one(self, features: torch.Tensor) -> int:
        """Nearest expert id for the mean of the query rows (e.g. a window of frames)."""
        x = _as_2d(features, self.dim, f"{self.kind} routing").mean(0, keepdim=True)
        return int(self.nearest(x)[0])

    def dense(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(P, origin)``: raw mean prototypes (K x D, float32) for ids 0..K-1 and the centring origin (D)."""
        if self.ids != list(range(len(self))):
            raise ValueError(f"{self.kind} prototypes must cover expert ids 0..K-1, got {self.ids}")
        protos = torch.stack([self._sum[i] / self._count[i] for i in self.ids]).float()
        return protos, self._origin().float()

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "center": self.center, "ids": self.ids,
                "sums": [self._sum[i].clone() for i in self.ids], "counts": [self._count[i] for i in self.ids]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            ids, sums, counts = list(state["ids"]), list(state["sums"]), list(state["counts"])
            if not len(ids) == len(sums) == len(counts):
                raise ValueError("ids/sums/counts lengths differ")
            dims = {int(s.shape[-1]) for s in sums}
            if len(dims) > 1 or any(c <= 0 for c in counts):
                raise ValueError("inconsistent prototype dims or counts")
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"corrupt {self.kind} prototype bank: {exc!r}") from exc
        self.kind, self.center = str(state.get("kind", self.kind)), bool(state.get("center", self.center))
        self._sum = {int(i): s.double().clone() for i, s in zip(ids, sums)}
        self._count = {int(i): int(c) for i, c in zip(ids, counts)}
        self.dim = dims.pop() if dims else None


class PrototypeRouter:
    """A scene bank and an environment bank over the same visual features."""

    def __init__(self, center: bool = True) -> None:
        self.scene = PrototypeBank("scene", center)
        self.env = PrototypeBank("env", center)

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

        (sp, so), (ep, eo) = self.scene.dense(), self.env.dense()
        return PrototypeTable(sp, ep, so, eo)

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
