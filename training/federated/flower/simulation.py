"""Run a ``FedConfig`` with Flower's simulation engine (Ray) in this process."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from training.federated.config import FedConfig
from training.federated.server import FedServer

log = logging.getLogger(__name__)


def flower_env(workdir: str | Path) -> dict[str, str]:
    """``FLWR_HOME``, ``RAY_TMPDIR`` and ``TMPDIR`` under ``workdir`` (created), so Flower/Ray write nothing in ~ or
    /tmp. Ray's socket paths must stay short: keep ``workdir`` near the filesystem root."""
    root = Path(workdir).resolve()
    env = {"FLWR_HOME": str(root / "flwr"), "RAY_TMPDIR": str(root / "ray"), "TMPDIR": str(root / "tmp")}
    for p in env.values():
        Path(p).mkdir(parents=True, exist_ok=True)
    return env


def simulate(server_app: Any, client_app: Any, num_supernodes: int, workdir: str | Path, *,
             num_cpus: int | None = None) -> None:
    """Flower's ``run_simulation`` on ``num_supernodes`` virtual SuperNodes (1 CPU each, no dashboard), with Flower/Ray
    files under ``workdir``; the process environment is restored afterwards."""
    from flwr.simulation import run_simulation as flwr_run_simulation

    saved = dict(os.environ)
    os.environ.update(flower_env(workdir))
    backend = {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": num_cpus or min(os.cpu_count() or 1, 4), "include_dashboard": False},
    }
    try:
        flwr_run_simulation(server_app=server_app, client_app=client_app, num_supernodes=num_supernodes,
                            backend_config=backend)
    finally:  # Flower/Ray leave variables behind (temp dirs that the caller may delete): restore the environment
        os.environ.clear()
        os.environ.update(saved)


def run_simulation(cfg: FedConfig, workdir: str | Path, *, num_supernodes: int | None = None,
                   num_cpus: int | None = None) -> FedServer:
    """Run ``cfg`` on ``num_supernodes`` (default ``cfg.num_clients``) virtual SuperNodes, 1 CPU per client.

    Results are read back from the checkpoint (``cfg.checkpoint_dir``, default ``<workdir>/checkpoint``).
    """
    from training.federated.flower.client_app import make_client_app
    from training.federated.flower.server_app import make_server_app

    n = num_supernodes or cfg.num_clients
    if n > cfg.num_clients:
        raise ValueError(f"num_supernodes ({n}) must be <= num_clients ({cfg.num_clients}): one partition per node")
    if not cfg.checkpoint_dir:
        cfg = cfg.replace(checkpoint_dir=str(Path(workdir).resolve() / "checkpoint"))
    simulate(make_server_app(cfg), make_client_app(cfg), n, workdir, num_cpus=num_cpus)
    return FedServer(cfg.replace(resume=True))
