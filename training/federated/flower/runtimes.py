"""One entry point for every federated method family: ``allday fed run`` and the Flower app both dispatch here.

A *family* (registered in ``training.federated.registry.FED_FAMILIES``) owns a set of method names, its YAML config
format and the three runtimes: ``plain`` (in-process loop), ``simulation`` (Flower simulation engine) and
``deployment`` (SuperLink + SuperNodes, see ``deploy``). ``family_for(method)`` picks the family owning a method;
``select_family(path, overrides)`` does so for a YAML config (``method:`` key, default ``fedplora``).

The app directory ``configs/fed/app`` points at :data:`server_app` / :data:`client_app` here: they read
``config-path`` + ``overrides`` from the run config, select the family and delegate to its Flower apps, so one
app serves Fed-PLoRA and FedPTE configs alike (also on ``--connection`` federations).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from training.config_io import override_value, read_yaml_mapping

log = logging.getLogger(__name__)
# ``server_app`` / ``client_app`` are built on first access (module ``__getattr__``: flwr stays a lazy import);
# Flower validates components by parsing the module, so they must be listed here.
__all__ = ["PLORA", "FedFamily", "PLoRAFamily", "RunOptions", "client_app",  # noqa: F822 (module __getattr__)
           "family_for", "select_family", "server_app"]


@dataclass
class RunOptions:
    """Runtime options from the command line (shared by every family)."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="allday-fed-")))
    nodes: int | None = None  # SuperNodes (deployment) / virtual clients (simulation)
    connection: str | None = None  # an existing federation in $FLWR_HOME/config.toml (deployment)
    progress: bool = False


