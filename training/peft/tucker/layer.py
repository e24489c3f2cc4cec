"""``TuKALinear``: a peft LoRA ``Linear`` whose update is the 4th-order Tucker product of TuKA.

Storage per adapter name (peft ``ParameterDict``/``ModuleDict`` entries, so peft's trainable marking, save,
``merge_and_unload``, ``disable_adapter`` and device moves all see them):

- ``lora_A[a]``: ``nn.Linear(in, r2)``, its weight is ``U2^T`` (r2 x in), shared down-projection;
- ``lora_B[a]``: ``nn.Linear(r1, out)``, its weight is ``U1`` (out x r1), shared up-projection;
- ``lora_core[a]``: ``G`` (r1 x r2 x r3 x r4), shared core;
- ``lora_scene[a]``: ``U3`` (M x r3), one scene expert per row;
- ``lora_env[a]``: ``U4`` (N x r4), one environment expert per row.

Forward: ``y = W x + alpha/r1 * U1 G_se U2^T x`` with ``G_se = G x3 U3[s] x4 U4[e]`` (mode 4 contracted first,
as the released code), computed as ``v = x U2``, ``u = v G_se^T``, ``out = u U1^T``. The route ``(s, e)`` is
set by ``set_route`` (``training.peft.tucker.set_active`` on a whole model); forwarding without one is an error.
A route entry is an int, a 1-D LongTensor of per-sample ids (batch-major input) or a 1-D float tensor of
mixing weights over the experts (e.g. uniform over the learned ones = "shared knowledge only").
"""

from __future__ import annotations

import math
from typing import Any, Union

import torch
from peft.tuners.lora.layer import Linear as LoraLinear
from torch import nn

from training.peft.tucker.config import TuKAConfig

Route = Union[int, torch.Tensor]
"""int expert id, 1-D LongTensor of per-sample ids, or 1-D float tensor of mixing weights over the experts."""

KINDS = ("scene", "env")


def _check_route(route: Route, n: int, kind: str) -> Route:
    """Validate one route entry against ``n`` experts; returns it normalised (int or detached tensor)."""
    if isinstance(route, torch.Tensor):
        if route.dim() == 0 and not route.is_floating_point():
            route = int(route)
        elif route.dim() != 1:
            raise ValueError(f"{kind} route tensor must be 1-D, got shape {tuple(route.shape)}")
        elif route.is_floating_point():
            if route.numel() != n:
                raise ValueError(f"{kind} mixing weights have {route.numel()} entries but the adapter has {n} "
                                 f"{kind} experts")
            return route.detach()
        else:
            if route.numel() and (int(route.min()) < 0 or int(route.max()) >= n):
                raise ValueError(f"{kind} ids {route.tolist()} out of range: the adapter has {n} {kind} experts")
            return route.detach().long()
    if isinstance(route, bool) or not isinstance(route, int):
        raise TypeError(f"{kind} must be an int or a tensor, got {type(route).__name__}")
    if not 0 <= route < n:
        raise ValueError(f"{kind} {route} out of range: the adapter has {n} {kind} experts "
                         f"(grow with add_{kind})")
    return route


def _expert_vector(u: torch.Tensor, route: Route) -> torch.Tensor:
    """Row(s) of the expert matrix ``u`` (M x r) selected by ``route``: (r,) or (B, r)."""
    if isinstance(route, int):
        return u[route]
    if route.is_floating_point():
        return route.to(u) @ u
    return u[route.to(u.device)]


