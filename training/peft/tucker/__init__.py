"""TuKA: 4th-order Tucker adapters with scene/environment experts (AlldayWalker, ICLR 2026).

See ``shared/methods/tuka-alldaywalker.md`` and ``docs/tuka.md``. Public API (names are stable):

Adapter (``layer.py``, ``model.py``)
    ``TuKAConfig(r1, r2, r3, r4, alpha, target_modules, num_scenes, num_envs, expert_init_std, dropout)``
    ``apply_tuka(model, config) -> PeftModel``        targeted ``nn.Linear`` -> ``TuKALinear`` (peft LoRA subclass)
    ``set_active(model, scene, env)``                 route: int ids, per-sample LongTensors or float mixtures
    ``get_active(model)``, ``num_experts(model) -> (M, N)``, ``shared_route(M, ids)`` (uniform mixture)
    ``add_scene(model, init_from=None) -> id``        grow U3 by one row (copy of ``init_from``, e.g. the router's
    ``add_env(model, init_from=None) -> id``          nearest expert, else near-zero); old experts untouched
    ``save_tuka(model, dir)`` / ``load_tuka(base, dir, is_trainable=False)``  reload registers the custom
                                                      module and verifies layer classes and every tensor
    ``merge_tuka(model, scene, env, unload=True)``    fold delta W(s, e) into the base weights
    ``tuka_parameters(model)``, ``count_adapter_params(model)``, ``TuKAConfig.layer_param_count(in, out)``
    ``export_tuka_factors(model) -> (factors, scaling)``  base-model layer name -> {G, U1, U2T, U3, U4}, alpha/r1
                                                      (the format of ``agents.vln.experts.TuckerExpertBank``)
DKIL (``dkil.py``)
    ``DKILConfig(w_nav=.5, w_ewc=.2, w_co=.2, w_es=.1, omega=.95, fisher_max_batches=50, fisher_norm="mean",
    anchor_reused=False, core_fisher="diagonal")`` (``"pair"``: EWC on each learned pair's core slice, ``pair_ewc.py``)
    ``DKIL(model, config)``: ``before_task((s, e))``, ``penalty() -> Tensor``, ``combine(nav_loss) -> Tensor``,
    ``after_task(model, fisher_batches, loss_fn=None)``, ``terms()``, ``restore_frozen_rows()``,
    ``state_dict()``/``load_state_dict()``; ``estimate_fisher(model, params, batches, loss_fn, transform=None)``
Routing (``router.py``)
    ``PrototypeRouter(center=True, memory=0)``: ``add(features, scene=, env=)``, ``route(features) -> (scene, env)``
    (``memory=N``: up to N stored feature rows per expert, routed to the expert of the nearest one),
    ``route_batch(features)``, ``save(path)``/``PrototypeRouter.load(path)``; banks ``router.scene``/``router.env``
    (``PrototypeBank.nearest_one(features)`` gives ``init_from`` for growth); ``routing_accuracy(router, X, s, e)``;
    ``NoPrototypesError`` (a ``ValueError``) when routing with an empty bank.
"""

from __future__ import annotations

from training.peft.tucker.config import TuKAConfig
from training.peft.tucker.dkil import DKIL, DKILConfig, estimate_fisher
from training.peft.tucker.layer import Route, TuKALinear
from training.peft.tucker.model import (
    add_env,
    add_scene,
    apply_tuka,
    count_adapter_params,
    export_tuka_factors,
    get_active,
    get_tuka_config,
    iter_tuka,
    load_tuka,
    merge_tuka,
    num_experts,
    read_tuka_config,
    save_tuka,
    set_active,
    shared_route,
    tuka_lora_config,
    tuka_parameters,
)
from training.peft.tucker.router import NoPrototypesError, PrototypeBank, PrototypeRouter, routing_accuracy

__all__ = [
    "DKIL",
    "DKILConfig",
    "NoPrototypesError",
    "PrototypeBank",
    "PrototypeRouter",
    "Route",
    "TuKAConfig",
    "TuKALinear",
    "add_env",
    "add_scene",
    "apply_tuka",
    "count_adapter_params",
    "estimate_fisher",
    "export_tuka_factors",
    "get_active",
    "get_tuka_config",
    "iter_tuka",
    "load_tuka",
    "merge_tuka",
    "num_experts",
    "read_tuka_config",
    "routing_accuracy",
    "save_tuka",
    "set_active",
    "shared_route",
    "tuka_lora_config",
    "tuka_parameters",
]
