"""Conversions between the plain payloads (``State``, ``Upload``) and Flower records, and run-config parsing."""

from __future__ import annotations

from typing import Any

import torch

from training.federated.config import FedConfig, load_config
from training.federated.methods.base import State, Upload


def state_to_record(state: State) -> Any:
    from flwr.app import ArrayRecord

    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in state.items()})


def record_to_state(record: Any) -> State:
    return {k: torch.as_tensor(v, dtype=torch.float32) for k, v in record.to_torch_state_dict().items()}


def upload_to_content(up: Upload, metrics: dict[str, float]) -> Any:
    from flwr.app import MetricRecord, RecordDict

    meta = {"partition_id": int(up.client_id), "num_samples": up.num_samples, "budget": up.budget, **metrics}
    return RecordDict({"update": state_to_record(up.tensors), "meta": MetricRecord(meta)})


def content_to_upload(content: Any) -> tuple[Upload, dict[str, float]]:
    """Parse a client reply; raises ``ValueError`` on a malformed one (the server excludes that client)."""
    try:
        meta = dict(content["meta"])
        tensors = record_to_state(content["update"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"malformed reply: {type(e).__name__}: {e}") from None
    for key in ("partition_id", "num_samples", "budget"):
        if key not in meta:
            raise ValueError(f"malformed reply: meta lacks {key!r}")
    up = Upload(client_id=str(int(meta["partition_id"])), num_samples=int(meta["num_samples"]),
                budget=int(meta["budget"]), tensors=tensors)
    return up, {k: float(v) for k, v in meta.items()}


def config_from_run_config(run_config: Any) -> FedConfig:
    """``FedConfig`` from Flower's run config: ``config-path`` (YAML; may be empty) + ``overrides`` ("k=v;k=v")."""
    rc = dict(run_config or {})
    path = str(rc.get("config-path", "") or "")
    overrides = [s.strip() for s in str(rc.get("overrides", "") or "").split(";") if s.strip()]
    return load_config(path or None, overrides)
