"""The plain in-process federated loop: the same ``FedServer`` and ``client_round`` the Flower apps call, without
Flower's transport (used by the benchmark for speed and by unit tests)."""

from __future__ import annotations

import logging

from tqdm import tqdm

from training.federated.config import FedConfig
from training.federated.faults import inject_fault
from training.federated.local import client_round
from training.federated.server import FedServer, RoundRecord

log = logging.getLogger(__name__)


def run_round(server: FedServer) -> RoundRecord:
    """Sample clients, run them sequentially, apply configured faults, finish the round."""
    cfg = server.cfg
    rnd = server.round + 1
    uploads, failures, metrics = [], {}, {}
    for pid in server.sample(range(cfg.num_clients), rnd):
        try:
            up, m = client_round(cfg, server.method, server.state, pid, cfg.budget_for(pid), rnd)
            if pid in cfg.faults:
                up = inject_fault(up, cfg.faults[pid], cfg.rank)
        except Exception as e:  # a client that fails mid-round is a dropout, never a server crash
            failures[str(pid)] = f"dropped out: {type(e).__name__}: {e}"
            continue
        uploads.append(up)
        metrics[up.client_id] = m
    return server.finish_round(rnd, uploads, failures, metrics)


def run_plain(cfg: FedConfig, *, max_rounds: int | None = None, progress: bool = False) -> FedServer:
    """Run (or resume) ``cfg`` until ``cfg.rounds`` (or ``max_rounds`` more rounds); returns the server."""
    server = FedServer(cfg)
    todo = cfg.rounds - server.round if max_rounds is None else min(max_rounds, cfg.rounds - server.round)
    for _ in tqdm(range(todo), desc=f"{cfg.method} rounds", disable=not progress):
        run_round(server)
    return server
