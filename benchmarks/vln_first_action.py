#!/usr/bin/env python
"""Does a trained navigator use what it sees? First-action accuracy on held-out teacher states, split by view.

For a run of ``allday train vln`` (``--run DIR``: its model and the config saved in ``metrics.json``), the
shortest-path follower drives the config's held-out episodes; at every state the navigator sees what it would see
(frames, instruction, past actions as its config says) and its greedy first action word is compared with the
teacher's. States are split by whether the goal point lies inside the camera's horizontal field of view: with the
goal in view the right action follows from the image; out of view it follows only from the instruction and the
history. Each split is reported against its majority action (what a blind policy could score) and against the
best policy that knows only where the goal object is in the frame (``best_given_goal_word``: per goal word of
``agents.vln.actions.GOAL_WORDS``, from segmentation, the teacher's most common first action).

``--config YAML [--set key=value ...]`` instead of ``--run``: the teacher alone (no navigator): its SPL on the held-out
episodes and the same splits without accuracy, e.g. to compare ``--set teacher=sightline`` with the default.

``--quick``: an untrained tiny backbone on two held-out episodes, a smoke run of the measurement (< 1 minute).
Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
log = logging.getLogger("vln_first_action")


def goal_bearing_deg(env: Any) -> float:
    """Angle from the camera's heading to the episode's goal point, degrees in (-180, 180], CCW positive."""
    from sim.core.frames import habitat_to_mj, theta_to_phi

    x, y, _ = habitat_to_mj(env.pose.position)
    gx, gy, _ = habitat_to_mj(env.episode.goals[0].position)
    d = math.atan2(gy - y, gx - x) - theta_to_phi(env.pose.heading)
    return math.degrees(math.atan2(math.sin(d), math.cos(d)))


def teacher_states(cfg: Any, episodes: int | None = None, progress: bool = False,
                   min_pixels: int = 12) -> tuple[list[Any], list[bool], list[bool], list[str]]:
    """Samples of the follower's held-out rollouts (``training.vln.data.collect``) and, per sample, whether the goal
    point was in the field of view, whether the goal object was visible (>= ``min_pixels`` of it in the frame,
    by segmentation) and where it is in the frame (its goal word)."""
    from training.vln.data import collect, goal_location
    from training.vln.navigator import make_env, make_episodes

    eps, gts = make_episodes(cfg, "eval")
    eps = eps[:episodes] if episodes else eps
    env = make_env(cfg, "normal", eps, gts)
    half_fov = env.config.hfov_deg / 2
    in_view: list[bool] = []
    visible: list[bool] = []
    words: list[str] = []

    def on_state(e: Any) -> None:
        in_view.append(abs(goal_bearing_deg(e)) < half_fov)
        mask = e.item_masks().get(e.goal_item())
        visible.append(mask is not None and int(mask.sum()) >= min_pixels)
        words.append(goal_location(e))

    try:
        samples = collect(env, range(len(eps)), cfg.agent_config(), cfg.image_size, progress=progress,
                          on_state=on_state, teacher=cfg.teacher)
    finally:
        env.close()
    return samples, in_view, visible, words


def teacher_spl(cfg: Any, episodes: int | None = None) -> dict[str, float]:
    """SR / SPL of the config's teacher driving its held-out episodes (normal light)."""
    from agents.core.policy import Policy
    from sim import metrics
    from sim.nav.evaluate import run_episode
    from training.vln.data import teacher_actions
    from training.vln.navigator import make_env, make_episodes

    eps, gts = make_episodes(cfg, "eval")
    eps = eps[:episodes] if episodes else eps
    env = make_env(cfg, "normal", eps, gts)

    class Teacher(Policy):
        name = cfg.teacher

        def act(self, observation: Any) -> Any:
            return teacher_actions(env, 1, cfg.teacher)[0]

    try:
        agg = metrics.aggregate([run_episode(env, Teacher(), i) for i in range(len(eps))])
    finally:
        env.close()
    return {k: round(float(agg[k]), 3) for k in ("sr", "spl")}


def teacher_first(sample: Any) -> str:
    """The teacher's first action word of a sample (after the goal word of a ``goal_prefix`` answer)."""
    from agents.vln.actions import split_goal

    return split_goal(sample.target)[1].split()[0]


