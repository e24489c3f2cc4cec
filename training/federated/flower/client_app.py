"""Flower ``ClientApp``: ``@app.train()`` runs ``client_round`` on this node's partition and rank budget.

The partition comes from ``context.node_config["partition-id"]`` (set by the simulation engine, or by
``flower-supernode --node-config "partition-id=3 rank-budget=4"``); the rank budget from ``rank-budget`` if given,
else ``FedConfig.budgets``. ``@app.evaluate()`` reports the global model's accuracy on the node's local data.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from training.federated.config import FedConfig
from training.federated.faults import inject_fault
from training.federated.flower.records import (
    config_from_run_config,
    record_to_state,
    upload_to_content,
)
from training.federated.local import client_round, evaluate, get_task, lora_scale
from training.federated.registry import make_method

log = logging.getLogger(__name__)


def node_identity(cfg: FedConfig, node_config: Any) -> tuple[int, int]:
    """(partition id, rank budget) of this node; a missing partition id is an error naming the field."""
    nc = dict(node_config or {})
    if "partition-id" not in nc:
        raise ValueError("node_config lacks 'partition-id' (start the SuperNode with --node-config 'partition-id=N')")
    pid = int(nc["partition-id"])
    budget = int(nc.get("rank-budget", cfg.budget_for(pid)))
    return pid, budget


def make_client_app(cfg: FedConfig | None = None) -> Any:
    """A ``ClientApp`` bound to ``cfg`` (``None``: read it from the run config of each message)."""
    from flwr.app import Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()

    def _cfg(context: Any) -> FedConfig:
        return cfg if cfg is not None else config_from_run_config(context.run_config)

    @app.train()
    def train(msg: Any, context: Any) -> Any:
        c = _cfg(context)
        pid, budget = node_identity(c, context.node_config)
        method = make_method(c.method, rank=c.rank, scale=lora_scale(c), weighting=c.weighting)
        state = record_to_state(msg.content["global"])
        rnd = int(msg.content["config"]["round"])
        up, metrics = client_round(c, method, state, pid, min(budget, c.rank), rnd)
        if budget > c.rank:  # report the real (too large) budget: the server must exclude this client
            up.budget = budget
        if pid in c.faults:
            up = inject_fault(up, c.faults[pid], c.rank)
        return Message(content=upload_to_content(up, metrics), reply_to=msg)

    @app.evaluate()
    def evaluate_(msg: Any, context: Any) -> Any:
        c = _cfg(context)
        pid, _ = node_identity(c, context.node_config)
        method = make_method(c.method, rank=c.rank, scale=lora_scale(c), weighting=c.weighting)
        task = get_task(c)
        model = method.global_model(copy.deepcopy(task.base), record_to_state(msg.content["global"]))
        acc, loss = evaluate(model, task.data.clients[pid])
        metrics = MetricRecord({"accuracy": acc, "loss": loss, "partition_id": pid})
        return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)

    return app


app = make_client_app()
