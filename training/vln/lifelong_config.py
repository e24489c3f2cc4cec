"""The lifelong VLN protocol's settings: the task sequence (``Task``) and ``LifelongConfig``, validated at
construction."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agents.core.config import check_ints, check_numbers
from agents.vln.configuration_vln import VLNAgentConfig
from training.vln.config import VLNTrainConfig
from training.vln.methods import DKIL_SETTINGS, METHODS, dkil_config


@dataclass(frozen=True)
class Task:
    index: int
    scene: int
    condition: str
    env: int

    @property
    def name(self) -> str:
        return f"S{self.scene}-{self.condition}"


@dataclass
class LifelongConfig:
    """Sequence, data and per-task training settings (the base navigator comes from ``base``).

    ``full_matrix``: evaluate every learnt task after each task (the SR matrix), else only the task just learnt and,
    after the last one, all of them. ``blind_forward_steps``: N of the blind reference (forward N times, then stop).
    ``dkil_w_ewc``: TuKA's weight of the EWC term on its shared factors (DKIL's default 0.2); ``dkil_anchor_reused``:
    DKIL's consistency term also holds an expert row an earlier task learned when a new task reuses it;
    ``dkil_core_fisher``: DKIL's EWC on the core G, "diagonal" (the paper's) or "pair" (each learned pair's
    contraction, through the live expert rows: ``training.peft.tucker.pair_ewc``).
    ``cotrain``: the fraction of every adaptation batch that is scene questions ("where is the <object>?") about
    the task's own training frames, under its condition, answered from segmentation: the base navigator's data mix
    when it was co-trained on them (0: imitation only, the paper's protocol).
    ``adapt_projector``: every method adapts the multimodal projector too (the paper's targets), and routing then
    reads vision-tower features (``VLNAgentConfig.routing_features``), which the projector's adapter cannot move.
    ``offline_samples``: teacher-driven model calls per task on its held-out episodes, scored teacher-forced after
    every task (``training.vln.offline``: the low-noise learning and forgetting matrices; 0: off).
    ``routing_memory``: TuKA's router keeps that many vision features per expert, from training frames spread over
    each task, and routes to the expert of the nearest one (``training.peft.tucker.router``); 0: one mean prototype
    per expert from the task's first 64 training frames (the paper's rule). ``tuka_init_jitter``: a TuKA expert row
    grown from the nearest one gets a random part orthogonal to it of that fraction of its norm (0: an exact
    copy, the paper's rule; ``TuKAConfig.expert_init_jitter``)."""

    base: VLNTrainConfig = field(default_factory=VLNTrainConfig)
    n_scenes: int = 3
    conditions: list[str] = field(default_factory=lambda: ["normal", "low_light", "overexposure", "scattering"])
    n_unseen: int = 2
    order_seed: int = 0
    train_per_task: int = 8
    eval_per_task: int = 4
    steps_per_task: int = 60
    batch_size: int = 8
    lr: float = 1e-3
    lora_rank: int = 8
    tuka_ranks: tuple[int, int, int, int] = (8, 8, 4, 4)
    ewc_lambda: float = 1e7
    dkil_w_ewc: float = 0.2
    dkil_anchor_reused: bool = False
    dkil_core_fisher: str = "diagonal"
    fisher_batches: int = 4
    methods: list[str] = field(default_factory=lambda: ["seq_lora", "ewc_lora", "oracle_multi_lora", "tuka_dkil"])
    full_matrix: bool = True
    blind_forward_steps: int = 6
    adapt_projector: bool = False
    cotrain: float = 0.0
    offline_samples: int = 256
    routing_memory: int = 0
    tuka_init_jitter: float = 0.0

    def __post_init__(self) -> None:
        from sim.nav.conditions import available_conditions

        if not isinstance(self.n_scenes, int) or not 1 <= self.n_scenes <= self.base.n_scenes:
            raise ValueError(f"n_scenes must be an int in 1..{self.base.n_scenes} (the base navigator's scenes), "
                             f"got {self.n_scenes!r}")
        bad = [c for c in self.conditions if c not in available_conditions()]
        if not self.conditions or bad or len(set(self.conditions)) != len(self.conditions):
            raise ValueError(f"conditions must be distinct names of {available_conditions()}, got {self.conditions}")
        pairs = self.n_scenes * len(self.conditions)
        if not isinstance(self.n_unseen, int) or not 0 <= self.n_unseen <= pairs - 2:
            raise ValueError(f"n_unseen must be in 0..{pairs - 2} ({pairs} pairs, at least 2 tasks), got "
                             f"{self.n_unseen!r}")
        if pairs - self.n_unseen > 24:
            raise ValueError(f"at most 24 tasks (the paper's setting), got {pairs - self.n_unseen}")
        for name in ("train_per_task", "eval_per_task", "steps_per_task", "batch_size", "lora_rank",
                     "fisher_batches", "blind_forward_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if len(self.tuka_ranks) != 4 or any(int(r) < 1 for r in self.tuka_ranks):
            raise ValueError(f"tuka_ranks must be 4 positive ints, got {self.tuka_ranks}")
        for m in self.methods:
            if m not in METHODS:
                raise ValueError(f"unknown lifelong VLN method {m!r}; known: {', '.join(sorted(METHODS))}")
        try:  # DKIL's own check, of the config the TuKA method will build
            dkil_config({key: getattr(self, key) for key in DKIL_SETTINGS})
        except ValueError as exc:
            raise ValueError(f"dkil_w_ewc / dkil_anchor_reused / dkil_core_fisher: {exc}") from exc
        if not isinstance(self.adapt_projector, bool):
            raise TypeError(f"adapt_projector must be a bool, got {self.adapt_projector!r}")
        # SceneGroundingConfig.cotrain's range; TuKAConfig.expert_init_jitter's
        check_numbers(self, {"cotrain": (0.0, 0.9), "tuka_init_jitter": (0.0, 10.0)}, "LifelongConfig.")
        # 0: off / one mean prototype per expert
        check_ints(self, {"offline_samples": (0, 10**9), "routing_memory": (0, 10**9), "order_seed": (0, 2**32 - 1)},
                   "LifelongConfig.")

    def tasks(self) -> tuple[list[Task], list[Task]]:
        """(task sequence in a fixed random order, unseen pairs). The held-out pairs are chosen so every scene
        and every condition still occurs in the sequence whenever possible."""
        rng = np.random.default_rng(self.order_seed)
        pairs = [(s, c) for s in range(self.n_scenes) for c in range(len(self.conditions))]
        unseen: list[tuple[int, int]] = []
        for p in [pairs[i] for i in rng.permutation(len(pairs))]:
            if len(unseen) == self.n_unseen:
                break
            rest = [q for q in pairs if q not in unseen and q != p]
            if {q[0] for q in rest} == set(range(self.n_scenes)) and {q[1] for q in rest} == set(
                    range(len(self.conditions))):
                unseen.append(p)
        seq = [p for p in pairs if p not in unseen]
        seq = [seq[i] for i in rng.permutation(len(seq))]
        mk = lambda i, p: Task(i, p[0], self.conditions[p[1]], p[1])  # noqa: E731
        return [mk(i, p) for i, p in enumerate(seq)], [mk(len(seq) + i, p) for i, p in enumerate(unseen)]

    def settings(self) -> dict[str, Any]:
        return {"lora_rank": self.lora_rank, "tuka_ranks": tuple(self.tuka_ranks), "ewc_lambda": self.ewc_lambda,
                **{key: getattr(self, key) for key in DKIL_SETTINGS}, "adapt_projector": self.adapt_projector,
                "routing_memory": self.routing_memory, "tuka_init_jitter": self.tuka_init_jitter}

    def agent_config(self) -> VLNAgentConfig:
        """The base navigator's agent settings; routing reads vision-tower features when the projector is adapted."""
        cfg = self.base.agent_config()
        return dataclasses.replace(cfg, routing_features="vision_tower") if self.adapt_projector else cfg

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["base"] = self.base.fingerprint()
        return d
