"""The AML-VLN protocol at small scale: a sequence of (scene, condition) tasks learned one at a time.

Every method starts from the same cached base navigator and sees the same tasks, data and held-out episodes.
After each task k the method is evaluated on tasks 1..k (the SR/SPL/OSR matrices X[k, t]); after the last one on
the unseen (scene, condition) pairs too. Forgetting follows ``vln-format-and-metrics.md`` section 3:
F-X_t = (X[t, t] - X[T, t]) / X[t, t] for t < T, NaN (excluded) when X[t, t] = 0.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from sim.core.episodes import Episode, GroundTruth
from training.vln.data import Sample, collect
from training.vln.lifelong_config import LifelongConfig, Task
from training.vln.methods import METHODS
from training.vln.navigator import make_env, make_episodes
from training.vln.routing import ROUTING_KEYS, add_routing, routing_accuracy, routing_features
from training.vln.trainer import Imitation, make_batch

log = logging.getLogger(__name__)


@dataclass
class TaskData:
    task: Task
    samples: list[Sample]
    eval_episodes: list[Episode]
    eval_gts: dict[str, GroundTruth]
    questions: list[Sample] = field(default_factory=list)
    heldout: list[Sample] = field(default_factory=list)


def prepare_data(cfg: LifelongConfig, tasks: list[Task], progress: bool = False) -> dict[int, TaskData]:
    """Oracle demonstrations (training) and held-out episodes of every task, rendered under its condition; with
    ``cfg.cotrain``, the scene questions about the demonstrations' frames too; with ``cfg.offline_samples``, the
    teacher's demonstrations of the held-out episodes (at most that many model calls)."""
    from training.vln.offline import subsample
    from training.vln.scene_grounding import FrameQuestions, SceneGroundingConfig, question_samples

    out: dict[int, TaskData] = {}
    agent_cfg = cfg.base.agent_config()
    asking = cfg.base.scene_grounding_config() or SceneGroundingConfig()
    for t in tqdm(tasks, desc="task data", disable=not progress):
        eps, gts = make_episodes(cfg.base, "task", cfg.train_per_task, [t.scene], seed_offset=100 * t.index)
        env = make_env(cfg.base, t.condition, eps, gts)
        asker = FrameQuestions(asking, asking.seed * 7919 + 2 + t.index) if cfg.cotrain else None
        try:
            samples = collect(env, range(len(eps)), agent_cfg, cfg.base.image_size, seed=t.index,
                              task_ids=(t.scene, t.env), keep_frames=True, teacher=cfg.base.teacher,
                              on_state=asker)
        finally:
            env.close()
        ev, egts = make_episodes(cfg.base, "task", cfg.eval_per_task, [t.scene], seed_offset=100 * t.index + 50)
        if not ev or not samples:
            raise ValueError(f"task {t.name}: no valid episodes could be sampled (min_distance "
                             f"{cfg.base.min_distance} .. max_distance {cfg.base.max_distance} m); widen the range")
        questions = []
        if asker is not None:
            questions = question_samples(asker.items(samples), cfg.base)
            if not questions:
                raise ValueError(f"task {t.name}: its frames name no visible objects to ask about (cotrain)")
        heldout = []
        if cfg.offline_samples:
            env = make_env(cfg.base, t.condition, ev, egts)
            try:
                heldout = collect(env, range(len(ev)), agent_cfg, cfg.base.image_size, seed=t.index,
                                  task_ids=(t.scene, t.env), teacher=cfg.base.teacher)
            finally:
                env.close()
            heldout = subsample(heldout, cfg.offline_samples, seed=t.index)
        out[t.index] = TaskData(t, samples, ev, egts, questions, heldout)
    return out


def evaluate_task(method: Any, cfg: LifelongConfig, data: TaskData, expected_route: tuple[int | None, int | None]
                  | None = None, oracle: bool = False) -> dict[str, Any]:
    """SR / SPL / OSR / NE (and routing accuracy for routed methods) of ``method`` on the task's held-out episodes,
    plus ``success``: each episode's outcome (0/1, in episode order), so that two methods on the same episodes can be
    compared pairwise; ``oracle``: with the task's own adapter/experts, chosen by its true id (no routing)."""
    from sim import metrics
    from sim.nav.evaluate import run_episode

    policy = method.oracle_policy(data.task) if oracle else method.policy(data.task)
    env = make_env(cfg.base, data.task.condition, data.eval_episodes, data.eval_gts)
    rows, routes = [], []
    try:
        for i in range(len(data.eval_episodes)):
            rows.append(run_episode(env, policy, i))
            if method.routed and expected_route is not None:
                routes.append(tuple(policy.route))
    finally:
        env.close()
    agg = metrics.aggregate(rows)
    out: dict[str, Any] = {k: float(agg[k]) for k in ("sr", "spl", "osr", "ne")}
    out["success"] = [int(r["sr"] > 0) for r in rows]
    if routes:
        out.update(routing_accuracy(routes, expected_route))
    return out


