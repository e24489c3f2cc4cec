"""Plain client-side work shared by every runtime: build task/model once per process, local training, evaluation.

``client_round`` is the whole client step (used verbatim by the Flower ``ClientApp`` and by the plain loop):
fresh copy of the frozen base -> ``method.start_client`` -> measure initialisation noise against the global
function -> ``local_steps`` of AdamW on the task loss -> ``method.upload``.
"""

from __future__ import annotations

import copy
import functools
import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from training.federated.config import FedConfig
from training.federated.data import Encoded, FedData, build_fed_data
from training.federated.methods.base import FedMethod, State, Upload
from training.federated.model import ModelSpec, build_model
from training.peft.plora import client_rng, init_noise

log = logging.getLogger(__name__)


@dataclass
class Task:
    """The federated dataset and the frozen base model (identical in every process for a given config)."""

    data: FedData
    base: nn.Module
    spec: ModelSpec


@functools.lru_cache(maxsize=4)
def _task(num_clients: int, examples_per_client: int, split: str, alpha: float, seed: int, test_size: int,
          rank: int, lora_alpha: float) -> Task:
    data = build_fed_data(num_clients, examples_per_client, split, alpha=alpha, seed=seed, test_size=test_size)
    spec = ModelSpec(vocab_size=data.vocab_size, rank=rank, alpha=lora_alpha, seed=seed)
    return Task(data=data, base=build_model(spec, data.label_ids), spec=spec)


def get_task(cfg: FedConfig) -> Task:
    """The (process-cached) task for ``cfg``; never mutate ``task.base``, copy it.

    Also sets this process's torch intra-op threads to ``cfg.torch_threads``: with one client per CPU (Ray, several
    SuperNodes on a host) more threads oversubscribe the cores (measured 8-30x slower local steps under load).
    """
    if torch.get_num_threads() != cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    return _task(cfg.num_clients, cfg.examples_per_client, cfg.split, cfg.dirichlet_alpha, cfg.seed,
                 cfg.test_size, cfg.rank, cfg.alpha)


def lora_scale(cfg: FedConfig) -> float:
    """The one LoRA scale s = alpha / R used on every client."""
    return cfg.alpha / cfg.rank


def train_local(model: nn.Module, data: Encoded, steps: int, batch_size: int, lr: float,
                rng: np.random.Generator) -> tuple[float, float]:
    """``steps`` AdamW steps on random minibatches; returns (first-batch loss, mean loss of the last steps)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("train_local: model has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        idx = torch.as_tensor(rng.choice(len(data), size=min(batch_size, len(data)), replace=False))
        loss = F.cross_entropy(model(data.input_ids[idx], data.attention_mask[idx]), data.labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    tail = losses[-max(1, steps // 4):]
    return losses[0], float(np.mean(tail))


@torch.no_grad()
def evaluate(model: nn.Module, data: Encoded, batch_size: int = 256) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``model`` on ``data``."""
    model.eval()
    correct, loss_sum = 0, 0.0
    for s in range(0, len(data), batch_size):
        logits = model(data.input_ids[s:s + batch_size], data.attention_mask[s:s + batch_size])
        y = data.labels[s:s + batch_size]
        correct += int((logits.argmax(-1) == y).sum())
        loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
    return correct / len(data), loss_sum / len(data)


def global_eval(cfg: FedConfig, method: FedMethod, state: State) -> tuple[float, float]:
    """Test (accuracy, loss) of the global model of ``state``."""
    task = get_task(cfg)
    return evaluate(method.global_model(copy.deepcopy(task.base), state), task.data.test)


def client_round(cfg: FedConfig, method: FedMethod, state: State, partition_id: int, budget: int,
                 round_idx: int) -> tuple[Upload, dict[str, float]]:
    """One client's round on partition ``partition_id`` with rank budget ``budget``: (upload, metrics)."""
    task = get_task(cfg)
    if not 0 <= partition_id < len(task.data.clients):
        raise ValueError(f"partition_id must be in [0, {len(task.data.clients)}), got {partition_id}")
    if not 1 <= budget <= cfg.rank:
        raise ValueError(f"rank budget {budget} of client {partition_id} is outside [1, R={cfg.rank}]")
    data = task.data.clients[partition_id]
    rng = client_rng(cfg.seed, round_idx, partition_id)
    client = method.start_client(copy.deepcopy(task.base), state, budget, rng)
    probe = data.subset(np.arange(min(len(data), 32)))
    reference = method.global_model(copy.deepcopy(task.base), state)
    noise = init_noise(reference, client.model, probe.input_ids, probe.attention_mask)
    first, last = train_local(client.model, data, cfg.local_steps, cfg.batch_size, cfg.lr, rng)
    up = Upload(client_id=str(partition_id), num_samples=len(data), budget=method.effective_budget(budget),
                tensors=method.upload(client))
    metrics = {"loss_first": first, "loss_last": last, "init_noise": noise, "budget": float(up.budget),
               "num_samples": float(len(data))}
    return up, metrics
