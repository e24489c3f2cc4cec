"""Train the AlldayWalker base navigator: behaviour cloning of the follower, then DAgger rounds; checkpoints,
resume, evaluation per condition, and a cache keyed by the config hash (``base_navigator``)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from agents.core.io import (
    NPZ_READ_ERRORS,
    atomic_dir,
    load_npz,
    read_json_object,
    restore_interrupted,
    save_npz,
    write_text,
)
from agents.core.numerics import numerics_info, numerics_key
from agents.vln.modeling_vln import AlldayWalkerPolicy
from agents.vln.processor_vln import VLNProcessor
from sim.core.env import NavEnvConfig
from sim.core.episodes import Episode, GroundTruth
from sim.nav.env import MujocoNavEnv
from sim.nav.episode_gen import EpisodeGenConfig, generate_episodes, scene_list
from training.vln.backbone import GROUNDING_JSON, SCENE_SET, build_backbone
from training.vln.config import VLNTrainConfig
from training.vln.data import Sample, collect
from training.vln.trainer import Imitation

log = logging.getLogger(__name__)
STATE = "state.json"
CHECKPOINT = "checkpoint"
DONE = "DONE"


# ------------------------------------------------------------------------------------------------ episodes / envs
def make_episodes(cfg: VLNTrainConfig, split: str, per_scene: int | None = None, scenes: list[int] | None = None,
                  progress: bool = False, seed_offset: int = 0) -> tuple[list[Episode], dict[str, GroundTruth]]:
    """``train``/``eval``/``dagger``/``task``/``val`` episodes (disjoint seeds, ``seed_offset`` shifts them
    further) in the config's houses (or the ``scenes`` subset, by index). ``val``: as many as ``eval``, for choices
    made before evaluation (the backbone guard, :mod:`training.vln.backbone`)."""
    offsets = {"train": 0, "eval": 7919, "dagger": 15887, "task": 23873, "val": 31847}
    if split not in offsets:
        raise ValueError(f"split must be one of {sorted(offsets)}, got {split!r}")
    n = per_scene or {"train": cfg.episodes_per_scene, "eval": cfg.eval_per_scene,
                      "dagger": cfg.dagger_episodes_per_scene, "task": cfg.eval_per_scene,
                      "val": cfg.eval_per_scene}[split]
    bad = [i for i in (scenes or []) if not 0 <= i < cfg.n_scenes]
    if bad:
        raise ValueError(f"unknown scene index {bad}: the config has {cfg.n_scenes} scenes (0..{cfg.n_scenes - 1})")
    all_scenes = scene_list(cfg.n_scenes, cfg.scene_seed)
    chosen = [all_scenes[i] for i in (scenes if scenes is not None else range(cfg.n_scenes))]
    gen = EpisodeGenConfig(min_distance=cfg.min_distance, max_distance=cfg.max_distance, max_steps=cfg.max_steps,
                           tries_per_episode=400, same_room=cfg.same_room, goal_side=cfg.goal_side)
    eps, gts, _ = generate_episodes(chosen, n, seed=cfg.seed + offsets[split] + seed_offset, cfg=gen, progress=progress)
    return eps, gts


def scene_ids(cfg: VLNTrainConfig) -> list[str]:
    """Scene id strings in task-index order."""
    from sim.nav.house import scene_id_for

    return [scene_id_for(style, seed) for style, seed in scene_list(cfg.n_scenes, cfg.scene_seed)]


def make_env(cfg: VLNTrainConfig, condition: str, episodes: list[Episode], gts: dict[str, GroundTruth]) -> MujocoNavEnv:
    env_cfg = NavEnvConfig(width=cfg.image_size, height=cfg.image_size, quality="fast", depth=False,
                           condition=condition, condition_params=dict(cfg.condition_params.get(condition, {})),
                           physical_conditions=cfg.physical_conditions, max_steps=cfg.max_steps,
                           success_distance=cfg.success_distance, seed=cfg.seed)
    return MujocoNavEnv(env_cfg, episodes, gts)


def evaluate_policy(policy: Any, cfg: VLNTrainConfig, episodes: list[Episode], gts: dict[str, GroundTruth],
                    condition: str, progress: bool = False) -> dict[str, float]:
    """SR / SPL / OSR / NE ... of ``policy`` on ``episodes`` under ``condition``."""
    from sim.nav.evaluate import evaluate

    env = make_env(cfg, condition, episodes, gts)
    try:
        agg, _ = evaluate(env, policy, progress=progress)
    finally:
        env.close()
    return agg


def save_samples(path: Path, samples: list[Sample]) -> None:
    """Write the collected imitation samples (atomically: a killed run keeps the previous file)."""
    save_npz(path, image=np.stack([s.image for s in samples]), prompt=np.array([s.prompt for s in samples]),
             target=np.array([s.target for s in samples]),
             ids=np.array([[s.scene, s.env] for s in samples], dtype=np.int64))


def load_samples(path: Path) -> list[Sample]:
    """Read :func:`save_samples`' file; a missing, truncated or foreign file raises ``ValueError`` naming it."""
    try:
        with load_npz(path) as d:
            return [Sample(img, str(p), str(t), int(i[0]), int(i[1]))
                    for img, p, t, i in zip(d["image"], d["prompt"], d["target"], d["ids"], strict=True)]
    except NPZ_READ_ERRORS as exc:
        raise ValueError(f"unreadable imitation samples {path} ({type(exc).__name__}: {exc}); "
                         "start the run again without --resume or with another --out") from exc


