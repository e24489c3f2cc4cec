"""The VLA fine-tuning loop: LoRA (peft) or full fine-tuning of a VLM on ``(image, prompt, target)`` samples.

Runs on one CPU/GPU or under ``accelerate launch`` / ``torchrun`` (data parallel): the :class:`Accelerator` is
built with ``cpu=True`` when no GPU is used, so two CPU processes synchronise gradients instead of silently
training two copies (ENVIRONMENT.md §11). Every process takes a disjoint shard of each global batch.

Steps are optimizer updates (``batch_size x grad_accum x processes`` samples each). The sample order is a pure
function of ``(seed, epoch)``, so a checkpoint (trainable weights, optimizer, scheduler, step, RNG states)
resumes at the exact next batch with the exact same state.
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np

from agents.core.config import differing_keys
from agents.core.io import atomic_dir, load_torch_file, read_json_object
from training.vla.config import LoopSettings

log = logging.getLogger(__name__)

CKPT_PREFIX = "step_"


def make_accelerator(device: str = "auto", mixed_precision: str = "no") -> Any:
    """An Accelerator on the GPU when one is used, else ``Accelerator(cpu=True)`` (required for CPU DDP)."""
    import torch
    from accelerate import Accelerator

    use_cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device is 'cuda' but no CUDA GPU is available")
    return Accelerator(cpu=use_cpu, mixed_precision="no" if use_cpu else mixed_precision)


def _lr_lambda(schedule: str, warmup: int, total: int) -> Any:
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant":
            return 1.0
        frac = min(1.0, (step - warmup) / max(1, total - warmup))
        return 1.0 - frac if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * frac))

    return f


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of one epoch (a pure function of seed and epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def global_batch_indices(n: int, seed: int, step: int, global_batch: int) -> list[int]:
    """Sample indices of optimizer step ``step`` (0-based): consecutive slices of the concatenated epoch orders."""
    start = step * global_batch
    out: list[int] = []
    epoch, pos = divmod(start, n)
    order = epoch_order(n, seed, epoch)
    while len(out) < global_batch:
        if pos >= n:
            epoch, pos = epoch + 1, 0
            order = epoch_order(n, seed, epoch)
        take = min(global_batch - len(out), n - pos)
        out += order[pos:pos + take].tolist()
        pos += take
    return out


def trainable_state(model: Any) -> dict[str, Any]:
    """The trainable parameters (the LoRA weights for a peft model), detached on CPU."""
    return {k: p.detach().cpu().clone() for k, p in model.named_parameters() if p.requires_grad}


def _rng_state() -> dict[str, Any]:
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def checkpoints(out_dir: str | Path) -> list[Path]:
    """The ``step_<N>`` checkpoint folders in ``out_dir/checkpoints``, by step (other names are ignored)."""
    root = Path(out_dir) / "checkpoints"
    found = [p for p in root.glob(f"{CKPT_PREFIX}*") if p.is_dir() and p.name[len(CKPT_PREFIX):].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(CKPT_PREFIX):]))


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The checkpoint directory with the highest step in ``out_dir/checkpoints`` (None if there is none)."""
    ckpts = checkpoints(out_dir)
    return ckpts[-1] if ckpts else None


def save_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any, step: int, extra: dict[str, Any]) -> None:
    """Trainable weights, optimizer and scheduler state, RNG states and the step, written atomically."""
    import torch

    with atomic_dir(path) as tmp:
        torch.save({"trainable": trainable_state(model), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "rng": _rng_state(), "step": step}, tmp / "state.pt")
        (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **extra}, indent=1, default=float))


def load_checkpoint(path: Path, model: Any, optimizer: Any, scheduler: Any) -> int:
    """Restore a :func:`save_checkpoint` directory into ``model``/``optimizer``/``scheduler``; returns its step."""
    import torch

    f = path / "state.pt"
    if not f.is_file():
        raise ValueError(f"{path} is not a VLA training checkpoint (no state.pt)")
    state = load_torch_file(f, "VLA training checkpoint")
    if not isinstance(state, dict) or not {"trainable", "optimizer", "scheduler", "rng", "step"} <= state.keys():
        raise ValueError(f"{f} is not a VLA training checkpoint (needs trainable, optimizer, scheduler, rng, step)")
    params = dict(model.named_parameters())
    missing = [k for k in state["trainable"] if k not in params]
    mine = [k for k, p in params.items() if p.requires_grad and k not in state["trainable"]]
    if missing or mine:
        raise ValueError(f"checkpoint {path} does not match the model: {len(missing)} saved tensors not in the model "
                         f"(e.g. {missing[:2]}), {len(mine)} trainable tensors not saved (e.g. {mine[:2]})")
    with torch.no_grad():
        for k, v in state["trainable"].items():
            if params[k].shape != v.shape:
                raise ValueError(f"checkpoint {path}: {k} has shape {tuple(v.shape)}, model {tuple(params[k].shape)}")
            params[k].copy_(v)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    _set_rng_state(state["rng"])
    return int(state["step"])


