"""FedPTE / FedProto / FedAvg as a family of ``allday fed run`` (see ``training.federated.flower.runtimes``).

YAML config (``configs/fed/fedpte_quick.yaml``): the :class:`~training.federated.fedpte.loop.FedRunConfig` fields
(``method``, ``rounds``, ``width``, ``emb_dim``, ``seed``, ``client: {...}``, ``evolution: {...}``), a required
``dataset: {name: digits | sim_views, ...builder kwargs}`` section, and runtime keys ``round_timeout`` (s per
Flower round), ``min_nodes`` (nodes the ServerApp waits for; 0 = those connected at start), ``results_path`` (where
the ServerApp writes its history as JSON; set by the command) and ``torch_threads`` (plain loop). Overrides are
``key=value`` with dotted keys for the sections (``client.local_epochs=1``, ``dataset.n_train=100``).

One client per domain: the plain loop trains every domain; in Flower each SuperNode's ``partition-id`` picks its
domain. Accuracy is the global model's test accuracy per domain after each round (central evaluation).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from training.config_io import override_value
from training.federated.flower.runtimes import FedFamily, RunOptions, read_yaml

log = logging.getLogger(__name__)

RUN_KEYS = ("method", "rounds", "width", "emb_dim", "seed", "client", "evolution")
SECTIONS = ("client", "evolution", "dataset")


@dataclass
class FedPTESpec:
    """A validated FedPTE run: the method config, the dataset spec and runtime settings."""

    run: Any  # FedRunConfig (imported lazily: torch)
    dataset: dict[str, Any]
    round_timeout: float = 600.0
    min_nodes: int = 0
    results_path: str = ""
    torch_threads: int = 1

    def to_dict(self) -> dict[str, Any]:
        """The YAML form (what :func:`load_spec` reads back)."""
        return {**dataclasses.asdict(self.run), "dataset": dict(self.dataset), "round_timeout": self.round_timeout,
                "min_nodes": self.min_nodes, "results_path": self.results_path, "torch_threads": self.torch_threads}


def _apply_override(data: dict[str, Any], item: str) -> None:
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {item!r} must look like key=value (dotted keys for sections: client.lr=0.001)")
    *parents, leaf = key.strip().split(".")
    node = data
    for part in parents:
        if part not in SECTIONS or node is not data:
            raise ValueError(f"override {item!r}: only the sections {list(SECTIONS)} take dotted keys")
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"override {item!r}: {part!r} is not a mapping")
    node[leaf] = override_value(raw, item)


def load_spec(path: str | Path | None, overrides: list[str] | None = None) -> FedPTESpec:
    """Read and validate a FedPTE YAML config (+ overrides); every problem is a ``ValueError`` naming the field."""
    from training.federated.fedpte.data import DATASETS, check_dataset_keys
    from training.federated.fedpte.loop import FedRunConfig

    data = read_yaml(path)
    for item in overrides or []:
        _apply_override(data, item)
    where = str(path) if path else "FedPTE config"
    known = set(RUN_KEYS) | {f.name for f in dataclasses.fields(FedPTESpec)} - {"run"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where}: unknown FedPTE config keys {unknown}; known: {sorted(known)}")
    ds = data.get("dataset")
    if not isinstance(ds, dict) or "name" not in ds:
        raise ValueError(f"{where}: a FedPTE config needs a 'dataset:' section with a 'name' "
                         f"({' | '.join(DATASETS.names())}), got {ds!r}")
    if ds["name"] not in DATASETS:
        raise ValueError(f"{where}: unknown dataset {ds['name']!r}; known: {', '.join(DATASETS.names())}")
    try:
        check_dataset_keys(ds["name"], ds)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    try:
        run = FedRunConfig(**{k: data[k] for k in RUN_KEYS if k in data})
    except TypeError as exc:  # wrong value types and unknown client/evolution keys
        raise ValueError(f"{where}: {exc}") from None
    spec = FedPTESpec(run, dict(ds), **{k: data[k] for k in ("round_timeout", "min_nodes", "results_path",
                                                              "torch_threads") if k in data})
    for name, lo in (("min_nodes", 0), ("torch_threads", 1)):
        v = getattr(spec, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{where}: {name} must be an int >= {lo}, got {v!r}")
    rt = spec.round_timeout
    if isinstance(rt, bool) or not isinstance(rt, (int, float)) or not 0 < rt <= 1e6:
        raise ValueError(f"{where}: round_timeout must be a number in (0, 1e6], got {rt!r}")
    return spec


def _domain_names(spec: FedPTESpec) -> list[str]:
    from training.federated.fedpte.app import _domains

    return [d.name for d in _domains(json.dumps(spec.dataset, sort_keys=True))]


def summary(spec: FedPTESpec, history: list[dict[str, Any]], clients: int) -> dict[str, Any]:
    """The ``allday fed run`` JSON summary: mean accuracy per round and the final accuracy per domain."""
    last = history[-1] if history else {}
    return {
        "method": spec.run.method, "dataset": spec.dataset["name"], "clients": clients, "rounds_done": len(history),
        "accuracy": [round(r["mean_accuracy"], 4) for r in history],
        "final_accuracy": round(last["mean_accuracy"], 4) if last else None,
        "domain_accuracy": {k: round(v, 4) for k, v in last.get("accuracy", {}).items()},
        "prototypes": last.get("prototypes", {}),
    }


class FedPTEFamily(FedFamily):
    """``fedpte`` | ``fedproto`` | ``fedavg`` (``training.federated.fedpte``), one client per domain."""

    name = "fedpte"

    def methods(self) -> list[str]:
        from training.federated.fedpte.methods import PROTO_METHODS

        return PROTO_METHODS.names()

    def load(self, path: str | Path | None, overrides: list[str]) -> FedPTESpec:
        return load_spec(path, overrides)

    def plain(self, cfg: FedPTESpec, opts: RunOptions) -> dict[str, Any]:
        import torch

        from training.federated.fedpte.app import _domains
        from training.federated.fedpte.loop import run_federated

        torch.set_num_threads(cfg.torch_threads)
        domains = _domains(json.dumps(cfg.dataset, sort_keys=True))
        return summary(cfg, run_federated(domains, cfg.run, progress=opts.progress), len(domains))

    def simulation(self, cfg: FedPTESpec, opts: RunOptions) -> dict[str, Any]:
        from training.federated.fedpte.app import history_from_result, make_client_app, make_server_app
        from training.federated.flower.simulation import simulate

        names = _domain_names(cfg)
        n_dom = len(names)
        n = opts.nodes or n_dom
        if not 1 <= n <= n_dom:
            raise ValueError(f"--nodes ({n}) must be in [1, {n_dom}]: one domain per virtual SuperNode")
        results: list = []
        server = make_server_app(cfg.run, cfg.dataset, results, min_nodes=n, timeout=cfg.round_timeout)
        simulate(server, make_client_app(cfg.run, cfg.dataset), n, opts.workdir)
        if not results:
            raise ValueError(f"the FedPTE ServerApp did not finish (Flower logs under {opts.workdir})")
        return summary(cfg, history_from_result(*results[0], names), n)

    def deployment(self, cfg: FedPTESpec, opts: RunOptions) -> dict[str, Any]:
        from training.federated.flower.deploy import deploy

        n_dom = len(_domain_names(cfg))
        n = opts.nodes or min(n_dom, 2)
        if not opts.connection and not 1 <= n <= n_dom:
            raise ValueError(f"--nodes ({n}) must be in [1, {n_dom}]: one domain per SuperNode")
        out = opts.workdir / "fedpte_results.json"
        out.unlink(missing_ok=True)
        min_nodes = n if not opts.connection else (opts.nodes or cfg.min_nodes)
        resolved = opts.workdir / "run.yaml"  # read by the ServerApp and every ClientApp
        run = dataclasses.replace(cfg, results_path=str(out), min_nodes=min_nodes)
        resolved.write_text(yaml.safe_dump(run.to_dict(), sort_keys=True))
        deploy(resolved, opts.workdir, nodes=n, connection=opts.connection)
        if not out.is_file():
            raise ValueError(f"flwr run finished but the ServerApp wrote no results to {out} (a remote SuperLink "
                             "writes them on its own host)")
        history = json.loads(out.read_text())["history"]
        return summary(cfg, history, n)

    def server_app(self, run_config: Mapping[str, Any]) -> Any:
        from training.federated.fedpte.app import make_server_app

        spec = self._spec(run_config)
        return make_server_app(spec.run, spec.dataset, min_nodes=spec.min_nodes, timeout=spec.round_timeout,
                               results_path=spec.results_path or None)

    def client_app(self, run_config: Mapping[str, Any]) -> Any:
        from training.federated.fedpte.app import make_client_app

        spec = self._spec(run_config)
        return make_client_app(spec.run, spec.dataset)

    @staticmethod
    def _spec(run_config: Mapping[str, Any]) -> FedPTESpec:
        rc = dict(run_config or {})
        overrides = [s.strip() for s in str(rc.get("overrides", "") or "").split(";") if s.strip()]
        return load_spec(str(rc.get("config-path", "") or "") or None, overrides)


FEDPTE = FedPTEFamily()
