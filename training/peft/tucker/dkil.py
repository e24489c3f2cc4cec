"""Decoupled Knowledge Incremental Learning (DKIL) for TuKA.

``L = w_nav L_nav + w_ewc L_ewc + w_co L_co + w_es L_es`` (defaults 0.5 / 0.2 / 0.2 / 0.1, i.e. the paper's
lambda = 1 - (lambda1 + lambda2 + lambda3)):

- ``L_ewc = sum_k F_k (theta_k - theta*_k)^2`` over the shared factors G, U1, U2 of every layer; ``F`` is the
  online diagonal Fisher (mean squared gradient of the task loss over the Fisher batches), updated after each
  task as ``F <- omega F + (1 - omega) F_new`` (omega 0.95; the first task sets ``F = F_new``); by default each
  tensor's F is divided by its mean in the penalty (``DKILConfig.fisher_norm``);
- ``L_co = sum ||U3[s'] - U3*[s']||^2 + sum ||U4[e'] - U4*[e']||^2`` over the rows of experts learned in earlier
  tasks, except the rows the current task trains (``anchor_reused``: those too when an earlier task learned them,
  e.g. the night expert when a second building's night arrives: refined, not overwritten);
- ``core_fisher = "pair"`` (an ablation): the EWC term on ``G`` is taken per learned (scene, env) pair on its
  contraction ``G x3 U3[s] x4 U4[e]``, as a function of the live expert rows too (``pair_ewc``), instead of on
  ``G``'s coordinates with a diagonal Fisher;
- ``L_es = sum_{s' learned, s' != s} (u3[s] . u3[s'])^2 + (same for U4)`` on unit-normalised rows, the old
  rows detached: the paper's intent (new row orthogonal to old ones). The released code's version is
  identically zero (it only looks at the single active row);
- gradient masking: tensor hooks zero the gradient of every U3/U4 row except the active ones, so SGD and
  Adam (fresh state, no weight decay on experts) leave them bit-identical. With weight decay or optimiser
  state carried across tasks, call ``restore_frozen_rows()`` after ``optimizer.step()``.

Order per task: grow (``add_scene``/``add_env``) -> ``before_task((s, e))`` -> build optimiser -> train with
``combine(nav_loss)`` -> ``after_task(model, fisher_batches)``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from training.peft.ewc_lora.protocol import LossFn, check_model, default_loss_fn
from training.peft.tucker.model import iter_tuka, num_experts, set_active
from training.peft.tucker.pair_ewc import Pair, core_grad_to_pair, pair_freedom, pair_key, pair_penalty, pair_snapshot

log = logging.getLogger(__name__)

SHARED_ROLES = ("G", "U1", "U2T")
FISHER_NORMS = ("none", "mean", "max")
CORE_FISHERS = ("diagonal", "pair")
GradTransform = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]


@dataclass
class DKILConfig:
    """Loss weights, Fisher EMA and Fisher estimation settings of DKIL."""

    w_nav: float = 0.5
    w_ewc: float = 0.2
    w_co: float = 0.2
    w_es: float = 0.1
    omega: float = 0.95
    fisher_max_batches: int = 50
    # Scale of F in L_ewc: "mean" (default) divides each tensor's Fisher by its mean, so L_ewc ~ ||theta - theta*||^2
    # and the paper's weights bite (the raw empirical Fisher of a converged task is tiny; the released code used
    # EWC_LAMBDA 5000 instead); "none" is the literal formula; "max" divides by the max.
    fisher_norm: str = "mean"
    mask_gradients: bool = True
    # The paper's "sum over old experts" read as: also an active row that an earlier task learned (an ablation; the
    # default leaves the active rows free, as the released code's masks do).
    anchor_reused: bool = False
    # EWC on G: "diagonal" (the paper's: G's own coordinates) or "pair" (each learned pair's contraction, see
    # training.peft.tucker.pair_ewc; an ablation).
    core_fisher: str = "diagonal"

    def __post_init__(self) -> None:
        for name in ("w_nav", "w_ewc", "w_co", "w_es"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"DKILConfig.{name} must be a finite number >= 0, got {v!r}")
        if self.w_nav <= 0:
            raise ValueError(f"DKILConfig.w_nav must be > 0, got {self.w_nav}")
        if not 0.0 <= self.omega < 1.0:
            raise ValueError(f"DKILConfig.omega must be in [0, 1), got {self.omega}")
        if not isinstance(self.fisher_max_batches, int) or self.fisher_max_batches < 1:
            raise ValueError(f"DKILConfig.fisher_max_batches must be a positive int, got {self.fisher_max_batches}")
        for name in ("mask_gradients", "anchor_reused"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"DKILConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if self.fisher_norm not in FISHER_NORMS:
            raise ValueError(f"DKILConfig.fisher_norm must be one of {FISHER_NORMS}, got {self.fisher_norm!r}")
        if self.core_fisher not in CORE_FISHERS:
            raise ValueError(f"DKILConfig.core_fisher must be one of {CORE_FISHERS}, got {self.core_fisher!r}")


def estimate_fisher(model: nn.Module, params: Mapping[str, torch.Tensor], batches: Iterable[Any],
                    loss_fn: LossFn = default_loss_fn, max_batches: int | None = None,
                    transform: GradTransform | None = None) -> dict[str, torch.Tensor]:
    """Diagonal empirical Fisher: mean over batches of the squared gradient of ``loss_fn`` (fp32, eval mode).
    ``transform`` maps each batch's ``{name: grad}`` (zeros for unused parameters) to the gradients to square
    (e.g. in other coordinates)."""
    names = list(params)
    tensors = [params[n] for n in names]
    if not all(t.requires_grad for t in tensors):
        raise ValueError("estimate_fisher: every parameter must require grad")
    fisher: dict[str, torch.Tensor] = {}
    was_training = model.training
    model.eval()
    count = 0
    try:
        with torch.enable_grad():
            for batch in batches:
                if max_batches is not None and count >= max_batches:
                    break
                grads = torch.autograd.grad(loss_fn(model, batch), tensors, allow_unused=True)
                named = {n: (torch.zeros_like(t) if g is None else g).detach().float()
                         for n, t, g in zip(names, tensors, grads)}
                for n, g in (transform(named) if transform is not None else named).items():
                    fisher[n] = fisher.get(n, 0.0) + g.float() ** 2
                count += 1
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("estimate_fisher: no batches")
    return {n: f / count for n, f in fisher.items()}


class DKIL:
    """DKIL penalty object for a TuKA ``PeftModel`` (see the module docstring)."""

    def __init__(self, model: nn.Module, config: DKILConfig | None = None, adapter_name: str = "default") -> None:
        self.model = model
        self.config = config or DKILConfig()
        self.adapter_name = adapter_name
        num_experts(model, adapter_name)  # fails clearly on a non-TuKA model
        self.fisher: dict[str, torch.Tensor] = {}
        self.anchor: dict[str, torch.Tensor] = {}
        self.expert_anchor: dict[str, torch.Tensor] = {}
        self.seen: dict[str, set[int]] = {"U3": set(), "U4": set()}
        self.pairs: set[Pair] = set()  # learned (scene, env) pairs
        self.pair_anchor: dict[str, tuple[torch.Tensor, float]] = {}  # core_fisher "pair": C* and rms(C*)
        self.task: tuple[int, int] | None = None
        self.tasks_done = 0
        self._hooks: list[Any] = []
        self._hooked: list[torch.Tensor] = []
        self._task_start: dict[str, torch.Tensor] = {}
        self.last_terms: dict[str, float] = {}
        self.freedom: float | None = None  # median over layers of pair_freedom of the current task's pair

    # ---------------------------------------------------------------------------------------------- access
    def _factors(self) -> dict[str, dict[str, torch.Tensor]]:
        out: dict[str, dict[str, torch.Tensor]] = {}
        for name, layer in iter_tuka(self.model):
            if self.adapter_name in layer.lora_core:
                out[name] = layer.factors(self.adapter_name)
        return out

    def shared_params(self) -> dict[str, torch.Tensor]:
        """``{"<layer>.<G|U1|U2T>": param}``: the parameters EWC protects."""
        return {f"{ln}.{role}": f[role] for ln, f in self._factors().items() for role in SHARED_ROLES}

    # ----------------------------------------------------------------------------------------------- tasks
    def before_task(self, task: tuple[int, int]) -> None:
        """Route the model to ``task = (scene, env)`` and mask the gradients of every other expert row."""
        if not isinstance(task, (tuple, list)) or len(task) != 2:
            raise ValueError(f"DKIL task must be a (scene, env) pair of ints, got {task!r}")
        scene, env = task
        if isinstance(scene, bool) or isinstance(env, bool) or not isinstance(scene, int) or not isinstance(env, int):
            raise ValueError(f"DKIL task must be a (scene, env) pair of ints, got {task!r}")
        set_active(self.model, scene, env, self.adapter_name)  # range-checked
        self.task = (scene, env)
        self.freedom = self._freedom(self.task)
        if self.pairs:
            log.info("DKIL: task %s, pair freedom %.3g (median over layers; rows reused: scene %s, env %s)",
                     self.task, self.freedom, scene in self.seen["U3"], env in self.seen["U4"])
        self._remove_hooks()
        self._task_start = {f"{ln}.{role}": f[role].detach().clone()
                            for ln, f in self._factors().items() for role in ("U3", "U4")}
        if self.config.mask_gradients:
            for f in self._factors().values():
                for role, row in (("U3", scene), ("U4", env)):
                    p = f[role]
                    mask = torch.zeros(p.shape[0], 1, dtype=p.dtype, device=p.device)
                    mask[row] = 1.0
                    self._hooks.append(p.register_hook(lambda g, m=mask: g * m))
                    self._hooked.append(p)

    def _freedom(self, pair: Pair) -> float:
        """Median over layers of ``pair_freedom(pair)`` against the learned pairs (1.0 before any)."""
        vals = [pair_freedom(f["U3"], f["U4"], self.pairs, pair) for f in self._factors().values()]
        return float(torch.tensor(vals).median()) if vals else 1.0

    def _remove_hooks(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks, self._hooked = [], []

    def _check_hooks(self) -> None:
        if not self.config.mask_gradients or self.task is None:
            return
        live = {id(f[r]) for f in self._factors().values() for r in ("U3", "U4")}
        if live != {id(p) for p in self._hooked}:
            raise RuntimeError("TuKA expert tensors changed since before_task (add_scene/add_env?): "
                               "call before_task again and rebuild the optimiser")

    def frozen_rows(self) -> dict[str, list[int]]:
        """Rows of U3/U4 that the current task must not change."""
        if self.task is None:
            raise ValueError("DKIL: no current task; call before_task first")
        m, n = num_experts(self.model, self.adapter_name)
        return {"U3": [i for i in range(m) if i != self.task[0]], "U4": [i for i in range(n) if i != self.task[1]]}

    @torch.no_grad()
    def restore_frozen_rows(self) -> None:
        """Copy the values the frozen rows had at ``before_task`` back (weight decay / carried optimiser state)."""
        frozen = self.frozen_rows()
        for ln, f in self._factors().items():
            for role in ("U3", "U4"):
                ref = self._task_start.get(f"{ln}.{role}")
                if ref is None:
                    continue
                rows = [i for i in frozen[role] if i < ref.shape[0]]
                f[role][rows] = ref[rows].to(f[role])

    # ------------------------------------------------------------------------------------------------ terms
    def terms(self) -> dict[str, torch.Tensor]:
        """The unweighted ``ewc``, ``co`` and ``es`` terms (differentiable)."""
        self._check_hooks()
        factors = self._factors()
        any_p = next(iter(next(iter(factors.values())).values()))
        zero = any_p.new_zeros((), dtype=torch.float32)
        ewc, co, es = zero.clone(), zero.clone(), zero.clone()
        for ln, f in factors.items():
            for role in SHARED_ROLES:
                key = f"{ln}.{role}"
                if key in self.fisher:  # (no "<layer>.G" entry under core_fisher "pair")
                    ewc = ewc + (self._fisher_for_penalty(key) * (f[role].float() - self.anchor[key]) ** 2).sum()
            for role, active in (("U3", self._active(0)), ("U4", self._active(1))):
                u = f[role].float()
                old = sorted(i for i in self.seen[role] if i != active and i < u.shape[0])
                kept = old + ([active] if self.config.anchor_reused and active in self.seen[role] else [])
                ref = self.expert_anchor.get(f"{ln}.{role}")
                if kept and ref is not None:
                    co = co + ((u[kept] - ref[kept].to(u)) ** 2).sum()
                if old and active is not None:
                    new = u[active] / u[active].norm().clamp_min(1e-12)
                    olds = u[old].detach()
                    olds = olds / olds.norm(dim=1, keepdim=True).clamp_min(1e-12)
                    es = es + ((olds @ new) ** 2).sum()
        if self.config.core_fisher == "pair":
            held = self.pairs - ({self.task} if self.task is not None else set())
            keys = {k for k in self.fisher if ".C." in k}
            ewc = ewc + pair_penalty(factors, held, self.pair_anchor,
                                     {k: self._fisher_for_penalty(k) for k in keys})
        return {"ewc": ewc, "co": co, "es": es}

    def _active(self, i: int) -> int | None:
        return None if self.task is None else self.task[i]

    def _fisher_for_penalty(self, key: str) -> torch.Tensor:
        f = self.fisher[key]
        if self.config.fisher_norm == "mean":
            return f / f.mean().clamp_min(1e-30)
        if self.config.fisher_norm == "max":
            return f / f.max().clamp_min(1e-30)
        return f

    def penalty(self, model: nn.Module | None = None) -> torch.Tensor:
        """``w_ewc L_ewc + w_co L_co + w_es L_es`` (zero on the first task)."""
        check_model(self.model, model, "DKIL")
        t = self.terms()
        self.last_terms = {k: float(v.detach()) for k, v in t.items()}
        c = self.config
        return c.w_ewc * t["ewc"] + c.w_co * t["co"] + c.w_es * t["es"]

    def combine(self, task_loss: torch.Tensor) -> torch.Tensor:
        """The full DKIL loss ``w_nav * task_loss + penalty()``."""
        return self.config.w_nav * task_loss + self.penalty().to(task_loss.dtype)

    # ------------------------------------------------------------------------------------------- after task
    def after_task(self, model: nn.Module | None = None, batches: Iterable[Any] | None = None, *,
                   loss_fn: LossFn | None = None, fisher: Mapping[str, torch.Tensor] | None = None) -> None:
        """Update the online Fisher (from ``batches`` or a precomputed ``fisher``), anchor the shared factors and
        the expert rows, mark the task's experts as learned and drop the gradient masks."""
        check_model(self.model, model, "DKIL")
        if self.task is None:
            raise ValueError("DKIL.after_task without before_task")
        shared = self.shared_params()
        if fisher is None:
            if batches is None:
                raise ValueError("DKIL.after_task needs Fisher batches (or a precomputed fisher=)")
            fisher = estimate_fisher(self.model, shared, batches, loss_fn or default_loss_fn,
                                     self.config.fisher_max_batches, transform=self._fisher_transform())
        missing = self._fisher_keys(shared) - set(fisher)
        if missing:
            raise ValueError(f"fisher lacks entries for {sorted(missing)[:3]}")
        w = self.config.omega
        for key, f_new in fisher.items():
            f_new = f_new.detach().float()
            old = self.fisher.get(key)
            self.fisher[key] = f_new.clone() if old is None else w * old + (1.0 - w) * f_new
        self.anchor = {k: p.detach().float().clone() for k, p in shared.items()}
        self.expert_anchor = {f"{ln}.{role}": f[role].detach().float().clone()
                              for ln, f in self._factors().items() for role in ("U3", "U4")}
        self.seen["U3"].add(self.task[0])
        self.seen["U4"].add(self.task[1])
        self.pairs.add(self.task)
        if self.config.core_fisher == "pair":
            self.pair_anchor = pair_snapshot(self._factors(), self.pairs)
        self._remove_hooks()
        self.tasks_done += 1
        log.info("DKIL: task %s done (%d so far); learned scenes %s, envs %s", self.task, self.tasks_done,
                 sorted(self.seen["U3"]), sorted(self.seen["U4"]))
        self.task = None

    def _fisher_keys(self, shared: Mapping[str, torch.Tensor]) -> set[str]:
        """The Fisher entries ``after_task`` needs for the current task (``shared``: ``shared_params()``)."""
        keys = set(shared)
        if self.config.core_fisher == "pair":
            assert self.task is not None
            layers = list(self._factors())
            keys = (keys - {f"{ln}.G" for ln in layers}) | {pair_key(ln, self.task) for ln in layers}
        return keys

    def _fisher_transform(self) -> GradTransform | None:
        """Under ``core_fisher="pair"``: each layer's ``G`` gradient -> the current pair's ``C`` gradient."""
        if self.config.core_fisher != "pair":
            return None
        assert self.task is not None
        pair, factors = self.task, self._factors()

        def to_pair(grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            out = {k: g for k, g in grads.items() if not k.endswith(".G")}
            for ln, f in factors.items():
                out[pair_key(ln, pair)] = core_grad_to_pair(grads[f"{ln}.G"], f["U3"][pair[0]].detach(),
                                                             f["U4"][pair[1]].detach())
            return out
        return to_pair

    # ------------------------------------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, Any]:
        return {"fisher": dict(self.fisher), "anchor": dict(self.anchor), "expert_anchor": dict(self.expert_anchor),
                "seen_scenes": sorted(self.seen["U3"]), "seen_envs": sorted(self.seen["U4"]),
                "pairs": sorted(self.pairs), "pair_anchor": dict(self.pair_anchor), "tasks_done": self.tasks_done}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            self.fisher = {k: v.float() for k, v in state["fisher"].items()}
            self.anchor = {k: v.float() for k, v in state["anchor"].items()}
            self.expert_anchor = {k: v.float() for k, v in state["expert_anchor"].items()}
            self.seen = {"U3": set(state["seen_scenes"]), "U4": set(state["seen_envs"])}
            self.tasks_done = int(state["tasks_done"])
            self.pairs = {(int(s), int(e)) for s, e in state.get("pairs", [])}  # absent in states before "pair"
            self.pair_anchor = {k: (v[0].float(), float(v[1])) for k, v in state.get("pair_anchor", {}).items()}
        except (KeyError, AttributeError, TypeError) as exc:
            raise ValueError(f"corrupt DKIL state: {exc!r}") from exc
        shared, layers = set(self.shared_params()), set(self._factors())
        unknown = {k for k in self.fisher if k not in shared and k.split(".C.")[0] not in layers}
        if unknown:
            raise ValueError(f"DKIL state does not match the model: unknown keys {sorted(unknown)[:3]}")
