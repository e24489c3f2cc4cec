"""Flower ``ServerApp``: each round sample nodes, send the global state, collect replies, hand them to ``FedServer``.

``app`` (deployment: ``flwr run``) reads its ``FedConfig`` from the run config; ``make_server_app(cfg)`` builds one
bound to a config (simulation). Replies with an error, unparsable replies and nodes that did not answer within
``round_timeout`` are excluded with a logged reason; the round still completes.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from training.federated.config import FedConfig
from training.federated.flower.records import config_from_run_config, content_to_upload, state_to_record
from training.federated.methods.base import Upload
from training.federated.server import FedServer

log = logging.getLogger(__name__)


def wait_for_nodes(grid: Any, count: int, timeout: float) -> list[int]:
    """Node ids once at least ``count`` are connected (or whatever is there after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count or time.monotonic() > deadline:
            return nodes
        time.sleep(0.5)


def run_server(grid: Any, cfg: FedConfig) -> FedServer:
    """The server loop over a Flower ``Grid`` (resumes from ``cfg.checkpoint_dir`` if a checkpoint is there)."""
    from flwr.app import ConfigRecord, Message, MessageType, RecordDict

    server = FedServer(cfg)
    if server.round:
        log.warning("resuming %s at round %d of %d", cfg.method, server.round + 1, cfg.rounds)
    while not server.done:
        rnd = server.round + 1
        nodes = wait_for_nodes(grid, cfg.min_clients, cfg.round_timeout)
        if not nodes:
            raise RuntimeError(f"round {rnd}: no SuperNode connected within {cfg.round_timeout} s")
        sampled = server.sample(nodes, rnd)
        content = RecordDict({"global": state_to_record(server.state), "config": ConfigRecord({"round": rnd})})
        msgs = [Message(content=content, dst_node_id=n, message_type=MessageType.TRAIN, group_id=str(rnd))
                for n in sampled]
        replies = list(grid.send_and_receive(msgs, timeout=cfg.round_timeout))
        uploads: list[Upload] = []
        failures: dict[str, str] = {}
        metrics: dict[str, dict[str, float]] = {}
        answered = set()
        for reply in replies:
            node = reply.metadata.src_node_id
            answered.add(node)
            if reply.has_error():
                failures[f"node-{node}"] = f"error reply: {reply.error.reason}"
                continue
            try:
                up, m = content_to_upload(reply.content)
            except ValueError as e:
                failures[f"node-{node}"] = str(e)
                continue
            uploads.append(up)
            metrics[up.client_id] = m
        for node in sampled:
            if node not in answered:
                failures[f"node-{node}"] = f"no reply within {cfg.round_timeout} s (dropped out)"
        rec = server.finish_round(rnd, uploads, failures, metrics)
        log.warning("round %d/%d: accuracy %.3f, %d aggregated, %d excluded", rnd, cfg.rounds, rec.accuracy,
                    len(rec.aggregated), len(rec.excluded))
    if cfg.federated_eval and server.history and "federated_eval" not in server.history[-1].extra:
        federated_evaluate(grid, server)
    return server


def federated_evaluate(grid: Any, server: FedServer) -> dict[str, float]:
    """Every connected node evaluates the final global model on its local data (``@app.evaluate()``)."""
    from flwr.app import Message, MessageType, RecordDict

    cfg = server.cfg
    nodes = sorted(grid.get_node_ids())
    content = RecordDict({"global": state_to_record(server.state)})
    msgs = [Message(content=content, dst_node_id=n, message_type=MessageType.EVALUATE, group_id="final")
            for n in nodes]
    out: dict[str, float] = {}
    for reply in grid.send_and_receive(msgs, timeout=cfg.round_timeout):
        if reply.has_error():
            log.warning("evaluate: node %s failed: %s", reply.metadata.src_node_id, reply.error.reason)
            continue
        m = reply.content["metrics"]
        out[str(int(m["partition_id"]))] = float(m["accuracy"])
    server.history[-1].extra["federated_eval"] = out
    server.save()
    log.warning("federated evaluation: mean local accuracy %.3f over %d nodes", sum(out.values()) / max(len(out), 1),
                len(out))
    return out


def make_server_app(cfg: FedConfig | None = None) -> Any:
    """A ``ServerApp`` bound to ``cfg`` (``None``: read it from the run config at start)."""
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Any, context: Any) -> None:
        run_server(grid, cfg if cfg is not None else config_from_run_config(context.run_config))

    return app


app = make_server_app()
