"""Thin Flower 1.42 adapters for FedPTE / FedProto / FedAvg: a ServerApp (``@app.main``) running
:class:`FedPTEStrategy` and a ClientApp (``@app.train`` / ``@app.evaluate``). Messages carry model weights
(``ArrayRecord`` "arrays"), prototypes (``ArrayRecord`` "protos": points, labels, counts) and metrics; no data.
All ML is :func:`~training.federated.fedpte.loop.client_round` / :func:`~training.federated.fedpte.loop.server_round`,
the same functions the in-process loop runs.

The module-level ``server_app`` / ``client_app`` read the run config key ``fedpte`` (a JSON string
``{"run": {FedRunConfig fields}, "dataset": {"name": ..., **kwargs}}``); tests build apps with
:func:`make_server_app` / :func:`make_client_app`. Each SuperNode's ``partition-id`` selects its domain.
``allday fed run`` builds these apps from a YAML config instead (:mod:`training.federated.fedpte.runner`, through the
dispatching app of ``configs/fed/app``); the server then writes its history to ``results_path``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from training.federated.fedpte.evolve import ClassUpload, PrototypeSet
from training.federated.fedpte.loop import (
    ClientResult,
    FedRunConfig,
    build_model,
    client_round,
    round_seed,
)
from training.federated.fedpte.loop import server_round as fed_server_round

log = logging.getLogger(__name__)

DEFAULT_DATASET: dict[str, Any] = {"name": "digits", "n_train": 300, "n_test": 200}


# ---- codecs ---------------------------------------------------------------------------------------
def encode_uploads(ups: Mapping[int, ClassUpload]):
    """Per-class uploads -> ArrayRecord(points (K, D) float32, labels (K,) int64, counts (K,) float64)."""
    from flwr.app import Array, ArrayRecord

    if not ups:
        return ArrayRecord({"points": Array(np.zeros((0, 0), np.float32)), "labels": Array(np.zeros(0, np.int64)),
                            "counts": Array(np.zeros(0, np.float64))})
    cs = sorted(ups)
    return ArrayRecord({
        "points": Array(np.concatenate([ups[c].points for c in cs]).astype(np.float32)),
        "labels": Array(np.concatenate([np.full(len(ups[c].counts), c, np.int64) for c in cs])),
        "counts": Array(np.concatenate([ups[c].counts for c in cs]).astype(np.float64))})


def decode_uploads(rec) -> dict[int, ClassUpload]:
    """Inverse of :func:`encode_uploads`; raises ValueError on inconsistent shapes or non-finite values."""
    pts, lab, cnt = (rec[k].numpy() for k in ("points", "labels", "counts"))
    if len(lab) == 0:
        return {}
    if pts.ndim != 2 or not (len(pts) == len(lab) == len(cnt)):
        raise ValueError(f"protos: points {pts.shape}, labels {lab.shape}, counts {cnt.shape} disagree")
    return {int(c): ClassUpload(pts[lab == c], cnt[lab == c]) for c in np.unique(lab)}


def encode_protos(protos: PrototypeSet | None):
    if protos is None or not protos.centres:
        return encode_uploads({})
    return encode_uploads({c: ClassUpload(protos.centres[c], np.maximum(protos.counts[c], 1e-9))
                           for c in protos.centres})


def decode_protos(rec) -> PrototypeSet | None:
    ups = decode_uploads(rec)
    if not ups:
        return None
    out = PrototypeSet()
    for c, u in ups.items():
        out.centres[c], out.counts[c] = u.points, u.counts
    return out


# ---- config ---------------------------------------------------------------------------------------
def parse_run_config(run_config: Mapping[str, Any], run: FedRunConfig | None = None,
                     dataset: Mapping[str, Any] | None = None) -> tuple[FedRunConfig, dict[str, Any]]:
    """(FedRunConfig, dataset spec) from the ``fedpte`` JSON key of a Flower run config, over the given defaults."""
    spec = json.loads(run_config["fedpte"]) if "fedpte" in run_config else {}
    if not isinstance(spec, dict) or set(spec) - {"run", "dataset"}:
        raise ValueError(f"run config 'fedpte' must be a JSON object with keys 'run' and/or 'dataset', got {spec!r}")
    if "run" in spec:
        run = FedRunConfig(**spec["run"])
    ds = dict(spec.get("dataset", dataset or DEFAULT_DATASET))
    if "name" not in ds:
        raise ValueError("dataset spec needs a 'name' (digits or sim_views)")
    return run or FedRunConfig(), ds


@lru_cache(maxsize=4)
def _domains(spec_json: str):
    from training.federated.fedpte.data import load_domains

    spec = json.loads(spec_json)
    return load_domains(spec.pop("name"), **spec)


def load_partition(dataset: Mapping[str, Any], partition_id: int):
    doms = _domains(json.dumps(dict(dataset), sort_keys=True))
    if not 0 <= partition_id < len(doms):
        raise ValueError(f"partition-id {partition_id} out of range: dataset has {len(doms)} domains")
    return doms[partition_id]


# ---- strategy -------------------------------------------------------------------------------------
def make_strategy(cfg: FedRunConfig, **fedavg_kwargs):
    """A Flower FedAvg subclass that also broadcasts prototypes and runs the method's server step."""
    from flwr.app import ArrayRecord, MetricRecord
    from flwr.serverapp.strategy import FedAvg

    class FedPTEStrategy(FedAvg):
        def __init__(self) -> None:
            super().__init__(**fedavg_kwargs)
            self.protos: PrototypeSet | None = None
            self.history: list[dict[int, int]] = []
            self._shapes: dict[str, tuple[int, ...]] = {}

        def configure_train(self, server_round, arrays, config, grid) -> Iterable:
            self._shapes = {k: tuple(v.shape) for k, v in arrays.to_torch_state_dict().items()}
            msgs = list(super().configure_train(server_round, arrays, config, grid))
            rec = encode_protos(self.protos)
            for m in msgs:
                m.content["protos"] = rec
            return msgs

        def aggregate_train(self, server_round, replies):
            # replies carry two ArrayRecords (weights, prototypes): FedAvg's one-record check does not apply
            valid, _ = self._check_and_log_replies(replies, is_train=True, validate=False)
            results, kept = [], []
            for msg in valid:
                try:
                    state = msg.content["arrays"].to_torch_state_dict()
                    shapes = {k: tuple(v.shape) for k, v in state.items()}
                    if shapes != self._shapes:
                        raise ValueError("model weights do not match the global model's names/shapes")
                    if not all(bool(v.isfinite().all()) for v in state.values() if v.is_floating_point()):
                        raise ValueError("model weights contain NaN or inf")
                    ups = decode_uploads(msg.content["protos"])
                    n = int(msg.content["metrics"]["num-examples"])
                    if n < 1:
                        raise ValueError(f"num-examples must be >= 1, got {n}")
                except (KeyError, ValueError, TypeError) as exc:
                    log.warning("round %d: dropping the reply of node %s: %s", server_round,
                                msg.metadata.src_node_id, exc)
                    continue
                results.append(ClientResult(state, ups, n, {}))
                kept.append(msg.content)
            if not results:
                return None, None
            state, self.protos = fed_server_round(results, self.protos, cfg)
            if self.protos is not None:
                self.history.append(self.protos.num_prototypes())
            metrics = self.train_metrics_aggr_fn(kept, self.weighted_by_key)
            return ArrayRecord(state), MetricRecord(dict(metrics))

    return FedPTEStrategy()


