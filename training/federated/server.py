"""Plain federated server: client sampling, fault filtering, aggregation, evaluation and checkpoint/resume.

``FedServer`` holds the global state of one method and the round counter. Each round the runtime (Flower
``ServerApp`` or the plain loop) asks it which clients to sample, sends them ``state``, collects replies and calls
``finish_round(round, uploads, failures)``: invalid uploads are excluded with a logged reason, the rest aggregated,
the new state evaluated and checkpointed atomically (``<checkpoint_dir>/global.pt``: state, round, history), so
a restarted server resumes at the next round.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.core.config import differing_keys
from agents.core.io import atomic_path, load_torch_file
from training.federated.config import FedConfig
from training.federated.local import get_task, global_eval, lora_scale
from training.federated.methods.base import FedMethod, State, Upload
from training.federated.registry import make_method

#: Settings a resumed run may change (more rounds, where and how it runs); any other difference is refused.
RESUME_MAY_CHANGE = frozenset({"rounds", "checkpoint_dir", "resume", "round_timeout", "torch_threads"})

log = logging.getLogger(__name__)
CHECKPOINT = "global.pt"


@dataclass
class RoundRecord:
    """What happened in one round."""

    round: int
    sampled: list[str]
    aggregated: list[str]
    excluded: dict[str, str]
    accuracy: float
    loss: float
    train_loss: float
    init_noise: float
    down_bytes: int
    up_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)


class FedServer:
    """Global state + round bookkeeping for one run of ``cfg.method``."""

    def __init__(self, cfg: FedConfig, method: FedMethod | None = None) -> None:
        self.cfg = cfg
        self.method = method or make_method(cfg.method, rank=cfg.rank, scale=lora_scale(cfg), weighting=cfg.weighting)
        self.history: list[RoundRecord] = []
        self.round = 0  # last completed round
        self.state: State = {}
        ckpt = self.checkpoint_path
        if ckpt is not None and cfg.resume and ckpt.is_file():
            self._load(ckpt)
        else:
            self.state = self.method.init_state(get_task(cfg).base)

    # -------------------------------------------------------------------------------------------- checkpoints
    @property
    def checkpoint_path(self) -> Path | None:
        return Path(self.cfg.checkpoint_dir) / CHECKPOINT if self.cfg.checkpoint_dir else None

    def _load(self, path: Path) -> None:
        blob = load_torch_file(path, "federated checkpoint")
        if not isinstance(blob, dict) or not {"method", "round", "state"} <= blob.keys():
            raise ValueError(f"{path} is not a federated checkpoint (needs method, round and state)")
        if blob.get("method") != self.method.name:
            raise ValueError(f"checkpoint {path} holds method {blob.get('method')!r}, config says {self.method.name!r}")
        saved, mine = blob.get("config"), self.cfg.to_dict()
        if isinstance(saved, dict):
            diff = differing_keys(saved, mine, ignore=RESUME_MAY_CHANGE, shared_only=True)
            if diff:
                raise ValueError(f"checkpoint {path} was written with other settings ({', '.join(diff)}); give another "
                                 "checkpoint_dir, or resume: false to start over")
        self.state, self.round = blob["state"], int(blob["round"])
        self.history = [RoundRecord(**r) for r in blob.get("history", [])]
        log.info("resumed %s from %s at round %d", self.method.name, path, self.round)

    def save(self) -> None:
        path = self.checkpoint_path
        if path is None:
            return
        blob = {"method": self.method.name, "round": self.round, "state": self.state,
                "history": [r.__dict__ for r in self.history], "config": self.cfg.to_dict()}
        with atomic_path(path) as tmp:
            torch.save(blob, tmp)

    # ------------------------------------------------------------------------------------------------- rounds
    @property
    def done(self) -> bool:
        return self.round >= self.cfg.rounds

    def sample(self, available: Sequence[Any], round_idx: int) -> list[Any]:
        """``clients_per_round`` of ``available`` (node ids or partition ids), seeded by (seed, round)."""
        avail = sorted(available)
        if len(avail) < 1:
            raise ValueError("no clients available")
        k = min(len(avail), self.cfg.clients_per_round())
        rng = np.random.default_rng([self.cfg.seed, round_idx, 7])
        return [avail[i] for i in sorted(rng.choice(len(avail), size=k, replace=False))]

    def finish_round(self, round_idx: int, uploads: Sequence[Upload], failures: dict[str, str],
                     metrics: dict[str, dict[str, float]] | None = None) -> RoundRecord:
        """Exclude bad uploads (logged), aggregate the rest, evaluate, checkpoint; returns the round's record."""
        if round_idx != self.round + 1:
            raise ValueError(f"expected round {self.round + 1}, got {round_idx}")
        valid, rejected = self.method.split_valid(self.state, uploads)
        excluded = {**failures, **rejected}
        for cid, reason in sorted(excluded.items()):
            log.warning("round %d: excluding client %s: %s", round_idx, cid, reason)
        down = sum(self.method.downlink_numel(self.state, u.budget) for u in valid) * 4
        up = sum(self.method.uplink_numel(u) for u in valid) * 4
        if valid:
            self.state = self.method.aggregate(self.state, valid)
        else:
            log.warning("round %d: no valid update, global state unchanged", round_idx)
        acc, loss = global_eval(self.cfg, self.method, self.state)
        m = metrics or {}
        ok = [m[u.client_id] for u in valid if u.client_id in m]
        rec = RoundRecord(
            round=round_idx, sampled=sorted([u.client_id for u in uploads] + list(failures)),
            aggregated=sorted(u.client_id for u in valid), excluded=excluded, accuracy=acc, loss=loss,
            train_loss=float(np.mean([x["loss_last"] for x in ok])) if ok else float("nan"),
            init_noise=float(np.mean([x["init_noise"] for x in ok])) if ok else float("nan"),
            down_bytes=down, up_bytes=up,
        )
        self.history.append(rec)
        self.round = round_idx
        self.save()
        log.info("round %d: acc %.3f loss %.3f (%d aggregated, %d excluded)", round_idx, acc, loss,
                 len(valid), len(excluded))
        return rec
