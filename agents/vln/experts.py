"""Serving-side TuKA experts: the Tucker factors of each adapted linear, merged for the routed (scene, env).

Training (``training.peft.tucker``) exports, per adapted ``nn.Linear`` named ``name`` in the base model, the
factors ``G`` (r1 x r2 x r3 x r4), ``U1`` (out x r1), ``U2T`` (r2 x in), ``U3`` (M x r3), ``U4`` (N x r4) and the
scaling ``alpha / r1``. Activating (s, e) sets ``W = W0 + scaling * U1 (G x3 U3[s] x4 U4[e]) U2^T`` in place
(``W0`` is kept), so the served model runs at plain-linear speed. ``(None, None)`` activates the shared knowledge
only: a uniform mixture of the learned expert rows (the fallback when routing fails).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from agents.core.io import atomic_path, write_text

log = logging.getLogger(__name__)

EXPERTS_NAME = "tuka_experts.safetensors"
EXPERTS_META = "tuka_experts.json"
FACTORS = ("G", "U1", "U2T", "U3", "U4")


def tucker_delta(f: dict[str, Any], scaling: float, scene: int | None, env: int | None):
    """``scaling * U1 (G x3 u3 x4 u4) U2^T`` with u3 = U3[scene] (or the mean row when None), same for u4."""
    u3 = f["U3"].mean(0) if scene is None else f["U3"][scene]
    u4 = f["U4"].mean(0) if env is None else f["U4"][env]
    import torch

    core = torch.einsum("ijkl,k,l->ij", f["G"], u3, u4)
    return (f["U1"] @ core @ f["U2T"]) * scaling


class TuckerExpertBank:
    """Holds the exported factors and writes the routed experts' update into a plain model's linears."""

    def __init__(self, factors: dict[str, dict[str, Any]], scaling: dict[str, float], num_scenes: int,
                 num_envs: int) -> None:
        if not factors:
            raise ValueError("a TuKA expert bank needs at least one adapted layer")
        for name, f in factors.items():
            missing = [k for k in FACTORS if k not in f]
            if missing:
                raise ValueError(f"layer {name!r}: missing factors {missing}")
            m, n = int(f["U3"].shape[0]), int(f["U4"].shape[0])
            if (m, n) != (num_scenes, num_envs):
                raise ValueError(f"layer {name!r} has {m} scene x {n} env experts, metadata says "
                                 f"{num_scenes} x {num_envs}")
        self.factors, self.scaling = factors, scaling
        self.num_scenes, self.num_envs = int(num_scenes), int(num_envs)
        self._model: Any = None
        self._w0: dict[str, Any] = {}
        self.active: tuple[int | None, int | None] | None = None

    def check(self, scene: int | None, env: int | None) -> None:
        """ValueError naming the field when an expert id is beyond what this checkpoint has."""
        for kind, v, n in (("scene", scene, self.num_scenes), ("env", env, self.num_envs)):
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{kind} expert id must be an int, got {v!r}")
            if not 0 <= v < n:
                raise ValueError(f"{kind} expert {v} out of range: the checkpoint has {n} {kind} experts")

    def attach(self, model: Any) -> None:
        """Bind to ``model`` (a plain, un-adapted model with the exported layer names); keeps W0."""
        mods = dict(model.named_modules())
        missing = [n for n in self.factors if n not in mods]
        if missing:
            raise ValueError(f"the model has no layers {missing[:3]}... for the TuKA experts ({len(missing)} missing)")
        for name, f in self.factors.items():
            w = mods[name].weight
            if tuple(w.shape) != (f["U1"].shape[0], f["U2T"].shape[1]):
                raise ValueError(f"layer {name!r}: weight {tuple(w.shape)} does not match the factors "
                                 f"({f['U1'].shape[0]} x {f['U2T'].shape[1]})")
            self._w0[name] = w.detach().clone()
        self._model = mods

    def __call__(self, scene: int | None, env: int | None) -> None:
        import torch

        if self._model is None:
            raise RuntimeError("attach(model) before activating experts")
        self.check(scene, env)
        if self.active == (scene, env):
            return
        with torch.no_grad():
            for name, f in self.factors.items():
                w = self._model[name].weight
                w.copy_(self._w0[name] + tucker_delta(f, self.scaling[name], scene, env).to(w.dtype))
        self.active = (scene, env)

    def save(self, directory: str | Path) -> None:
        from safetensors.torch import save_file

        tensors = {f"{n}::{k}": v.detach().contiguous().cpu() for n, f in self.factors.items() for k, v in f.items()}
        with atomic_path(Path(directory, EXPERTS_NAME)) as tmp:
            save_file(tensors, str(tmp))
        write_text(Path(directory, EXPERTS_META), json.dumps(
            {"scaling": self.scaling, "num_scenes": self.num_scenes, "num_envs": self.num_envs}))

    @classmethod
    def load(cls, directory: str | Path) -> "TuckerExpertBank":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path, meta_path = Path(directory, EXPERTS_NAME), Path(directory, EXPERTS_META)
        if not path.is_file() or not meta_path.is_file():
            raise FileNotFoundError(f"{path} or {meta_path} not found")
        try:
            tensors = load_file(str(path))
            meta = json.loads(meta_path.read_text())
            scaling = {str(k): float(v) for k, v in meta["scaling"].items()}
            m, n = int(meta["num_scenes"]), int(meta["num_envs"])
        except (SafetensorError, OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"corrupt TuKA expert files in {directory}: {exc}") from exc
        factors: dict[str, dict[str, Any]] = {}
        for key, v in tensors.items():
            name, _, k = key.rpartition("::")
            factors.setdefault(name, {})[k] = v
        if set(factors) != set(scaling):
            raise ValueError(f"corrupt TuKA expert files in {directory}: layers and scalings differ")
        return cls(factors, scaling, m, n)