# ---- apps -----------------------------------------------------------------------------------------
def domain_metrics(model, domains) -> dict[str, float]:
    """Mean test accuracy/loss of ``model`` over ``domains`` plus ``accuracy_<domain>`` per domain."""
    from training.federated.fedpte.client import evaluate

    scores = {d.name: evaluate(model, d.x_test, d.y_test) for d in domains}
    out = {"accuracy": float(np.mean([s["accuracy"] for s in scores.values()])),
           "loss": float(np.mean([s["loss"] for s in scores.values()]))}
    out.update({f"accuracy_{n}": float(s["accuracy"]) for n, s in scores.items()})
    return out


def history_from_result(res, strategy, domain_names: Iterable[str]) -> list[dict[str, Any]]:
    """Per-round rows shaped like :func:`~training.federated.fedpte.loop.run_federated`'s (central evaluation of
    rounds >= 1: accuracy per domain, their mean, and the prototypes per class after that round)."""
    rows = []
    for rnd, m in sorted(res.evaluate_metrics_serverapp.items()):
        if rnd < 1:
            continue
        protos = strategy.history[rnd - 1] if len(strategy.history) >= rnd else {}
        rows.append({"round": int(rnd), "accuracy": {n: float(m[f"accuracy_{n}"]) for n in domain_names},
                     "mean_accuracy": float(m["accuracy"]), "prototypes": {int(k): int(v) for k, v in protos.items()}})
    return rows