# ------------------------------------------------------------------------------------------------ training
def _accelerator() -> Any:
    import torch
    from accelerate import Accelerator

    return Accelerator(cpu=not torch.cuda.is_available())


def train_navigator(cfg: VLNTrainConfig, out_dir: str | Path, resume: bool = False,
                    progress: bool = True) -> dict[str, Any]:
    """Behaviour cloning (``steps``) + ``dagger_rounds`` x DAgger (``dagger_steps``); writes ``final/`` (an
    AlldayWalker checkpoint) and ``metrics.json`` (SR/SPL/OSR per eval condition). Resumable at any checkpoint."""
    import torch

    from agents.vlm.bundle import load_vlm

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    agent_cfg = cfg.agent_config()
    ckpt = checkpoint_dir(out)
    state_path = ckpt / STATE
    resumed = resume and state_path.is_file()
    if resumed:
        try:
            state = read_json_object(state_path, required=("fingerprint", "phase", "phase_step", "collected", "step"))
        except ValueError as exc:
            raise ValueError(f"corrupt training state: {exc}") from exc
        if state.get("fingerprint") != cfg.fingerprint():
            raise ValueError(f"{out} was trained with a different config (fingerprint {state.get('fingerprint')} "
                             f"vs {cfg.fingerprint()}); use another --out or the same config")
        log.info("resuming %s at phase %s step %s", out, state["phase"], state["phase_step"])
        _warn_numerics_change(state.get("numerics"), out)
    else:
        if resume:
            log.warning("--resume: no checkpoint in %s, starting fresh", out)
        state = {"fingerprint": cfg.fingerprint(), "phase": "bc", "phase_step": 0, "collected": [], "step": 0,
                 "numerics": numerics_key()}
    train_eps, train_gts = make_episodes(cfg, "train", progress=progress)
    eval_eps, eval_gts = make_episodes(cfg, "eval")
    if resumed:
        bundle = load_vlm(ckpt / "model")
    else:
        backbone = build_backbone(cfg, out / "backbone", [e.instruction_text for e in train_eps])
        bundle = load_vlm(backbone)
    model = bundle.model
    for p in model.parameters():
        p.requires_grad_(True)
    vproc = VLNProcessor(bundle.processor, bundle.family, bundle.image_size or cfg.image_size, agent_cfg)
    trainer = Imitation(model, vproc, lr=cfg.lr, batch_size=cfg.batch_size, seed=cfg.seed + state["step"],
                        accelerator=_accelerator())
    if resumed and (ckpt / "optim.pt").is_file():  # a finished base drops it
        trainer.optimizer.load_state_dict(torch.load(ckpt / "optim.pt", weights_only=True))
        if "rng" in state:  # the batch draws continue where they stopped (not from the phase's first batch)
            trainer.rng.bit_generator.state = state["rng"]
    # the samples file is replaced before the state: a run killed between the two has samples of a phase the state
    # does not list yet, which is collected again, so keep the samples the state counted
    training_left = state["phase"] not in ("eval", "done")  # a finished run may have dropped its samples
    samples = load_samples(out / "samples.npz")[:state.get("samples")] if state["collected"] and training_left else []
    scene = cfg.scene_grounding_config()
    cotrain = []
    if scene is not None and scene.cotrain > 0:
        from training.vln.scene_grounding import cotrain_samples

        cotrain = cotrain_samples(cfg, scene, progress, cache=out / "backbone" / SCENE_SET)

    def checkpoint() -> None:  # model, optimizer and state swapped in together: a kill leaves one consistent set
        state["rng"] = trainer.rng.bit_generator.state
        with atomic_dir(out / CHECKPOINT) as tmp:
            bundle.model.save_pretrained(str(tmp / "model"))
            bundle.processor.save_pretrained(str(tmp / "model"))
            torch.save(trainer.optimizer.state_dict(), tmp / "optim.pt")
            (tmp / STATE).write_text(json.dumps(state))

    phases = ["bc"] + [f"dagger{r}" for r in range(cfg.dagger_rounds)]
    losses: list[float] = []
    for phase in phases[phases.index(state["phase"]):] if state["phase"] in phases else []:
        if phase not in state["collected"]:
            samples += _collect_phase(cfg, phase, bundle, agent_cfg, train_eps, train_gts, progress)
            save_samples(out / "samples.npz", samples)
            state["collected"].append(phase)
            state["samples"] = len(samples)
            checkpoint()
        total = cfg.steps if phase == "bc" else cfg.dagger_steps
        while state["phase_step"] < total:
            n = min(cfg.checkpoint_every, total - state["phase_step"])
            losses += trainer.run(samples, n, progress=progress, desc=f"{phase} ({len(samples)} samples)",
                                  cotrain=cotrain, cotrain_fraction=scene.cotrain if cotrain else 0.0)
            state["phase_step"] += n
            checkpoint()
        state["step"] += state["phase_step"]
        state["phase"], state["phase_step"] = "eval", 0
        if phase != phases[-1]:
            state["phase"] = phases[phases.index(phase) + 1]
        checkpoint()
    policy = AlldayWalkerPolicy(bundle, agent_cfg)
    metrics = {c: evaluate_policy(policy, cfg, eval_eps, eval_gts, c, progress) for c in cfg.eval_conditions}
    policy.save_pretrained(out / "final")
    result = {"metrics": metrics, "steps": state["step"], "samples": state.get("samples", len(samples)),
              "last_losses": losses[-20:], "backbone": _backbone_record(out),
              "numerics": numerics_info(), "fingerprint": cfg.fingerprint(), "config": cfg.to_dict()}
    (out / "metrics.json").write_text(json.dumps(result, indent=1, default=float))
    state["phase"] = "done"
    write_text(checkpoint_dir(out) / STATE, json.dumps(state))
    return result