class TuKALinear(LoraLinear):
    """peft LoRA ``Linear`` subclass implementing the TuKA update (see the module docstring)."""

    adapter_layer_names = LoraLinear.adapter_layer_names + ("lora_core", "lora_scene", "lora_env")
    other_param_names = LoraLinear.other_param_names + ("tuka_route",)

    # ------------------------------------------------------------------------------------------------ creation
    def update_layer(self, adapter_name: str, r: int, lora_alpha: float, config: Any, **kwargs: Any) -> None:
        tcfg = getattr(config, "tuka", None)
        if not isinstance(tcfg, TuKAConfig):
            raise ValueError("TuKALinear needs a LoraConfig carrying a TuKAConfig (.tuka); build it with "
                             "training.peft.tucker.tuka_lora_config / apply_tuka / load_tuka")
        if r != tcfg.r1:
            raise ValueError(f"LoraConfig.r ({r}) must equal TuKAConfig.r1 ({tcfg.r1})")
        for flag in ("use_dora", "use_rslora", "lora_bias"):
            if getattr(config, flag, False):
                raise ValueError(f"TuKA does not support LoraConfig.{flag}=True")
        if not hasattr(self, "lora_core"):
            self.lora_core = nn.ParameterDict()
            self.lora_scene = nn.ParameterDict()
            self.lora_env = nn.ParameterDict()
            self.tuka_route: dict[str, tuple[Route | None, Route | None]] = {}
        super().update_layer(adapter_name, r, lora_alpha, config, **kwargs)  # lora_A/B, scaling alpha/r1, dropout
        w = self.get_base_layer().weight
        dd = {"device": w.device, "dtype": w.dtype if w.dtype.is_floating_point else torch.float32}
        r1, r2, r3, r4 = tcfg.r1, tcfg.r2, tcfg.r3, tcfg.r4
        self.lora_A[adapter_name] = nn.Linear(self.in_features, r2, bias=False, **dd)
        self.lora_B[adapter_name] = nn.Linear(r1, self.out_features, bias=False, **dd)
        self.lora_core[adapter_name] = nn.Parameter(torch.empty(r1, r2, r3, r4, **dd))
        self.lora_scene[adapter_name] = nn.Parameter(torch.empty(tcfg.num_scenes, r3, **dd))
        self.lora_env[adapter_name] = nn.Parameter(torch.empty(tcfg.num_envs, r4, **dd))
        self.tuka_route[adapter_name] = (None, None)
        self.reset_tuka_parameters(adapter_name, tcfg.expert_init_std)
        self.set_adapter(self.active_adapters, inference_mode=config.inference_mode)

    @torch.no_grad()
    def reset_tuka_parameters(self, adapter_name: str, expert_init_std: float) -> None:
        """The released code's init: Xavier-like Gaussians for G, U1, U2; N(0, std^2) expert rows (delta W ~ 0)."""
        g = self.lora_core[adapter_name]
        r1, r2, r3, r4 = g.shape
        nn.init.normal_(g, 0.0, math.sqrt(2.0 / (r2 * r3 * r4 + r1 * r3 * r4)))
        nn.init.normal_(self.lora_B[adapter_name].weight, 0.0, math.sqrt(2.0 / (r1 + self.out_features)))
        nn.init.normal_(self.lora_A[adapter_name].weight, 0.0, math.sqrt(2.0 / (self.in_features + r2)))
        nn.init.normal_(self.lora_scene[adapter_name], 0.0, expert_init_std)
        nn.init.normal_(self.lora_env[adapter_name], 0.0, expert_init_std)

    # --------------------------------------------------------------------------------------------- accessors
    def factors(self, adapter_name: str = "default") -> dict[str, torch.Tensor]:
        """The five Tucker factors as live parameters: G, U1 (out x r1), U2^T (r2 x in), U3, U4."""
        return {
            "G": self.lora_core[adapter_name],
            "U1": self.lora_B[adapter_name].weight,
            "U2T": self.lora_A[adapter_name].weight,
            "U3": self.lora_scene[adapter_name],
            "U4": self.lora_env[adapter_name],
        }

    def num_experts(self, adapter_name: str = "default") -> tuple[int, int]:
        return self.lora_scene[adapter_name].shape[0], self.lora_env[adapter_name].shape[0]

    def set_route(self, scene: Route, env: Route, adapter_name: str = "default") -> None:
        """Select the experts used by ``forward``/``get_delta_weight`` (validated against M and N)."""
        if adapter_name not in self.lora_core:
            raise ValueError(f"unknown TuKA adapter {adapter_name!r}; have {list(self.lora_core)}")
        if adapter_name in self.merged_adapters:
            raise ValueError("cannot change the TuKA route while the adapter is merged; unmerge first")
        m, n = self.num_experts(adapter_name)
        self.tuka_route[adapter_name] = (_check_route(scene, m, "scene"), _check_route(env, n, "env"))

    def _route(self, adapter_name: str) -> tuple[Route, Route]:
        scene, env = self.tuka_route.get(adapter_name, (None, None))
        if scene is None or env is None:
            raise ValueError("TuKA route not set: call training.peft.tucker.set_active(model, scene, env) first")
        return scene, env

    def core_slice(self, adapter_name: str = "default") -> torch.Tensor:
        """``G_se`` for the current route: (r1 x r2), or (B x r1 x r2) for per-sample ids."""
        scene, env = self._route(adapter_name)
        g = self.lora_core[adapter_name]
        u3 = _expert_vector(self.lora_scene[adapter_name], scene)
        u4 = _expert_vector(self.lora_env[adapter_name], env)
        if u3.dim() == 1 and u4.dim() == 1:
            return torch.einsum("ijk,k->ij", torch.einsum("ijkl,l->ijk", g, u4), u3)
        if u3.dim() == 1:
            u3 = u3.expand(u4.shape[0], -1)
        if u4.dim() == 1:
            u4 = u4.expand(u3.shape[0], -1)
        if u3.shape[0] != u4.shape[0]:
            raise ValueError(f"per-sample scene ({u3.shape[0]}) and env ({u4.shape[0]}) routes differ in length")
        return torch.einsum("ijkl,bk,bl->bij", g, u3, u4)

    # ------------------------------------------------------------------------------------------ delta / merge
    def get_delta_weight(self, adapter: str) -> torch.Tensor:
        """``alpha/r1 * U1 G_se U2^T`` (out x in) for the current (single) route."""
        core = self.core_slice(adapter)
        if core.dim() != 2:
            raise ValueError("get_delta_weight/merge needs a single (scene, env) route, not per-sample ids")
        u1, u2t = self.lora_B[adapter].weight, self.lora_A[adapter].weight
        cast = u1.device.type == "cpu" and u1.dtype in (torch.float16, torch.bfloat16)
        if cast:
            u1, u2t, core = u1.float(), u2t.float(), core.float()
        delta = (u1 @ core @ u2t) * self.scaling[adapter]
        if self.fan_in_fan_out:
            delta = delta.T
        return delta.to(self.lora_B[adapter].weight.dtype) if cast else delta

    def tuka_update(self, x: torch.Tensor, adapter_name: str) -> torch.Tensor:
        """The adapter branch ``alpha/r1 * U1 G_se U2^T x`` for input ``x`` (..., in)."""
        lora_a, lora_b = self.lora_A[adapter_name], self.lora_B[adapter_name]
        x = self._cast_input_dtype(x, lora_a.weight.dtype)
        v = lora_a(self.lora_dropout[adapter_name](x))  # (..., r2) = x U2
        core = self.core_slice(adapter_name)
        if core.dim() == 2:
            u = v @ core.T
        else:
            if v.dim() < 2 or v.shape[0] != core.shape[0]:
                raise ValueError(f"per-sample route has {core.shape[0]} ids but the input batch is {tuple(v.shape)}")
            u = (v.reshape(v.shape[0], -1, v.shape[-1]) @ core.transpose(1, 2)).reshape(*v.shape[:-1], -1)
        return lora_b(u) * self.scaling[adapter_name]

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        self._check_forward_args(x, *args, **kwargs)
        if kwargs.pop("adapter_names", None) is not None:
            raise ValueError("TuKA does not support peft mixed-batch adapter_names; use per-sample routes")
        if self.disable_adapters:
            if self.merged:
                self.unmerge()
            return self.base_layer(x, *args, **kwargs)
        result = self.base_layer(x, *args, **kwargs)
        if self.merged:
            return result
        dtype = result.dtype
        for name in self.active_adapters:
            if name in self.lora_core:
                result = result + self.tuka_update(x, name).to(dtype)
        return result

    # ------------------------------------------------------------------------------------------------ growth
    @torch.no_grad()
    def add_expert(self, kind: str, adapter_name: str = "default", init_from: int | None = None,
                   init_std: float = 0.002, jitter: float = 0.0) -> int:
        """Append one scene/env expert row (copy of row ``init_from`` or N(0, init_std^2)); returns its id.
        ``jitter`` > 0 adds to a copy a random part orthogonal to it, of that fraction of its norm: an exact copy
        spans the same core directions as its source (``pair_freedom`` 0) and the separability term has no
        gradient at it."""
        if kind not in KINDS:
            raise ValueError(f"expert kind must be one of {KINDS}, got {kind!r}")
        if adapter_name in self.merged_adapters:
            raise ValueError("cannot grow a merged TuKA adapter; unmerge first")
        store = self.lora_scene if kind == "scene" else self.lora_env
        old = store[adapter_name]
        if init_from is None:
            row = torch.randn(1, old.shape[1], device=old.device, dtype=old.dtype) * init_std
        else:
            _check_route(init_from, old.shape[0], kind)
            row = old[init_from : init_from + 1].clone()
            if jitter > 0:
                row = row + orthogonal_jitter(row[0].float(), jitter).to(row)
        new = nn.Parameter(torch.cat([old.detach(), row], 0), requires_grad=old.requires_grad)
        store[adapter_name] = new
        return old.shape[0]


def orthogonal_jitter(row: torch.Tensor, fraction: float) -> torch.Tensor:
    """A random vector orthogonal to ``row`` with norm ``fraction * |row|`` (zeros for a zero row)."""
    v = torch.randn_like(row)
    norm = row.norm()
    if norm <= 0:
        return torch.zeros_like(row)
    v = v - (v @ row) / norm**2 * row
    return v * (fraction * norm / v.norm().clamp_min(1e-30))