class _Fixed:
    """A policy that no task changes (the reference rows: the un-adapted base navigator, a blind baseline)."""

    routed = False

    def __init__(self, make_policy: Any) -> None:
        self.make_policy = make_policy

    def policy(self, task: Any) -> Any:
        return self.make_policy()


def evaluate_base(cfg: LifelongConfig, base_dir: Path, tasks: list[Task], data: dict[int, TaskData]
                  ) -> dict[str, dict[str, Any]]:
    """:func:`evaluate_task`'s figures for the un-adapted base navigator on every task's held-out episodes (and, with
    ``cfg.offline_samples``, its token accuracy and loss on their demonstrations)."""
    from agents.vlm.bundle import load_vlm
    from agents.vln.modeling_vln import AlldayWalkerPolicy
    from agents.vln.processor_vln import VLNProcessor
    from training.vln.offline import answer_metrics

    bundle, agent_cfg = load_vlm(Path(base_dir) / "vlm"), cfg.base.agent_config()
    frozen = _Fixed(lambda: AlldayWalkerPolicy(bundle, agent_cfg))
    out = {t.name: evaluate_task(frozen, cfg, data[t.index]) for t in tasks}
    if cfg.offline_samples:
        vproc = VLNProcessor(bundle.processor, bundle.family, bundle.image_size or cfg.base.image_size, agent_cfg)
        for t in tasks:
            out[t.name].update(answer_metrics(bundle.model, vproc, data[t.index].heldout))
    return out


def evaluate_blind(cfg: LifelongConfig, tasks: list[Task], data: dict[int, TaskData]) -> dict[str, dict[str, Any]]:
    """The same metrics for VLN-CE's blind baseline, ``blind_forward_steps`` forward moves then stop: the floor a
    navigator must beat for its SR to come from what it sees and reads."""
    from agents.core.baselines import ForwardPolicy

    blind = _Fixed(lambda: ForwardPolicy(cfg.blind_forward_steps))
    return {t.name: evaluate_task(blind, cfg, data[t.index]) for t in tasks}


def resume_identity(name: str, cfg: LifelongConfig, tasks: list[Task], unseen: list[Task]) -> dict[str, Any]:
    """What a resumed run of method ``name`` must share with the run that saved its progress: every setting but
    ``methods``, the task order, the unseen pairs and the CPU numerics (:func:`agents.core.numerics.numerics_key`)."""
    from agents.core.numerics import numerics_key

    config = {k: v for k, v in cfg.to_dict().items() if k != "methods"}
    config["unseen"] = [u.name for u in unseen]
    config["numerics"] = numerics_key()
    return {"name": name, "config": config, "tasks": [t.name for t in tasks]}