def _warn_numerics_change(started: dict[str, Any] | None, out: Path) -> None:
    """Say so when a run resumes under other CPU numerics than it started with: its weights will not reproduce."""
    now = numerics_key()
    if started is not None and started != now:
        log.warning("%s resumes under other CPU numerics than it started with (%s, now %s): the weights will not "
                    "match an uninterrupted run's", out, started, now)


def _backbone_record(out: Path) -> dict[str, Any] | None:
    """The backbone's pre-training results (``backbone/grounding.json``: held-out scores, every guarded draw), kept
    in ``metrics.json`` because a finished base drops ``backbone/``; None without pre-training or when unreadable."""
    try:
        return read_json_object(out / "backbone" / GROUNDING_JSON)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        log.warning("the backbone's pre-training record is not kept: %s", exc)
        return None


def checkpoint_dir(out: Path) -> Path:
    """The folder holding a navigator run's resumable checkpoint (``model/``, ``optim.pt``, ``state.json``);
    runs written before 2026-12-04 kept these in ``out`` itself."""
    restore_interrupted(out / CHECKPOINT)
    if not (out / CHECKPOINT).is_dir() and (out / STATE).is_file():
        return out
    return out / CHECKPOINT


def _collect_phase(cfg: VLNTrainConfig, phase: str, bundle: Any, agent_cfg: Any, train_eps: list[Episode],
                   train_gts: dict[str, GroundTruth], progress: bool) -> list[Sample]:
    out: list[Sample] = []
    if phase == "bc":
        for cond in cfg.train_conditions:
            env = make_env(cfg, cond, train_eps, train_gts)
            try:
                out += collect(env, range(len(train_eps)), agent_cfg, cfg.image_size, seed=cfg.seed,
                               progress=progress, teacher=cfg.teacher)
            finally:
                env.close()
        return out
    r = int(phase.removeprefix("dagger"))
    beta = cfg.dagger_beta * (0.5 ** r)
    eps, gts = make_episodes(cfg, "dagger")
    policy = AlldayWalkerPolicy(bundle, agent_cfg)
    for cond in cfg.train_conditions:
        env = make_env(cfg, cond, eps, gts)
        try:
            out += collect(env, range(len(eps)), agent_cfg, cfg.image_size, policy=policy, beta=beta,
                           seed=cfg.seed + 31 * (r + 1), progress=progress, teacher=cfg.teacher)
        finally:
            env.close()
    return out


def base_navigator(cfg: VLNTrainConfig, progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """The pre-trained base navigator for ``cfg`` from the cache (``cache_dir/base-<hash>``), trained on a miss."""
    root = Path(cfg.cache_dir) / f"base-{cfg.fingerprint()}"
    if (root / DONE).is_file() and (root / "final").is_dir():
        _drop_training_leftovers(root)  # a run killed while cleaning up after DONE
        return root / "final", json.loads((root / "metrics.json").read_text())
    result = train_navigator(cfg, root, resume=True, progress=progress)
    write_text(root / DONE, cfg.fingerprint())  # first: a kill during the clean-up below must not retrain
    _drop_training_leftovers(root)
    return root / "final", result


def _drop_training_leftovers(root: Path) -> None:
    """Delete what only a resume needs (optimizer state, samples, the untrained backbone) from a finished run."""
    for junk in (f"{CHECKPOINT}/optim.pt", "optim.pt", "samples.npz", "backbone"):
        p = root / junk
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