def make_server_app(run: FedRunConfig | None = None, dataset: Mapping[str, Any] | None = None,
                    results: list | None = None, central_eval: bool = True, *, min_nodes: int = 1,
                    timeout: float = 3600.0, results_path: str | None = None):
    """ServerApp: FedPTEStrategy over all nodes for ``run.rounds`` rounds, once at least ``min_nodes`` are
    connected (``timeout``: seconds to wait for replies each round). With ``central_eval`` the server also scores the
    global model on every domain's test set (round 0 = the initial model). Appends the Flower ``Result`` (and the
    strategy) to ``results`` when given; writes the per-round history as JSON to ``results_path`` when given."""
    from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        cfg, ds = parse_run_config(context.run_config, run, dataset)
        doms = _domains(json.dumps(ds, sort_keys=True))
        n_nodes = max(min_nodes, len(list(grid.get_node_ids())), 1)
        model = build_model(cfg, len(doms[0].classes))
        strategy = make_strategy(cfg, min_train_nodes=1, min_evaluate_nodes=1, min_available_nodes=n_nodes)

        def evaluate_fn(rnd: int, arrays) -> MetricRecord:
            model.load_state_dict(arrays.to_torch_state_dict())
            return MetricRecord(domain_metrics(model, doms))

        res = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=cfg.rounds,
                             timeout=timeout, train_config=ConfigRecord({"method": cfg.method}),
                             evaluate_fn=evaluate_fn if central_eval or results_path else None)
        if results is not None:
            results.append((res, strategy))
        if results_path:
            rows = history_from_result(res, strategy, [d.name for d in doms])
            Path(results_path).write_text(json.dumps({"method": cfg.method, "history": rows}))
            log.info("wrote %d rounds of history to %s", len(rows), results_path)

    return app


def make_client_app(run: FedRunConfig | None = None, dataset: Mapping[str, Any] | None = None):
    """ClientApp: trains on / evaluates its own domain (``partition-id``); uploads weights + prototypes."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()

    def _setup(context):
        import torch

        torch.set_num_threads(1)
        cfg, ds = parse_run_config(context.run_config, run, dataset)
        pid = int(context.node_config.get("partition-id", 0))
        dom = load_partition(ds, pid)
        return cfg, dom, pid, build_model(cfg, len(dom.classes))

    @app.train()
    def train(msg: Message, context) -> Message:
        cfg, dom, pid, model = _setup(context)
        state = msg.content["arrays"].to_torch_state_dict()
        protos = decode_protos(msg.content["protos"]) if "protos" in msg.content else None
        rnd = int(msg.content["config"].get("server-round", 0))
        res = client_round(model, state, protos, dom.x_train, dom.y_train, cfg, round_seed(cfg.seed, rnd, pid))
        metrics = MetricRecord({"num-examples": res.num_samples, "train_loss": res.metrics["loss"]})
        content = RecordDict({"arrays": ArrayRecord(res.state), "protos": encode_uploads(res.prototypes),
                              "metrics": metrics})
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate_(msg: Message, context) -> Message:
        from training.federated.fedpte.client import evaluate

        cfg, dom, pid, model = _setup(context)
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        s = evaluate(model, dom.x_test, dom.y_test)
        metrics = MetricRecord({"num-examples": len(dom.y_test), "accuracy": s["accuracy"], "loss": s["loss"]})
        return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)

    return app


def __getattr__(name: str):  # module-level apps for `flwr run` (built lazily: flwr is imported on use)
    if name == "server_app":
        return make_server_app()
    if name == "client_app":
        return make_client_app()
    raise AttributeError(name)
