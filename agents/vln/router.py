"""Expert selection without a task id: the Protocols the navigator uses, and a prototype table for serving.

The navigator only needs two things (``agents`` never imports ``training``):

- an :class:`ExpertRouter`: ``route(features) -> (scene, env)`` from visual features of the current frame(s);
- an :class:`ExpertActivator`: ``activator(scene, env)`` switches the adapted model to those experts.

``training.peft.tucker``'s router and ``set_active`` satisfy them during training/benchmarks; a saved checkpoint
carries a :class:`PrototypeTable` (nearest-prototype cosine routing, the paper's rule) and a
:class:`agents.vln.experts.TuckerExpertBank` so ``vln_node`` can route without ``training``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agents.core.io import atomic_path

PROTOTYPES_NAME = "prototypes.safetensors"


class RoutingError(ValueError):
    """Routing is impossible (no prototypes, wrong feature size, non-finite features)."""


@runtime_checkable
class ExpertRouter(Protocol):
    """Picks (scene id, environment id) from visual features (1-D or a batch of rows, averaged)."""

    def route(self, features: Any) -> tuple[int, int]: ...


@runtime_checkable
class ExpertActivator(Protocol):
    """Activates the experts of (scene, env) in the model the navigator runs; ``None, None`` = shared only."""

    def __call__(self, scene: int | None, env: int | None) -> None: ...


def _as_matrix(features: Any, dim: int):
    import torch

    f = torch.as_tensor(features, dtype=torch.float32)
    if f.dim() == 1:
        f = f[None]
    if f.dim() != 2 or f.shape[1] != dim:
        raise RoutingError(f"features must be (D,) or (B, D) with D={dim}, got shape {tuple(f.shape)}")
    if not torch.isfinite(f).all():
        raise RoutingError("features contain NaN or inf")
    return f


def _labels(labels: Any, prototypes: Any, name: str):
    """The expert id of each prototype row: ``arange(K)`` (one prototype per expert) when ``labels`` is None."""
    import torch

    if labels is None:
        return torch.arange(prototypes.shape[0])
    lab = torch.as_tensor(labels)
    if lab.dtype.is_floating_point or lab.dtype == torch.bool or tuple(lab.shape) != (prototypes.shape[0],) or \
            (lab.numel() and int(lab.min()) < 0):
        raise ValueError(f"{name} must be {prototypes.shape[0]} expert ids >= 0 (one per prototype row), got "
                         f"{lab.dtype} of shape {tuple(lab.shape)}")
    return lab.long()


class PrototypeTable:
    """Scene and environment prototypes; routes each by argmax cosine, independently, to the expert of the most
    similar prototype row.

    One prototype (mean feature) per expert by default (the paper's rule); ``scene_labels``/``env_labels`` (K,)
    give each row's expert id when an expert has several (``training.peft.tucker.PrototypeRouter(memory=N)``).
    ``scene_origin``/``env_origin`` (optional, D) are subtracted from prototypes and queries first (centred
    cosine, as ``training.peft.tucker.PrototypeRouter`` does by default)."""

    def __init__(self, scene_prototypes: Any, env_prototypes: Any, scene_origin: Any = None,
                 env_origin: Any = None, scene_labels: Any = None, env_labels: Any = None) -> None:
        import torch

        self.scene = torch.as_tensor(scene_prototypes, dtype=torch.float32)
        self.env = torch.as_tensor(env_prototypes, dtype=torch.float32)
        dim = self.scene.shape[-1] if self.scene.dim() == 2 else 0
        self.scene_origin = torch.zeros(dim) if scene_origin is None else torch.as_tensor(scene_origin).float()
        self.env_origin = torch.zeros(dim) if env_origin is None else torch.as_tensor(env_origin).float()
        for name, p in (("scene_prototypes", self.scene), ("env_prototypes", self.env)):
            if p.dim() != 2:
                raise ValueError(f"{name} must be a (K, D) matrix, got shape {tuple(p.shape)}")
            if not torch.isfinite(p).all():
                raise ValueError(f"{name} contain NaN or inf")
        self.scene_labels = _labels(scene_labels, self.scene, "scene_labels")
        self.env_labels = _labels(env_labels, self.env, "env_labels")
        if self.scene.shape[1] != self.env.shape[1]:
            raise ValueError(f"scene and env prototypes differ in feature size: {self.scene.shape[1]} vs "
                             f"{self.env.shape[1]}")
        for name, o in (("scene_origin", self.scene_origin), ("env_origin", self.env_origin)):
            if tuple(o.shape) != (self.scene.shape[1],):
                raise ValueError(f"{name} must have shape ({self.scene.shape[1]},), got {tuple(o.shape)}")

    @property
    def dim(self) -> int:
        return int(self.scene.shape[1])

    @property
    def num_experts(self) -> tuple[int, int]:
        """(scenes, environments) the table can route to."""
        n = lambda lab: int(lab.max()) + 1 if lab.numel() else 0  # noqa: E731
        return n(self.scene_labels), n(self.env_labels)

    def route(self, features: Any) -> tuple[int, int]:
        """(scene, env) of the experts of the most cosine-similar prototypes to the mean of ``features``."""
        import torch.nn.functional as F

        if self.scene.shape[0] == 0 or self.env.shape[0] == 0:
            raise RoutingError(f"routing needs prototypes, have {self.scene.shape[0]} scene and "
                               f"{self.env.shape[0]} environment prototypes")
        f = _as_matrix(features, self.dim).mean(0, keepdim=True)

        def pick(p: Any, origin: Any, labels: Any) -> int:
            return int(labels[(F.normalize(f - origin, dim=-1) @ F.normalize(p - origin, dim=-1).T).argmax()])

        return pick(self.scene, self.scene_origin, self.scene_labels), pick(self.env, self.env_origin, self.env_labels)

    def save(self, directory: str | Path) -> None:
        from safetensors.torch import save_file

        with atomic_path(Path(directory, PROTOTYPES_NAME)) as tmp:
            save_file({"scene": self.scene.contiguous(), "env": self.env.contiguous(),
                       "scene_origin": self.scene_origin.contiguous(), "env_origin": self.env_origin.contiguous(),
                       "scene_labels": self.scene_labels.contiguous(), "env_labels": self.env_labels.contiguous()},
                      str(tmp))

    @classmethod
    def load(cls, directory: str | Path) -> "PrototypeTable":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = Path(directory, PROTOTYPES_NAME)
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found")
        try:
            t = load_file(str(path))
        except (SafetensorError, OSError) as exc:
            raise ValueError(f"corrupt prototype file {path}: {exc}") from exc
        if not {"scene", "env"} <= set(t):
            raise ValueError(f"corrupt prototype file {path}: keys {sorted(t)}, expected scene and env")
        try:  # files written before labels existed hold one prototype per expert
            return cls(t["scene"], t["env"], t.get("scene_origin"), t.get("env_origin"), t.get("scene_labels"),
                       t.get("env_labels"))
        except ValueError as exc:
            raise ValueError(f"corrupt prototype file {path}: {exc}") from exc
