"""Model-level TuKA helpers: apply, route, grow, save/load (custom module registered), merge, counts."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora.layer import LoraLayer
from torch import nn

from training.peft.tucker.config import TuKAConfig
from training.peft.tucker.layer import Route, TuKALinear

log = logging.getLogger(__name__)

TUKA_CONFIG_NAME = "tuka_config.json"
ADAPTER_WEIGHTS_NAME = "adapter_model.safetensors"


def tuka_lora_config(config: TuKAConfig, *, inference_mode: bool = False) -> LoraConfig:
    """A peft ``LoraConfig`` (r = r1, alpha) that builds ``TuKALinear`` layers for every targeted ``nn.Linear``."""
    lcfg = LoraConfig(r=config.r1, lora_alpha=config.alpha, lora_dropout=config.dropout,
                      target_modules=config.target_modules, modules_to_save=config.modules_to_save,
                      init_lora_weights=True, inference_mode=inference_mode)
    return _attach(lcfg, config)


def _attach(lcfg: LoraConfig, config: TuKAConfig) -> LoraConfig:
    lcfg.tuka = config  # not a dataclass field: never written to adapter_config.json (tuka_config.json holds it)
    lcfg._register_custom_module({nn.Linear: TuKALinear})
    return lcfg


def apply_tuka(model: nn.Module, config: TuKAConfig, adapter_name: str = "default") -> PeftModel:
    """Wrap ``model`` in a ``PeftModel`` whose targeted linear layers are ``TuKALinear`` (base frozen)."""
    if not isinstance(config, TuKAConfig):
        raise TypeError(f"apply_tuka needs a TuKAConfig, got {type(config).__name__}")
    peft_model = get_peft_model(model, tuka_lora_config(config), adapter_name=adapter_name)
    n = sum(1 for _ in iter_tuka(peft_model))
    if n == 0:
        raise ValueError(f"TuKAConfig.target_modules {config.target_modules!r} matched no nn.Linear")
    log.info("apply_tuka: %d layers, ranks %s, %d scenes x %d envs, %d adapter parameters", n,
             (config.r1, config.r2, config.r3, config.r4), config.num_scenes, config.num_envs,
             count_adapter_params(peft_model))
    return peft_model


def iter_tuka(model: nn.Module) -> Iterator[tuple[str, TuKALinear]]:
    """``(name, layer)`` for every ``TuKALinear`` of ``model``, in module order."""
    for name, module in model.named_modules():
        if isinstance(module, TuKALinear):
            yield name, module


def get_tuka_config(model: nn.Module, adapter_name: str = "default") -> TuKAConfig:
    """The ``TuKAConfig`` of a TuKA ``PeftModel`` (num_scenes/num_envs follow growth)."""
    cfg = getattr(model, "peft_config", {}).get(adapter_name)
    tcfg = getattr(cfg, "tuka", None)
    if not isinstance(tcfg, TuKAConfig):
        raise ValueError(f"model has no TuKA adapter {adapter_name!r} (was it loaded with load_tuka?)")
    return tcfg


def _layers(model: nn.Module, adapter_name: str) -> list[TuKALinear]:
    layers = [m for _, m in iter_tuka(model) if adapter_name in m.lora_core]
    if not layers:
        vanilla = [n for n, m in model.named_modules() if isinstance(m, LoraLayer)]
        hint = " (it has vanilla LoRA layers: reload with load_tuka)" if vanilla else ""
        raise ValueError(f"model has no TuKA layers for adapter {adapter_name!r}{hint}")
    return layers


def num_experts(model: nn.Module, adapter_name: str = "default") -> tuple[int, int]:
    """``(M, N)``: the number of scene and environment experts."""
    return _layers(model, adapter_name)[0].num_experts(adapter_name)


def set_active(model: nn.Module, scene: Route, env: Route, adapter_name: str = "default") -> None:
    """Route every TuKA layer to scene expert ``scene`` and environment expert ``env``.

    Each may be an int, a 1-D LongTensor of per-sample ids, or 1-D float mixing weights over the experts
    (``shared_route`` gives the uniform mixture). Out-of-range ids raise ``ValueError``.
    """
    for layer in _layers(model, adapter_name):
        layer.set_route(scene, env, adapter_name)


def get_active(model: nn.Module, adapter_name: str = "default") -> tuple[Route | None, Route | None]:
    """The current route (``(None, None)`` before ``set_active``)."""
    return _layers(model, adapter_name)[0].tuka_route[adapter_name]


def shared_route(num: int, ids: list[int] | None = None) -> torch.Tensor:
    """Uniform mixing weights over expert ``ids`` (all ``num`` if ``None``): the "shared knowledge" fallback."""
    ids = list(range(num)) if ids is None else sorted(set(ids))
    if not ids or ids[0] < 0 or ids[-1] >= num:
        raise ValueError(f"shared_route ids {ids} invalid for {num} experts")
    w = torch.zeros(num)
    w[ids] = 1.0 / len(ids)
    return w


def _grow(model: nn.Module, kind: str, init_from: int | None, adapter_name: str) -> int:
    tcfg = get_tuka_config(model, adapter_name)
    new_ids = {layer.add_expert(kind, adapter_name, init_from, tcfg.expert_init_std, tcfg.expert_init_jitter)
               for layer in _layers(model, adapter_name)}
    if len(new_ids) != 1:
        raise RuntimeError(f"TuKA layers disagree on the number of {kind} experts: {sorted(new_ids)}")
    new_id = new_ids.pop()
    field = "num_scenes" if kind == "scene" else "num_envs"
    model.peft_config[adapter_name].tuka = replace(tcfg, **{field: new_id + 1})
    log.info("TuKA: added %s expert %d (init from %s)", kind, new_id, init_from)
    return new_id


def add_scene(model: nn.Module, init_from: int | None = None, adapter_name: str = "default") -> int:
    """Add one scene expert row to every layer (copy of scene ``init_from``, e.g. the router's nearest scene,
    or the near-zero init if ``None``); returns the new scene id. Old experts are untouched. Optimisers and
    DKIL hooks holding the old expert tensors must be rebuilt (``DKIL.before_task`` does it)."""
    return _grow(model, "scene", init_from, adapter_name)


def add_env(model: nn.Module, init_from: int | None = None, adapter_name: str = "default") -> int:
    """Add one environment expert row; see ``add_scene``."""
    return _grow(model, "env", init_from, adapter_name)


def save_tuka(model: PeftModel, out_dir: str | Path, adapter_name: str = "default") -> Path:
    """``save_pretrained`` plus ``tuka_config.json`` (ranks, current M and N); returns the directory."""
    tcfg = get_tuka_config(model, adapter_name)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), selected_adapters=[adapter_name])
    sub = out if adapter_name == "default" else out / adapter_name
    (sub / TUKA_CONFIG_NAME).write_text(json.dumps(tcfg.to_dict(), indent=2))
    return sub


def read_tuka_config(adapter_dir: str | Path) -> TuKAConfig:
    """The ``TuKAConfig`` saved by ``save_tuka``; a clear error for a non-TuKA or corrupt directory."""
    path = Path(adapter_dir) / TUKA_CONFIG_NAME
    if not path.is_file():
        raise ValueError(f"{adapter_dir} is not a TuKA checkpoint: no {TUKA_CONFIG_NAME} (a plain LoRA adapter?)")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"corrupt {path}: {exc}") from exc
    return TuKAConfig.from_dict(data)


def _checkpoint_tensors(adapter_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = adapter_dir / ADAPTER_WEIGHTS_NAME
    if not path.is_file():
        raise ValueError(f"corrupt TuKA checkpoint {adapter_dir}: missing {ADAPTER_WEIGHTS_NAME}")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, RuntimeError) as exc:
        raise ValueError(f"corrupt TuKA checkpoint {path}: {exc}") from exc


def load_tuka(base: nn.Module, adapter_dir: str | Path, *, is_trainable: bool = False,
              num_scenes: int | None = None, num_envs: int | None = None,
              adapter_name: str = "default") -> PeftModel:
    """Reload a ``save_tuka`` directory onto ``base`` as real ``TuKALinear`` layers, and verify it.

    A plain ``PeftModel.from_pretrained`` would silently build vanilla LoRA (the custom module mapping is not
    saved); here the mapping is registered first, then every adapted layer's class and every saved tensor is
    checked against the checkpoint. ``num_scenes``/``num_envs``, when given, must match the checkpoint.
    """
    adir = Path(adapter_dir)
    tcfg = read_tuka_config(adir)
    for want, have, kind in ((num_scenes, tcfg.num_scenes, "scene"), (num_envs, tcfg.num_envs, "env")):
        if want is not None and want != have:
            raise ValueError(f"requested {want} {kind} experts but the checkpoint {adir} has {have}")
    tensors = _checkpoint_tensors(adir)
    for key, t in tensors.items():
        for kind, n in (("lora_scene", tcfg.num_scenes), ("lora_env", tcfg.num_envs)):
            if f".{kind}" in key and t.shape[0] != n:
                raise ValueError(f"corrupt TuKA checkpoint {adir}: {key} has {t.shape[0]} rows, "
                                 f"{TUKA_CONFIG_NAME} says {n}")
    try:
        lcfg = LoraConfig.from_pretrained(str(adir))
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"corrupt TuKA checkpoint {adir}: adapter_config.json: {exc}") from exc
    lcfg = _attach(lcfg, copy.deepcopy(tcfg))
    model = PeftModel.from_pretrained(base, str(adir), adapter_name=adapter_name, config=lcfg,
                                      is_trainable=is_trainable)
    _verify_loaded(model, tensors, adapter_name, adir)
    return model


def _verify_loaded(model: PeftModel, tensors: dict[str, torch.Tensor], adapter_name: str, adir: Path) -> None:
    vanilla = [n for n, m in model.named_modules() if isinstance(m, LoraLayer) and not isinstance(m, TuKALinear)]
    if vanilla:
        raise RuntimeError(f"TuKA reload built vanilla LoRA layers: {vanilla[:3]}")
    params = dict(model.named_parameters())
    loaded = 0
    for key, t in tensors.items():
        stem, _, leaf = key.rpartition(".")
        cands = [f"{stem}.{adapter_name}.{leaf}", f"{key}.{adapter_name}"]
        cands += [f"base_model.{c}" for c in cands]
        name = next((c for c in cands if c in params), None)
        if name is None:
            raise ValueError(f"TuKA checkpoint {adir}: tensor {key} has no matching parameter in the model")
        if not torch.equal(params[name].detach().cpu(), t.to(params[name].dtype)):
            raise RuntimeError(f"TuKA reload: {name} differs from the checkpoint")
        loaded += 1
    if loaded != len(tensors) or not any(".lora_core" in k for k in tensors):
        raise ValueError(f"TuKA checkpoint {adir} holds no Tucker core tensors")


def merge_tuka(model: PeftModel, scene: int, env: int, *, unload: bool = True,
               adapter_name: str = "default") -> nn.Module:
    """Fold ``delta W(scene, env)`` into the base weights.

    With ``unload`` (default) returns the plain base model (``merge_and_unload``; the PeftModel is consumed).
    Otherwise merges in place (``model.unmerge_adapter()`` undoes it) and returns ``model``.
    """
    if not isinstance(scene, int) or not isinstance(env, int):
        raise TypeError("merge_tuka needs int scene and env ids")
    set_active(model, scene, env, adapter_name)
    if unload:
        return model.merge_and_unload(adapter_names=[adapter_name])
    model.merge_adapter(adapter_names=[adapter_name])
    return model


def tuka_parameters(model: nn.Module, adapter_name: str = "default") -> dict[str, dict[str, nn.Parameter]]:
    """Live TuKA parameters grouped by role: ``{"G"|"U1"|"U2T"|"U3"|"U4": {layer_name: param}}``."""
    out: dict[str, dict[str, nn.Parameter]] = {k: {} for k in ("G", "U1", "U2T", "U3", "U4")}
    for name, layer in iter_tuka(model):
        if adapter_name in layer.lora_core:
            for role, p in layer.factors(adapter_name).items():
                out[role][name] = p
    return out


def count_adapter_params(model: nn.Module, adapter_name: str = "default") -> int:
    """Number of TuKA adapter parameters (all layers, all factors)."""
    return sum(p.numel() for group in tuka_parameters(model, adapter_name).values() for p in group.values())




def export_tuka_factors(model: nn.Module, adapter_name: str = "default"
                        ) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, float]]:
    """Detached CPU copies of every layer's factors keyed by the layer's name in the *base* model (peft's
    ``base_model.model.`` prefix removed), plus each layer's ``alpha / r1``: the serving-side format of
    ``agents.vln.experts.TuckerExpertBank`` (which needs no peft)."""
    factors: dict[str, dict[str, torch.Tensor]] = {}
    scaling: dict[str, float] = {}
    for name, layer in iter_tuka(model):
        if adapter_name not in layer.lora_core:
            continue
        base_name = name.removeprefix("base_model.model.")
        factors[base_name] = {k: v.detach().cpu().clone() for k, v in layer.factors(adapter_name).items()}
        scaling[base_name] = float(layer.scaling[adapter_name])
    if not factors:
        raise ValueError(f"model has no TuKA layers for adapter {adapter_name!r}")
    return factors, scaling
