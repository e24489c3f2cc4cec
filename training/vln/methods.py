"""Lifelong adaptation methods of the AML-VLN benchmark, one registry entry each.

Every method wraps a fresh copy of the pre-trained base navigator's VLM and exposes the same task interface:
``start_task(task)`` -> train with ``penalty`` -> ``end_task(task, fisher_batches, features)``; for evaluation
``policy(task)`` returns an :class:`AlldayWalkerPolicy` (``task`` is the oracle id; routed methods ignore it).
"""

from __future__ import annotations

import logging
from typing import Any

from agents.core.registry import Registry
from agents.vln.configuration_vln import VLNAgentConfig
from agents.vln.modeling_vln import AlldayWalkerPolicy

log = logging.getLogger(__name__)

#: name -> class(bundle, agent_cfg, settings)
METHODS: Registry[type] = Registry("lifelong VLN method")


#: a method setting (``LifelongConfig``'s field) -> the ``DKILConfig`` field it sets
DKIL_SETTINGS = {"dkil_w_ewc": "w_ewc", "dkil_anchor_reused": "anchor_reused", "dkil_core_fisher": "core_fisher"}


def dkil_config(settings: dict[str, Any]) -> Any:
    """TuKA's ``DKILConfig`` from a method's settings: DKIL's own defaults for those not given, DKIL's own checks."""
    from training.peft.tucker import DKILConfig

    return DKILConfig(**{name: settings[key] for key, name in DKIL_SETTINGS.items() if key in settings})


def adapter_targets(family: str, adapt_projector: bool = False) -> str:
    """``target_modules`` regex of every method: the language model's linears, plus the multimodal projector's
    when ``adapt_projector`` (the paper's targets; routing must then read vision-tower features)."""
    from agents.vlm.families import lora_target_regex, projector_target_regex

    lm = lora_target_regex(family)
    return f"(?:{lm})|(?:{projector_target_regex(family)})" if adapt_projector else lm


def _lora_config(bundle: Any, settings: dict[str, Any]) -> Any:
    from peft import LoraConfig

    rank = settings["lora_rank"]
    return LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                      target_modules=adapter_targets(bundle.family, settings.get("adapt_projector", False)))


class _Method:
    routed = False

    def __init__(self, bundle: Any, agent_cfg: VLNAgentConfig, settings: dict[str, Any]) -> None:
        self.bundle, self.agent_cfg, self.settings = bundle, agent_cfg, settings
        self.penalty: Any = None

    @property
    def model(self) -> Any:
        return self.bundle.model

    def start_task(self, task: Any) -> None:
        if self.penalty is not None:
            self.penalty.before_task((task.scene, task.env))

    def end_task(self, task: Any, fisher_batches: list[dict[str, Any]], features: Any) -> None:
        if self.penalty is not None:
            self.penalty.after_task(self.model, fisher_batches)

    def select_task(self, task: Any) -> None:
        """Switch the model to ``task``'s adapter or experts by its true id (a single adapter: nothing to do)."""

    def policy(self, task: Any) -> AlldayWalkerPolicy:
        return AlldayWalkerPolicy(self.bundle, self.agent_cfg)

    def oracle_policy(self, task: Any) -> AlldayWalkerPolicy:
        """The policy for ``task`` given its true id (what ``policy`` is for methods that do not route)."""
        return self.policy(task)

    def adapter_params(self) -> int:
        return sum(p.numel() for n, p in self.model.named_parameters() if "lora_" in n)

    def diagnostics(self) -> dict[str, Any]:
        """Per-task figures a method records while it learns (for the report; none by default)."""
        return {}


@METHODS.register("seq_lora")
class SequentialLoRA(_Method):
    """One LoRA adapter trained on every task in turn, no regulariser (the forgetting baseline)."""

    def __init__(self, bundle: Any, agent_cfg: VLNAgentConfig, settings: dict[str, Any]) -> None:
        from peft import get_peft_model

        from training.peft.ewc_lora.protocol import NoPenalty

        super().__init__(bundle, agent_cfg, settings)
        bundle.model = get_peft_model(bundle.model, _lora_config(bundle, settings))
        self.penalty = NoPenalty(bundle.model)


@METHODS.register("seq_ft")
class SequentialFullFineTuning(_Method):
    """Every weight of the navigator trained on every task in turn, no adapter and no regulariser (the capacity
    reference: what plain fine-tuning can learn from a task's demonstrations, and how much it forgets)."""

    def __init__(self, bundle: Any, agent_cfg: VLNAgentConfig, settings: dict[str, Any]) -> None:
        super().__init__(bundle, agent_cfg, settings)
        for p in bundle.model.parameters():
            p.requires_grad_(True)

    def adapter_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


@METHODS.register("ewc_lora")
class EWCLoRAMethod(_Method):
    """One LoRA, merged after each task; EWC on the full-size delta W with the accumulated Fisher."""

    def __init__(self, bundle: Any, agent_cfg: VLNAgentConfig, settings: dict[str, Any]) -> None:
        from peft import get_peft_model

        from training.peft.ewc_lora.ewc import EWCLoRA, EWCLoRAConfig

        super().__init__(bundle, agent_cfg, settings)
        bundle.model = get_peft_model(bundle.model, _lora_config(bundle, settings))
        self.penalty = EWCLoRA(bundle.model, EWCLoRAConfig(lam=float(settings["ewc_lambda"])))


