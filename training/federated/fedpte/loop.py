"""The federated round as plain functions (``client_round``, ``server_round``) and a fast in-process loop over
them. The Flower app (:mod:`training.federated.fedpte.app`) calls the same two functions, so the loop and the app
compute the same thing; the loop just skips the messaging (used by tests and ``benchmarks/fedpte.py``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from training.federated.fedpte.client import evaluate, fedavg, local_prototypes, local_train
from training.federated.fedpte.config import ClientConfig, EvolutionConfig, _check
from training.federated.fedpte.data import Domain
from training.federated.fedpte.evolve import ClassUpload, PrototypeSet
from training.federated.fedpte.methods import PROTO_METHODS, make_method
from training.federated.fedpte.model import SmallCNN

log = logging.getLogger(__name__)


@dataclass
class FedRunConfig:
    """A whole run: method name (``fedavg`` / ``fedproto`` / ``fedpte``), rounds, model size, client and server
    settings."""

    method: str = "fedpte"
    rounds: int = 10
    width: int = 16
    emb_dim: int = 64
    seed: int = 0
    client: ClientConfig = field(default_factory=ClientConfig)
    evolution: EvolutionConfig = field(default_factory=EvolutionConfig)

    def __post_init__(self) -> None:
        if self.method not in PROTO_METHODS:
            raise ValueError(f"method must be one of {PROTO_METHODS.names()}, got {self.method!r}")
        _check("rounds", self.rounds, 1, 10000, integer=True)
        _check("width", self.width, 1, 1024, integer=True)
        _check("emb_dim", self.emb_dim, 2, 4096, integer=True)
        _check("seed", self.seed, 0, integer=True)
        if isinstance(self.client, Mapping):
            self.client = ClientConfig(**self.client)
        if isinstance(self.evolution, Mapping):
            self.evolution = EvolutionConfig(**self.evolution)
        if not isinstance(self.client, ClientConfig) or not isinstance(self.evolution, EvolutionConfig):
            raise TypeError("client must be a ClientConfig (or dict) and evolution an EvolutionConfig (or dict)")


@dataclass
class ClientResult:
    """What a client sends back: model state, per-class prototypes, sample count, training metrics."""

    state: dict[str, torch.Tensor]
    prototypes: dict[int, ClassUpload]
    num_samples: int
    metrics: dict[str, float]


def build_model(cfg: FedRunConfig, num_classes: int) -> SmallCNN:
    torch.manual_seed(cfg.seed)
    return SmallCNN(num_classes, cfg.width, cfg.emb_dim)


def round_seed(seed: int, rnd: int, client: int) -> int:
    return int(np.random.SeedSequence([seed, rnd, client]).generate_state(1)[0])


def client_round(model: torch.nn.Module, global_state: Mapping[str, torch.Tensor], protos: PrototypeSet | None,
                 x: np.ndarray, y: np.ndarray, cfg: FedRunConfig, seed: int) -> ClientResult:
    """Load the global weights, train locally with the method's loss, then extract local prototypes."""
    method = make_method(cfg.method)
    model.load_state_dict(global_state)
    torch.manual_seed(seed)
    metrics = local_train(model, x, y, method, protos, cfg.client, seed)
    k = method.upload_k(cfg.client)
    ups = local_prototypes(model, x, y, k, seed % (2**31)) if k > 0 else {}
    state = {n: t.detach().clone() for n, t in model.state_dict().items()}
    return ClientResult(state, ups, len(y), metrics)


def server_round(results: Sequence[ClientResult], protos: PrototypeSet | None,
                 cfg: FedRunConfig) -> tuple[dict[str, torch.Tensor], PrototypeSet | None]:
    """Sample-weighted FedAvg of the weights and the method's prototype update."""
    state = fedavg([r.state for r in results], [r.num_samples for r in results])
    new = make_method(cfg.method).server_update(protos, [r.prototypes for r in results], cfg.evolution)
    return state, new


def run_federated(domains: Sequence[Domain], cfg: FedRunConfig, progress: bool = False) -> list[dict[str, Any]]:
    """One client per domain, every client every round. Returns per round: test accuracy per domain (of the global
    model), their mean, mean client loss and the number of prototypes per class."""
    if not domains:
        raise ValueError("need at least one domain")
    classes = {d.classes for d in domains}
    if len(classes) != 1:
        raise ValueError(f"all domains must share one class list, got {sorted(classes)}")
    model = build_model(cfg, len(domains[0].classes))
    state = {n: t.detach().clone() for n, t in model.state_dict().items()}
    protos: PrototypeSet | None = None
    history = []
    for rnd in tqdm(range(1, cfg.rounds + 1), desc=f"{cfg.method} rounds", disable=not progress):
        results = [client_round(model, state, protos, d.x_train, d.y_train, cfg, round_seed(cfg.seed, rnd, i))
                   for i, d in enumerate(domains)]
        state, protos = server_round(results, protos, cfg)
        model.load_state_dict(state)
        acc = {d.name: evaluate(model, d.x_test, d.y_test)["accuracy"] for d in domains}
        row = {"round": rnd, "accuracy": acc, "mean_accuracy": float(np.mean(list(acc.values()))),
               "train_loss": float(np.mean([r.metrics["loss"] for r in results])),
               "prototypes": protos.num_prototypes() if protos is not None else {}}
        log.info("%s round %d: mean acc %.4f %s", cfg.method, rnd, row["mean_accuracy"], row["prototypes"])
        history.append(row)
    return history
