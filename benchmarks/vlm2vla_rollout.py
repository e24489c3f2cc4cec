"""The closed loop's options of ``vlm2vla.py``; rolling an earlier run's models out again (``--reuse-from DIR``) on
episodes no other draw shares (``--disjoint-episodes``).

A *draw* of the benchmark varies the VQA scenes, the pre-trained model and the fine-tune, but by default its held-out
Lift episodes (seeds ``10000 + seed`` upwards) overlap those of the neighbouring draws in all but a few seeds.
``--disjoint-episodes`` gives draw ``seed`` its own block, ``20000 + seed * episodes`` upwards, so the spread over
draws is a spread over episodes too; ``--reuse-from`` copies an earlier run's pre-trained model and finished
fine-tunes into the new ``--out`` (the earlier run is left as it is) and resumes each fine-tune at its last step,
so the same models meet new episodes without training again.
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path
from typing import Any

from vlm2vla_options import recorded

log = logging.getLogger("vlm2vla")

DEFAULT_EPISODE_SEED = 10_000  # + seed: the held-out Lift episodes of a run (the demonstrations use seed upwards)
DISJOINT_EPISODE_SEED = 20_000  # + seed * episodes with --disjoint-episodes
#: settings that change only the closed loop: a reused fine-tune may differ from its earlier run in these alone
ROLLOUT_KEYS = ("episodes", "max_steps", "verifier", "disjoint_episodes")
#: what a reused fine-tune carries over from the earlier run's record of it
TRAINING_FIGURES = ("samples", "first_loss", "last_loss", "train_s")


def add_rollout_args(p: argparse.ArgumentParser) -> None:
    """The closed-loop options (settings keys ``replan``, ``replan_samples``, ``verifier``, ``disjoint_episodes``)
    and ``--reuse-from``."""
    p.add_argument("--replan", type=int, default=None, metavar="K",
                   help="receding horizon: the hierarchical policies (VLM2VLA, VLM2VLA-AT; the binned one has no "
                        "chunks to re-plan) plan their subtask again after every K control steps of a chunk, and are "
                        "fine-tuned on rest-of-step targets from every frame (default 0: each chunk runs to its end, "
                        "the paper's protocol)")
    p.add_argument("--replan-samples", action="store_true",
                   help="fine-tune on the rest-of-step targets from every frame without re-planning mid-chunk (what "
                        "a verifier's retry from a mid-step image asks for)")
    p.add_argument("--verifier", choices=("always_advance", "vlm", "sim_state"), default=None,
                   help="after each chunk: always advance (default), ask the policy's own VLM whether the subtask is "
                        "done (the paper's), or read the simulator state (privileged; a reference); a retry plans "
                        "the subtask again from the current image (at most 2 per subtask)")
    p.add_argument("--disjoint-episodes", action="store_true",
                   help="roll out on held-out Lift seeds 20000 + seed * episodes upwards, a block no other draw "
                        "(seed) shares, instead of 10000 + seed upwards, which neighbouring draws overlap")
    p.add_argument("--reuse-from", default=None, metavar="DIR",
                   help="an earlier run's --out: copy its pre-trained model and finished fine-tunes into --out and "
                        "roll them out again (with other rollout settings, e.g. --disjoint-episodes) without "
                        "training; every other setting must be the earlier run's")


def episode_seeds(m: dict[str, Any], seed: int) -> list[int]:
    """The held-out Lift seeds a run rolls out on; ``ValueError`` when they would meet the demonstrations' seeds
    (``seed`` up to ``seed + 3 * demos``: the recorder skips an expert's failures)."""
    n = int(m["episodes"])
    first = DISJOINT_EPISODE_SEED + seed * n if m.get("disjoint_episodes") else DEFAULT_EPISODE_SEED + seed
    if first < seed + 3 * int(m["demos"]) and seed < first + n:
        raise ValueError(f"held-out seeds {first}..{first + n - 1} meet the demonstrations' seeds {seed}.."
                         f"{seed + 3 * int(m['demos']) - 1}; use fewer --demos")
    return list(range(first, first + n))


def earlier_run(src: Path, mode: str, m: dict[str, Any], seed: int, methods: list[str]) -> dict[str, Any]:
    """The method -> training-figures record (and VQA accuracy) of the earlier run ``src`` (its ``--out``) for
    ``methods``; ``ValueError`` when it is not a finished run of this seed and these settings (rollout settings
    aside) or lacks a finished fine-tune of one of the methods."""
    from agents.core.config import differing_keys
    from agents.core.io import read_json_object

    root = src / mode
    try:
        res = read_json_object(root / "results.json", required=("seed", "settings", "methods"))
    except FileNotFoundError as exc:
        raise ValueError(f"{src} holds no finished {mode} run ({root / 'results.json'} is missing)") from exc
    if res["seed"] != seed:
        raise ValueError(f"{src} is the run of seed {res['seed']}, not {seed}")
    diff = differing_keys(res["settings"], recorded(m), ignore=ROLLOUT_KEYS)
    if diff:
        raise ValueError(f"{src} was trained with other settings ({', '.join(diff)}); give the settings it was "
                         "trained with (only the rollout settings may differ)")
    out = {}
    for method in methods:
        if method not in res["methods"]:
            raise ValueError(f"{src} has no fine-tune of {method} (it ran {sorted(res['methods'])})")
        out[method] = {k: res["methods"][method].get(k) for k in TRAINING_FIGURES}
        out[method]["vqa_accuracy"] = res["methods"][method]["vqa"]["accuracy"]
    return out


def adopt(src: Path, out: Path, mode: str, codecs: dict[str, str], steps: int) -> None:
    """Copy ``src``'s pre-trained model and the last checkpoint of each fine-tune in ``codecs`` into ``out``
    (``<out>`` is the run's ``<--out>/<mode>``); ``ValueError`` when a fine-tune did not reach ``steps``."""
    from training.vla.trainer import CKPT_PREFIX, latest_checkpoint

    root = src / mode
    if root.resolve() == out.resolve():
        raise ValueError("--reuse-from must be another run's --out than this run's (its results would be overwritten)")
    if not (out / "pretrained").exists():
        shutil.copytree(root / "pretrained", out / "pretrained")
    for codec in codecs.values():
        ck = latest_checkpoint(root / f"ft_{codec}")
        step = -1 if ck is None else int(ck.name[len(CKPT_PREFIX):])  # the trainer's step_<N> folders
        if step != steps:
            raise ValueError(f"{root / f'ft_{codec}'} holds no finished fine-tune of {steps} steps "
                             f"(last checkpoint: {ck.name if ck else 'none'})")
        dest = out / f"ft_{codec}" / "checkpoints" / ck.name
        if not dest.exists():
            shutil.copytree(ck, dest)
        log.info("reusing %s", ck)
