"""``FedConfig``: one validated dataclass for a federated run (from YAML, ``k=v`` overrides or Flower's run config).

Fields (all have defaults; see ``configs/fed/quick.yaml`` and ``docs/federated.md``):

- method: a ``FED_METHODS`` key (fedplora, fedit, hetlora, flora, flexlora, ...).
- rounds, num_clients, fraction (clients sampled per round), min_clients (at least this many per round).
- split ("iid" | "dirichlet"), dirichlet_alpha, examples_per_client, test_size.
- rank (global R), budgets (per-client rank budgets r_i, assigned cyclically by partition id; a deployment
  SuperNode may override its own with ``--node-config "rank-budget=4"``), alpha (LoRA scale s = alpha / R).
- local_steps, batch_size, lr: the identical local compute budget of every method.
- weighting ("samples" | "uniform"), seed, round_timeout (s per round), checkpoint_dir ("" = none), resume.
- federated_eval: after the last round, every node evaluates the final global model on its local data
  (Flower ``@app.evaluate()``); the accuracies go into the last round's record (``extra["federated_eval"]``).
- torch_threads: intra-op threads of each process (1: Ray/SuperNodes run one client per CPU; more oversubscribes).
- faults: test-only fault injection, ``{partition_id: kind}`` with kind in nan | shape | rank | crash.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.config_io import override_value, read_yaml_mapping

FAULT_KINDS = ("nan", "shape", "rank", "crash")


@dataclass
class FedConfig:
    """A federated fine-tuning run (validated at construction)."""

    method: str = "fedplora"
    rounds: int = 5
    num_clients: int = 20
    fraction: float = 0.2
    min_clients: int = 2
    split: str = "iid"
    dirichlet_alpha: float = 0.3
    examples_per_client: int = 40
    test_size: int = 400
    rank: int = 16
    budgets: list[int] = field(default_factory=lambda: [2, 4, 8, 16])
    alpha: float = 32.0
    local_steps: int = 10
    batch_size: int = 16
    lr: float = 3e-3
    weighting: str = "samples"
    seed: int = 0
    round_timeout: float = 120.0
    checkpoint_dir: str = ""
    resume: bool = True
    torch_threads: int = 1
    federated_eval: bool = False
    faults: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from training.federated.registry import FED_METHODS

        if self.method not in FED_METHODS:
            raise ValueError(f"method must be one of {FED_METHODS.names()}, got {self.method!r}")
        for name in ("rounds", "num_clients", "min_clients", "examples_per_client", "test_size", "rank",
                     "local_steps", "batch_size", "torch_threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {self.seed!r}")
        for name, lo, hi in (("fraction", 0.0, 1.0), ("lr", 0.0, 10.0), ("alpha", 0.0, 1e6),
                             ("dirichlet_alpha", 0.0, 1e6), ("round_timeout", 0.0, 1e6)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo < v <= hi:
                raise ValueError(f"{name} must be a number in ({lo}, {hi}], got {v!r}")
        if self.min_clients > self.num_clients:
            raise ValueError(f"min_clients ({self.min_clients}) must be <= num_clients ({self.num_clients})")
        if self.split not in ("iid", "dirichlet"):
            raise ValueError(f"split must be 'iid' or 'dirichlet', got {self.split!r}")
        if self.weighting not in ("samples", "uniform"):
            raise ValueError(f"weighting must be 'samples' or 'uniform', got {self.weighting!r}")
        if not isinstance(self.budgets, (list, tuple)) or not self.budgets:
            raise ValueError(f"budgets must be a non-empty list of ints, got {self.budgets!r}")
        self.budgets = list(self.budgets)
        for b in self.budgets:
            if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= self.rank:
                raise ValueError(f"budgets must be ints in [1, rank={self.rank}], got {self.budgets!r}")
        if not isinstance(self.faults, dict):
            raise ValueError(f"faults must be a mapping partition_id -> kind, got {self.faults!r}")
        self.faults = {int(k): str(v) for k, v in self.faults.items()}
        bad = {k: v for k, v in self.faults.items() if v not in FAULT_KINDS or not 0 <= k < self.num_clients}
        if bad:
            raise ValueError(f"faults: bad entries {bad}; kinds {FAULT_KINDS}, ids in [0, {self.num_clients})")

    # ------------------------------------------------------------------------------------------------ helpers
    def budget_for(self, partition_id: int) -> int:
        """The configured rank budget r_i of client ``partition_id`` (cyclic over ``budgets``)."""
        return self.budgets[partition_id % len(self.budgets)]

    def clients_per_round(self) -> int:
        return min(self.num_clients, max(self.min_clients, round(self.fraction * self.num_clients)))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **kw: Any) -> FedConfig:
        return dataclasses.replace(self, **kw)


def _coerce(cls_field: dataclasses.Field, raw: str) -> Any:
    """Parse one ``k=v`` override value with YAML, so ``budgets=[2,4]`` and ``faults={1: nan}`` work."""
    value = override_value(raw, f"{cls_field.name}={raw}")
    if cls_field.type in ("float",) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if cls_field.type == "str" and not isinstance(value, str):
        return str(raw)
    return value


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, **kw: Any) -> FedConfig:
    """Build a ``FedConfig`` from a YAML file (optional), ``["k=v", ...]`` overrides and keyword values."""
    data: dict[str, Any] = {}
    if path:
        data.update(read_yaml_mapping(path, "federated config"))
    fields = {f.name: f for f in dataclasses.fields(FedConfig)}
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} must look like key=value")
        if key not in fields:
            raise ValueError(f"unknown FedConfig key {key!r}; known: {sorted(fields)}")
        data[key] = _coerce(fields[key], raw)
    data.update({k: v for k, v in kw.items() if v is not None})
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"unknown FedConfig keys {unknown}; known: {sorted(fields)}")
    for name in ("fraction", "lr", "alpha", "dirichlet_alpha", "round_timeout"):
        if isinstance(data.get(name), int) and not isinstance(data.get(name), bool):
            data[name] = float(data[name])
    return FedConfig(**data)