class FedFamily:
    """Base of a method family. Subclasses set ``name`` and implement ``methods``, ``load``, the three runtimes
    (each returns the JSON-ready summary dict) and ``server_app`` / ``client_app`` (Flower apps for a run config)."""

    name = ""

    def methods(self) -> list[str]:
        raise NotImplementedError

    def load(self, path: str | Path | None, overrides: list[str]) -> Any:
        """The validated config of a YAML file + ``k=v`` overrides (``ValueError`` naming the bad field)."""
        raise NotImplementedError

    def plain(self, cfg: Any, opts: RunOptions) -> dict[str, Any]:
        raise NotImplementedError

    def simulation(self, cfg: Any, opts: RunOptions) -> dict[str, Any]:
        raise NotImplementedError

    def deployment(self, cfg: Any, opts: RunOptions) -> dict[str, Any]:
        raise NotImplementedError

    def server_app(self, run_config: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def client_app(self, run_config: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def run(self, cfg: Any, runtime: str, opts: RunOptions) -> dict[str, Any]:
        """Run ``cfg`` in ``runtime`` (``plain`` | ``simulation`` | ``deployment``); returns the summary."""
        runtimes: dict[str, Callable[[Any, RunOptions], dict[str, Any]]] = {
            "plain": self.plain, "simulation": self.simulation, "deployment": self.deployment}
        if runtime not in runtimes:
            raise ValueError(f"runtime must be one of {sorted(runtimes)}, got {runtime!r}")
        opts.workdir = Path(opts.workdir).resolve()
        opts.workdir.mkdir(parents=True, exist_ok=True)
        return {**runtimes[runtime](cfg, opts), "runtime": runtime}


# ---- selection --------------------------------------------------------------------------------------
def family_for(method: str) -> FedFamily:
    """The registered family that owns ``method``; an unknown method raises ``ValueError`` listing all."""
    from training.federated.registry import FED_FAMILIES, resolve

    known: list[str] = []
    for name in FED_FAMILIES:
        fam = resolve(FED_FAMILIES.get(name))
        if method in fam.methods():
            return fam
        known += fam.methods()
    raise ValueError(f"unknown federated method {method!r}; known: {', '.join(sorted(known))}")


def read_yaml(path: str | Path | None) -> dict[str, Any]:
    """The top-level mapping of a YAML config (``{}`` for no path); clear errors for a missing/odd file."""
    return read_yaml_mapping(path, "federated config") if path else {}


def select_family(path: str | Path | None, overrides: list[str]) -> FedFamily:
    """The family of a config: the last ``method=`` override, else the YAML's ``method:``, else ``fedplora``."""
    from training.federated.config import FedConfig

    method = read_yaml(path).get("method", FedConfig.method)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if sep and key.strip() == "method":
            method = override_value(raw, item)
    return family_for(str(method))


def _from_run_config(run_config: Mapping[str, Any]) -> tuple[FedFamily, str, list[str]]:
    rc = dict(run_config or {})
    path = str(rc.get("config-path", "") or "")
    overrides = [s.strip() for s in str(rc.get("overrides", "") or "").split(";") if s.strip()]
    return select_family(path or None, overrides), path, overrides


# ---- Fed-PLoRA and baselines (FedConfig) --------------------------------------------------------------
class PLoRAFamily(FedFamily):
    """Fed-PLoRA, FedIT, HETLoRA, FLoRA, FlexLoRA: ``FedConfig`` YAML, ``FedServer`` checkpoints."""

    name = "plora"

    def methods(self) -> list[str]:
        from training.federated.registry import FED_METHODS

        return FED_METHODS.names()

    def load(self, path: str | Path | None, overrides: list[str]) -> Any:
        from training.federated.config import load_config

        cfg = load_config(path, overrides)
        if cfg.checkpoint_dir:
            cfg = cfg.replace(checkpoint_dir=str(Path(cfg.checkpoint_dir).resolve()))
        if not cfg.resume and cfg.checkpoint_dir and (Path(cfg.checkpoint_dir) / "global.pt").exists():
            (Path(cfg.checkpoint_dir) / "global.pt").unlink()
        return cfg

    @staticmethod
    def summary(server: Any) -> dict[str, Any]:
        h = server.history
        return {
            "method": server.cfg.method, "rounds_done": server.round,
            "accuracy": [round(r.accuracy, 4) for r in h], "final_accuracy": h[-1].accuracy if h else None,
            "excluded": {r.round: r.excluded for r in h if r.excluded},
            "bytes": sum(r.down_bytes + r.up_bytes for r in h),
            "checkpoint": str(server.checkpoint_path) if server.checkpoint_path else None,
        }

    def plain(self, cfg: Any, opts: RunOptions) -> dict[str, Any]:
        from training.federated.loop import run_plain

        return self.summary(run_plain(cfg, progress=opts.progress))

    def simulation(self, cfg: Any, opts: RunOptions) -> dict[str, Any]:
        from training.federated.flower.simulation import run_simulation

        return self.summary(run_simulation(cfg, opts.workdir, num_supernodes=opts.nodes))

    def deployment(self, cfg: Any, opts: RunOptions) -> dict[str, Any]:
        from training.federated.flower.deploy import deploy
        from training.federated.server import FedServer

        if not cfg.checkpoint_dir:
            cfg = cfg.replace(checkpoint_dir=str(opts.workdir / "checkpoint"))
        # the run config travels as a path: the server and every node read the same file
        resolved = opts.workdir / "run.yaml"
        resolved.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=True))
        nodes = opts.nodes or min(cfg.num_clients, 2)
        deploy(resolved, opts.workdir, budgets=[cfg.budget_for(i) for i in range(nodes)], connection=opts.connection)
        return self.summary(FedServer(cfg.replace(resume=True)))

    def server_app(self, run_config: Mapping[str, Any]) -> Any:
        from training.federated.flower.server_app import app

        return app  # reads config-path + overrides itself

    def client_app(self, run_config: Mapping[str, Any]) -> Any:
        from training.federated.flower.client_app import app

        return app


PLORA = PLoRAFamily()


# ---- the dispatching Flower apps (components of configs/fed/app) ---------------------------------------
def make_dispatch_server_app() -> Any:
    """A ``ServerApp`` that runs the ``ServerApp`` of the config's family."""
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Any, context: Any) -> None:
        fam, path, _ = _from_run_config(context.run_config)
        log.info("config %s: method family %s", path or "(defaults)", fam.name)
        fam.server_app(context.run_config)(grid, context)

    return app


def make_dispatch_client_app() -> Any:
    """A ``ClientApp`` whose train/evaluate handlers run the ``ClientApp`` of the config's family."""
    from flwr.clientapp import ClientApp

    app = ClientApp()

    def _delegate(msg: Any, context: Any) -> Any:
        fam, _, _ = _from_run_config(context.run_config)
        return fam.client_app(context.run_config)(msg, context)

    app.train()(_delegate)
    app.evaluate()(_delegate)
    return app


def __getattr__(name: str) -> Any:  # module-level apps for `flwr run` (built lazily: flwr is imported on use)
    if name == "server_app":
        return make_dispatch_server_app()
    if name == "client_app":
        return make_dispatch_client_app()
    raise AttributeError(name)