def _check_resumable(ck: Path, mine: dict[str, int]) -> None:
    """Refuse to resume ``ck`` when the data or the batch order would differ: the step's batch is a function of
    the number of samples, the global batch and the seed, so a resume with other values would skip or repeat data
    (``max_steps``/``epochs`` may change). Checkpoints that predate these fields are accepted."""
    f = ck / "trainer_state.json"
    if not f.is_file():
        return
    try:
        saved = read_json_object(f)
    except ValueError as exc:
        raise ValueError(f"corrupt VLA training checkpoint: {exc}") from exc
    diff = {k: (saved[k], mine[k]) for k in differing_keys(saved, mine, shared_only=True)}
    if diff:
        raise ValueError(f"{ck} was trained with other data or batching (saved vs now: {diff}); resuming would "
                         "skip or repeat samples: give another out_dir, or the same data, batch and seed")


def train_loop(model: Any, samples: Sequence[Any], collate: Any, s: LoopSettings, resume: bool = False,
               progress: bool = True, save_final: Any = None, callback: Any = None) -> dict[str, Any]:
    """Optimise ``model``'s trainable parameters on ``samples`` (any items); ``collate(items) -> dict of
    tensors`` (with ``labels``). ``save_final(unwrapped_model, out_dir, step)`` runs on the main process at the end;
    ``callback(unwrapped_model, step)`` on the main process after every optimiser step (e.g. periodic evaluation;
    it must leave the model's train/eval mode as it found it).
    Returns ``{"steps", "losses", "first_loss", "last_loss", "seconds", "resumed_from"}``."""
    import torch
    from torch.utils.tensorboard import SummaryWriter
    from tqdm import tqdm

    if not samples:
        raise ValueError("no training samples")
    if s.num_threads > 0:
        torch.set_num_threads(s.num_threads)
    acc = make_accelerator(s.device, s.mixed_precision)
    out = Path(s.out_dir)
    world, rank = acc.num_processes, acc.process_index
    global_batch = s.batch_size * s.grad_accum * world
    total = s.max_steps or max(1, math.ceil(s.epochs * len(samples) / global_batch))
    random.seed(s.seed)
    np.random.seed(s.seed)
    torch.manual_seed(s.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    opt = torch.optim.AdamW(params, lr=s.lr, betas=s.adam_betas, eps=s.adam_eps, weight_decay=s.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(s.schedule, s.warmup_steps, total))
    step, resumed_from = 0, None
    if resume:
        ck = latest_checkpoint(out)
        if ck is None:
            log.warning("--resume: no checkpoint in %s; starting from step 0", out / "checkpoints")
        else:
            _check_resumable(ck, {"samples": len(samples), "global_batch": global_batch, "seed": s.seed})
            step = load_checkpoint(ck, model, opt, sched)
            resumed_from = str(ck)
            log.info("resumed from %s (step %d)", ck, step)
    model, opt = acc.prepare(model, opt)
    model.train()
    writer = SummaryWriter(str(out / "tb")) if acc.is_main_process else None
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = tqdm(total=total, initial=step, desc="train vla", disable=not progress or not acc.is_main_process)
    while step < total:
        idx = global_batch_indices(len(samples), s.seed, step, global_batch)
        mine = idx[rank::world]
        loss_sum = 0.0
        for m in range(s.grad_accum):
            micro = [samples[i] for i in mine[m * s.batch_size:(m + 1) * s.batch_size]]
            batch = {k: v.to(acc.device) if hasattr(v, "to") else v for k, v in collate(micro).items()}
            sync = nullcontext() if m == s.grad_accum - 1 else acc.no_sync(model)
            with sync, acc.autocast():
                loss = model(**batch).loss / s.grad_accum
                acc.backward(loss)
            loss_sum += float(loss.detach())
        if s.max_grad_norm > 0:
            acc.clip_grad_norm_(params, s.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        mean_loss = float(acc.reduce(torch.tensor(loss_sum, device=acc.device), reduction="mean"))
        if not math.isfinite(mean_loss):
            raise FloatingPointError(f"loss became {mean_loss} at step {step}; lower the learning rate")
        losses.append(mean_loss)
        bar.update(1)
        bar.set_postfix(loss=f"{mean_loss:.4f}")
        if callback is not None:
            if acc.is_main_process:
                callback(acc.unwrap_model(model), step)
            acc.wait_for_everyone()
        if writer is not None and (step % s.log_every == 0 or step == total):
            writer.add_scalar("train/loss", mean_loss, step)
            writer.add_scalar("train/lr", sched.get_last_lr()[0], step)
        if step % s.save_every == 0 or step == total:
            acc.wait_for_everyone()
            if acc.is_main_process:
                path = out / "checkpoints" / f"{CKPT_PREFIX}{step}"
                save_checkpoint(path, acc.unwrap_model(model), opt, sched, step,
                                {"loss": mean_loss, "total_steps": total, "samples": len(samples),
                                 "global_batch": global_batch, "seed": s.seed})
                for p in checkpoints(out)[:-s.keep_checkpoints]:
                    shutil.rmtree(p, ignore_errors=True)
    bar.close()
    acc.wait_for_everyone()
    if writer is not None:
        writer.close()
    unwrapped = acc.unwrap_model(model)
    if save_final is not None and acc.is_main_process:
        save_final(unwrapped, out, step)
    return {"steps": step, "total_steps": total, "losses": losses, "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None, "seconds": time.perf_counter() - t0,
            "resumed_from": resumed_from, "processes": world, "model": unwrapped}
