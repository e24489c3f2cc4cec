"""The three methods in one framework, by registry name: ``fedavg`` (weights only), ``fedproto`` (one fixed-count
prototype per class, L2 pull) and ``fedpte`` (evolved sub-prototypes, contrastive loss). All average the model
weights the same way; they differ only in what the clients upload besides weights, the server's prototype step and
the client's extra loss term."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from agents.core.registry import Registry
from training.federated.fedpte.config import ClientConfig, EvolutionConfig
from training.federated.fedpte.evolve import ClassUpload, PrototypeSet, evolve, fixed_prototypes
from training.federated.fedpte.losses import proto_contrastive_loss, proto_l2_loss


class ProtoMethod:
    """Base: plain FedAvg (no prototypes)."""

    name = "fedavg"

    def upload_k(self, cfg: ClientConfig) -> int:
        """Local prototypes per class a client uploads (0 = none)."""
        return 0

    def server_update(self, prev: PrototypeSet | None, uploads: Sequence[Mapping[int, ClassUpload]],
                      cfg: EvolutionConfig) -> PrototypeSet | None:
        return None

    def client_loss(self, z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, labels: torch.Tensor,
                    cfg: ClientConfig) -> torch.Tensor:
        return z.sum() * 0.0


class FedProtoMethod(ProtoMethod):
    """FedProto-style: each client uploads its class means; the server averages them (count-weighted) into one
    prototype per class; clients add ``lam`` x the squared distance of their unit-norm features to it."""

    name = "fedproto"

    def upload_k(self, cfg: ClientConfig) -> int:
        return 1

    def server_update(self, prev, uploads, cfg):
        return fixed_prototypes(uploads)

    def client_loss(self, z, y, protos, labels, cfg):
        return proto_l2_loss(z, y, protos, labels)


class FedPTEMethod(ProtoMethod):
    """FedPTE: clients upload ``local_k`` k-means centres per class; the server evolves per-class sub-prototypes
    by NIW evidence; clients add ``lam`` x the multi-positive contrastive loss."""

    name = "fedpte"

    def upload_k(self, cfg: ClientConfig) -> int:
        return cfg.local_k

    def server_update(self, prev, uploads, cfg):
        return evolve(prev, uploads, cfg)

    def client_loss(self, z, y, protos, labels, cfg):
        return proto_contrastive_loss(z, y, protos, labels, cfg.tau)


PROTO_METHODS: Registry[type[ProtoMethod]] = Registry("federated prototype method")
for _cls in (ProtoMethod, FedProtoMethod, FedPTEMethod):
    PROTO_METHODS.register(_cls.name)(_cls)


def make_method(name: str) -> ProtoMethod:
    """A method instance by registry name (``fedavg``, ``fedproto``, ``fedpte``)."""
    return PROTO_METHODS.get(name)()