@METHODS.register("oracle_multi_lora")
class OracleMultiLoRAMethod(_Method):
    """One LoRA per task, picked by the true task id at test time (upper reference; needs the task id).
    An unseen pair uses the adapter of the last task with the same condition (else the last task)."""

    def __init__(self, bundle: Any, agent_cfg: VLNAgentConfig, settings: dict[str, Any]) -> None:
        from training.peft.multi_lora import OracleMultiLoRA

        super().__init__(bundle, agent_cfg, settings)
        self.ml = OracleMultiLoRA(bundle.model, _lora_config(bundle, settings))
        self.learned: list[Any] = []

    def start_task(self, task: Any) -> None:
        self.ml.add_task((task.scene, task.env))
        self.bundle.model = self.ml.model
        self.learned.append(task)

    def select_task(self, task: Any) -> None:
        known = [(t.scene, t.env) for t in self.learned]
        key = (task.scene, task.env)
        if key not in known:
            same_env = [k for k in known if k[1] == task.env]
            key = same_env[-1] if same_env else known[-1]
        self.ml.select(key)

    def policy(self, task: Any) -> AlldayWalkerPolicy:
        self.select_task(task)
        return AlldayWalkerPolicy(self.bundle, self.agent_cfg)

    def adapter_params(self) -> int:
        return self.ml.adapter_params()


@METHODS.register("tuka_dkil")
class TuKADKIL(_Method):
    """TuKA adapter (shared core + scene/environment experts) trained with DKIL; experts grow as new scenes and
    environments arrive (initialised from the router's nearest expert); test-time routing by visual prototypes."""

    routed = True

    def __init__(self, bundle: Any, agent_cfg: VLNAgentConfig, settings: dict[str, Any]) -> None:
        from training.peft.tucker import DKIL, PrototypeRouter, TuKAConfig, apply_tuka

        super().__init__(bundle, agent_cfg, settings)
        r1, r2, r3, r4 = settings["tuka_ranks"]
        cfg = TuKAConfig(r1=r1, r2=r2, r3=r3, r4=r4, alpha=float(settings.get("tuka_alpha", 2 * r1)),
                         expert_init_jitter=float(settings.get("tuka_init_jitter", 0.0)),
                         target_modules=adapter_targets(bundle.family, settings.get("adapt_projector", False)),
                         num_scenes=1, num_envs=1)
        bundle.model = apply_tuka(bundle.model, cfg)
        self.penalty = DKIL(bundle.model, dkil_config(settings))
        self.router = PrototypeRouter(memory=int(settings.get("routing_memory", 0)))
        self.scene_ids: dict[int, int] = {}  # task scene index -> expert row
        self.env_ids: dict[int, int] = {}
        self.routes: list[tuple[tuple[int | None, int | None], tuple[int, int]]] = []
        self.freedom: list[float] = []  # DKIL's pair freedom at each task's start

    def expert_of(self, task: Any) -> tuple[int | None, int | None]:
        return self.scene_ids.get(task.scene), self.env_ids.get(task.env)

    def start_task(self, task: Any, features: Any = None) -> None:
        from training.peft.tucker import add_env, add_scene

        for kind, key, ids, bank, grow in (("scene", task.scene, self.scene_ids, self.router.scene, add_scene),
                                           ("env", task.env, self.env_ids, self.router.env, add_env)):
            if key in ids:
                continue
            if not ids:
                ids[key] = 0  # the adapter's first row
                continue
            init = bank.nearest_one(features) if features is not None and len(bank) else None
            ids[key] = grow(self.model, init_from=init)
            log.info("TuKA: new %s expert %d for task %s (init from %s)", kind, ids[key], task.name, init)
        self.penalty.before_task((self.scene_ids[task.scene], self.env_ids[task.env]))
        self.freedom.append(self.penalty.freedom)

    def end_task(self, task: Any, fisher_batches: list[dict[str, Any]], features: Any) -> None:
        self.penalty.after_task(self.model, fisher_batches)
        self.router.add(features, scene=self.scene_ids[task.scene], env=self.env_ids[task.env])

    def activate(self, scene: int | None, env: int | None) -> None:
        from training.peft.tucker import num_experts, set_active, shared_route

        m, n = num_experts(self.model)
        set_active(self.model, shared_route(m) if scene is None else scene, shared_route(n) if env is None else env)

    def select_task(self, task: Any) -> None:
        """The task's own experts (the oracle route the released code evaluates with); unknown parts: shared."""
        self.activate(*self.expert_of(task))

    def policy(self, task: Any) -> AlldayWalkerPolicy:
        return AlldayWalkerPolicy(self.bundle, self.agent_cfg, router=self.router, activator=self.activate)

    def oracle_policy(self, task: Any) -> AlldayWalkerPolicy:
        """The task's own experts, no routing: separates what the experts hold from what the router picks."""
        self.select_task(task)
        return AlldayWalkerPolicy(self.bundle, self.agent_cfg)

    def diagnostics(self) -> dict[str, Any]:
        return {"pair_freedom": list(self.freedom)}

    def adapter_params(self) -> int:
        from training.peft.tucker import count_adapter_params

        return count_adapter_params(self.model)