def generated_first_actions(bundle: Any, cfg: Any, samples: list[Any], batch_size: int = 32
                            ) -> list[tuple[str | None, str | None]]:
    """Per sample: the goal word and first action word of the navigator's greedy answer (None where absent)."""
    from agents.vln.actions import ACTION_WORDS, ActionParseError, parse_with_fallback, split_goal
    from agents.vln.modeling_vln import AlldayWalkerPolicy

    policy = AlldayWalkerPolicy(bundle, cfg.agent_config())
    out: list[tuple[str | None, str | None]] = []
    for i in range(0, len(samples), batch_size):
        chunk = samples[i:i + batch_size]
        for t in policy.generate([s.image for s in chunk], [s.prompt for s in chunk]):
            goal, rest = split_goal(t)
            try:
                first = ACTION_WORDS[parse_with_fallback(rest, policy.config.num_future_steps, fallback=None)[0][0]]
            except ActionParseError:
                first = None
            out.append((goal, first))
    return out


def first_action_hits(bundle: Any, cfg: Any, samples: list[Any], batch_size: int = 32
                      ) -> tuple[list[bool], list[str | None] | None]:
    """Per sample: is the navigator's first action the teacher's? The arg-max first answer token, or for
    ``goal_prefix`` navigators the first action of the greedy answer (after the model's own goal word). Second:
    the goal words the navigator wrote (``goal_prefix`` only, else None)."""
    import torch

    if cfg.agent_config().goal_prefix:
        firsts = generated_first_actions(bundle, cfg, samples, batch_size)
        return [f[1] == teacher_first(s) for f, s in zip(firsts, samples)], [f[0] for f in firsts]

    from agents.vln.processor_vln import VLNProcessor
    from training.vln.trainer import make_batch

    vproc = VLNProcessor(bundle.processor, bundle.family, bundle.image_size or cfg.image_size, cfg.agent_config())
    hits: list[bool] = []
    bundle.model.eval()
    with torch.no_grad():
        for i in range(0, len(samples), batch_size):
            chunk = samples[i:i + batch_size]
            batch = make_batch(vproc, chunk)
            labels = batch.pop("labels")
            logits = bundle.model(**batch).logits
            for r in range(len(chunk)):
                pos = int((labels[r] != -100).nonzero()[0])
                hits.append(bool(logits[r, pos - 1].argmax() == labels[r, pos]))
    return hits, None


def split_report(samples: list[Any], hits: list[bool] | None, in_view: list[bool],
                 visible: list[bool] | None = None, goal_words: list[str] | None = None,
                 said: list[str | None] | None = None) -> dict[str, Any]:
    """Accuracy (``hits``; None: teacher only), majority-action accuracy and teacher action counts, overall and per
    view split (goal point in the field of view; with ``visible``, also goal object visible or not); with
    ``goal_words`` (where the goal object is, by segmentation), the accuracy of the best policy that knows only the
    goal word, and with ``said`` (the navigator's own goal words) how often it names the right one."""
    out: dict[str, Any] = {}
    splits = [("all", in_view, lambda v: True), ("goal_in_view", in_view, bool),
              ("goal_out_of_view", in_view, lambda v: not v)]
    if visible is not None:
        splits += [("object_visible", visible, bool), ("object_hidden", visible, lambda v: not v)]
    for name, flags, keep in splits:
        idx = [k for k, v in enumerate(flags) if keep(v)]
        if not idx:
            out[name] = {"states": 0}
            continue
        counts = Counter(teacher_first(samples[k]) for k in idx)
        out[name] = {"states": len(idx), "majority": round(max(counts.values()) / len(idx), 3),
                     "teacher": dict(counts)}
        if hits is not None:
            out[name]["accuracy"] = round(sum(hits[k] for k in idx) / len(idx), 3)
        if goal_words is not None:
            by_word = Counter((goal_words[k], teacher_first(samples[k])) for k in idx)
            best = {w: max(c for (w2, _), c in by_word.items() if w2 == w) for w, _ in by_word}
            out[name]["best_given_goal_word"] = round(sum(best.values()) / len(idx), 3)
            if said is not None:
                out[name]["goal_word_accuracy"] = round(sum(said[k] == goal_words[k] for k in idx) / len(idx), 3)
                out[name]["goal_words_said"] = dict(Counter(str(said[k]) for k in idx))
    return out