def _mean_or_none(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def run_method(name: str, cfg: LifelongConfig, base_dir: Path, tasks: list[Task], unseen: list[Task],
               data: dict[int, TaskData], progress: bool = False, export_dir: Path | None = None,
               progress_file: Path | None = None) -> dict[str, Any]:
    """Train ``name`` through the sequence; returns the metric matrices, final/unseen metrics and forgetting.
    ``export_dir``: routed methods also write a servable checkpoint there and check it against the live model.
    ``progress_file``: the method's state is saved there after every task and replaced by the result alone at the
    end; a run given an existing file goes on after its last saved task, or returns the saved result (same config
    and task order, else :class:`ResumeError`)."""
    import torch

    from agents.vlm.bundle import load_vlm
    from agents.vln.processor_vln import VLNProcessor
    from training.vln.offline import answer_metrics, offline_matrices, summarise
    from training.vln.resume import load_progress, save_progress

    t0 = time.time()
    T = len(tasks)
    agent_cfg = cfg.agent_config()
    run_id = resume_identity(name, cfg, tasks, unseen)
    state = load_progress(progress_file, **run_id) if progress_file is not None else None
    if state is None:
        torch.manual_seed(cfg.base.seed)
        method = METHODS.get(name)(load_vlm(Path(base_dir) / "vlm"), agent_cfg, cfg.settings())
        mats = {k: np.full((T, T), np.nan) for k in ("sr", "spl", "osr")}
        offline, start, t0_done = offline_matrices(T), 0, 0.0
    elif state.get("result") is not None:
        log.info("%s: finished in an earlier run, result taken from %s", name, progress_file)
        return state["result"]
    else:
        method, mats, offline, start = state["method"], state["mats"], state["offline"], state["done"]
        torch.set_rng_state(state["torch_rng"])
        t0_done = state["elapsed"]
    bundle = method.bundle
    vproc = VLNProcessor(bundle.processor, bundle.family, bundle.image_size or cfg.base.image_size, agent_cfg)
    routing: dict[str, dict[str, list[float]]] = {part: {key: [] for key in ROUTING_KEYS}
                                                  for part in ("seen", "unseen")}
    final_success: list[list[int]] = []  # per task, each held-out episode's outcome after the last task
    for k in tqdm(range(start, T), desc=name, disable=not progress, initial=start, total=T):
        task = tasks[k]
        d = data[task.index]
        feats = routing_features(method.bundle, method.agent_cfg, d.samples, cfg.routing_memory) \
            if method.routed else None
        if method.routed:
            method.start_task(task, feats)
        else:
            method.start_task(task)
        trainer = Imitation(method.model, vproc, lr=cfg.lr, batch_size=cfg.batch_size, seed=cfg.base.seed + k)
        trainer.run(d.samples, cfg.steps_per_task, penalty=method.penalty, desc=f"{name} {task.name}",
                    cotrain=d.questions, cotrain_fraction=cfg.cotrain)
        rng = np.random.default_rng(k)
        fisher = [make_batch(vproc, [d.samples[i] for i in rng.choice(len(d.samples), cfg.batch_size)])
                  for _ in range(cfg.fisher_batches)]
        method.end_task(task, fisher, feats)
        for j in range(k + 1) if cfg.full_matrix or k == T - 1 else [k]:
            t = tasks[j]
            exp = method.expert_of(t) if method.routed else None
            m = evaluate_task(method, cfg, data[t.index], exp)
            for key in mats:
                mats[key][k, j] = m[key]
            if k == T - 1:
                add_routing(routing["seen"], m)
                final_success.append(m["success"])
        if cfg.offline_samples:  # every learnt task, with its own adapter/experts
            for j in range(k + 1):
                method.select_task(tasks[j])
                for key, v in answer_metrics(method.model, vproc, data[tasks[j].index].heldout).items():
                    offline[key][k, j] = v
        log.info("%s after %s: SR on seen tasks %s", name, task.name, np.round(mats["sr"][k, :k + 1], 2).tolist())
        if progress_file is not None and k < T - 1:
            save_progress(progress_file, **run_id, done=k + 1, method=method, mats=mats, offline=offline,
                          elapsed=t0_done + time.time() - t0)
    unseen_m = []
    for u in unseen:
        exp = method.expert_of(u) if method.routed else None
        m = evaluate_task(method, cfg, data[u.index], exp)
        unseen_m.append(m)
        add_routing(routing["unseen"], m)
    final = {key: mats[key][T - 1].tolist() for key in mats}
    oracle_route = None
    if method.routed:  # the same episodes with each task's own experts: what routing costs
        rows = [evaluate_task(method, cfg, data[t.index], oracle=True) for t in tasks]
        oracle_route = {"final": {k: [r[k] for r in rows] for k in mats}}
        oracle_route["avg"] = {k: float(np.mean(v)) for k, v in oracle_route["final"].items()}
        if unseen:  # an unseen pair's own house and lighting experts, composed: composition apart from routing
            rows = [evaluate_task(method, cfg, data[u.index], oracle=True) for u in unseen]
            oracle_route["unseen"] = {k: float(np.mean([r[k] for r in rows])) for k in ("sr", "spl", "osr")}
            oracle_route["unseen_success"] = [r["success"] for r in rows]
    parity = None
    if export_dir is not None and method.routed:
        from training.vln.export import export_tuka_navigator, served_parity

        export_tuka_navigator(method.model, method.router, Path(base_dir) / "vlm", agent_cfg, export_dir)
        parity = served_parity(method, Path(export_dir), [d.samples for d in data.values()], vproc)
    result = {
        "served_parity": parity,
        "method": name, "matrices": {k: v.tolist() for k, v in mats.items()}, "final": final,
        "final_success": final_success, "unseen_success": [m["success"] for m in unseen_m],
        "avg": {k: float(np.mean(v)) for k, v in final.items()},
        "forgetting": {k: forgetting(mats[k]) for k in mats},
        "offline": summarise(offline) if cfg.offline_samples else None,
        "oracle_route": oracle_route,
        "unseen": {k: (float(np.mean([m[k] for m in unseen_m])) if unseen_m else None) for k in ("sr", "spl", "osr")},
        **{key: _mean_or_none(routing["seen"][key] + routing["unseen"][key]) for key in ROUTING_KEYS},
        **{f"{key}_{part}": _mean_or_none(v) for part, acc in routing.items() for key, v in acc.items()},
        "diagnostics": method.diagnostics(),
        "adapter_params": int(method.adapter_params()), "seconds": round(t0_done + time.time() - t0, 1),
    }
    if progress_file is not None:  # the result alone (a few KB): a resumed multi-method run skips this method
        save_progress(progress_file, **run_id, done=T, method=None, mats=mats, offline=offline,
                      elapsed=result["seconds"], result=result)
    return result


def forgetting(mat: np.ndarray) -> dict[str, Any]:
    """Relative (mean over t < T with X[t, t] > 0) and absolute forgetting of a (T x T) matrix."""
    T = mat.shape[0]
    rel, ab = [], []
    for t in range(T - 1):
        first, last = mat[t, t], mat[T - 1, t]
        ab.append(first - last)
        rel.append((first - last) / first if first > 0 else math.nan)
    valid = [r for r in rel if not math.isnan(r)]
    return {"relative": float(np.mean(valid)) if valid else None, "absolute": float(np.mean(ab)) if ab else None,
            "per_task": rel}
