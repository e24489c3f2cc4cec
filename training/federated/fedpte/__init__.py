"""FedPTE (Bayesian evidence-driven prototype evolution) with FedAvg and FedProto-style baselines.

Math in framework-free modules (``evidence``, ``evolve``, ``losses``, ``client``, ``loop``); the Flower 1.42 app
in ``app`` (flwr imported lazily); cross-domain data in ``data``; ``allday fed run`` support (YAML config, plain /
simulation / deployment runtimes) in ``runner``. See docs/fedpte.md.
"""

from training.federated.fedpte.config import ClientConfig, EvolutionConfig
from training.federated.fedpte.methods import PROTO_METHODS, make_method

__all__ = ["PROTO_METHODS", "ClientConfig", "EvolutionConfig", "make_method"]