def scene_question_report(bundle: Any, cfg: Any) -> dict[str, Any]:
    """Held-out scene questions (``training.vln.scene_grounding``, default settings) answered by the model: does it
    still say where a named object is?"""
    from agents.vlm import training_example
    from training.vlm.grounding import answer_hits
    from training.vln.scene_grounding import SceneGroundingConfig, make_scene_set, report

    held = make_scene_set(cfg, "eval", SceneGroundingConfig())
    return report(held, answer_hits(bundle, [training_example(bundle, im, q, a) for im, q, a, _ in held], 32))


def load_run(run: Path) -> tuple[Any, Path]:
    """(config, VLM directory) of a finished navigator: an ``allday train vln`` output or a base-navigator cache entry
    (``metrics.json`` with the config, and ``final/vlm`` or ``checkpoint/model``); ValueError naming what is
    missing."""
    from training.vln.config import VLNTrainConfig
    from training.vln.navigator import checkpoint_dir

    metrics = run / "metrics.json"
    model = next((p for p in (run / "final" / "vlm", checkpoint_dir(run) / "model") if (p / "config.json").is_file()),
                 None)
    if not metrics.is_file() or model is None:
        raise ValueError(f"{run} is not a finished `allday train vln` run or base-navigator cache entry (needs "
                         "metrics.json and final/vlm or checkpoint/model)")
    try:
        return VLNTrainConfig.from_dict(json.loads(metrics.read_text())["config"]), model
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{metrics}: no readable config ({exc})") from exc


def quick_backbone(tmp: Path) -> tuple[Any, Path]:
    """The ``--quick`` set-up: a one-house config with two short held-out episodes, and an untrained tiny backbone
    built under ``tmp``."""
    from training.vln.config import VLNTrainConfig
    from training.vln.navigator import build_backbone

    cfg = VLNTrainConfig(n_scenes=1, episodes_per_scene=1, eval_per_scene=2, same_room=True, min_distance=1.0,
                         max_distance=3.0, max_steps=12, agent={"num_history": 0, "num_future_steps": 4})
    return cfg, build_backbone(cfg, tmp / "backbone", ["go to the sofa"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--run", default=None, help="an `allday train vln` output directory (model/ + metrics.json)")
    p.add_argument("--config", default=None, help="a VLN config YAML: measure its teacher only (no navigator)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a --config key")
    p.add_argument("--quick", action="store_true", help="untrained tiny backbone, 2 held-out episodes (smoke run)")
    p.add_argument("--episodes", type=int, default=0, help="use only the first N held-out episodes (0 = all)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    p.add_argument("--scene", action="store_true",
                   help="also ask the navigator 'where is the <object>?' on the held-out frames")
    p.add_argument("--progress", action="store_true", help="show progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="log progress")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(message)s")
    if sum(map(bool, (a.quick, a.run, a.config))) != 1:
        p.error("give one of --run DIR (a trained navigator), --config YAML (the teacher only) or --quick")
    if a.set and not a.config:
        p.error("--set overrides --config keys; give --config")
    if a.episodes < 0:
        p.error("--episodes must be >= 0")
    import torch

    from agents.vlm.bundle import load_vlm
    from training.vln.config import VLNTrainConfig

    if a.threads:
        torch.set_num_threads(a.threads)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="vln_first_action_") as tmp:
        if a.quick:
            cfg, model_dir = quick_backbone(Path(tmp))
            episodes = 2
        elif a.config:
            try:
                cfg = VLNTrainConfig.from_yaml(a.config, a.set)
            except (OSError, ValueError, TypeError) as exc:
                p.error(f"--config {a.config}: {exc}")
            model_dir, episodes = None, a.episodes or None
        else:
            try:
                cfg, model_dir = load_run(Path(a.run))
            except ValueError as exc:
                p.error(str(exc))
            episodes = a.episodes or None
        samples, in_view, visible, words = teacher_states(cfg, episodes, a.progress)
        if model_dir is None:
            report = {"teacher": cfg.teacher, "teacher_metrics": teacher_spl(cfg, episodes),
                      **split_report(samples, None, in_view, visible, words)}
        else:
            bundle = load_vlm(model_dir)
            hits, said = first_action_hits(bundle, cfg, samples)
            report = split_report(samples, hits, in_view, visible, words, said)
            if a.scene:
                report["scene_questions"] = scene_question_report(bundle, cfg)
    for name, r in report.items():
        log.info("%s: %s", name, r)
    mode = "quick" if a.quick else ("teacher" if a.config else "run")
    print(json.dumps({"benchmark": "vln_first_action", "mode": mode,
                      "run": a.run or a.config, "seconds": round(time.time() - t0, 1), **report}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
