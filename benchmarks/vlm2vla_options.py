"""Command-line options shared by ``vlm2vla.py`` and ``vlm2vla_frontier.py``, and the run settings built from them.

A run's settings are a copy of its mode's (``vlm2vla.MODES``) with the given options on top: the module-level modes
are never written, so one process can run with other options after a refused or a finished call.
"""

from __future__ import annotations

import argparse
from typing import Any

#: robosuite's cameras on the Lift scene with a Panda (the policy's view; the VQA scenes are agentview's, the spatial
#: questions' too unless ``--spatial-view policy``)
CAMERAS = ("agentview", "robot0_eye_in_hand", "frontview", "birdview", "sideview", "robot0_robotview")
#: ``--lora-targets`` -> peft ``target_modules`` ("" = the family's language-model-only regex)
LORA_TARGETS = {"lm": "", "all-linear": "all-linear"}
DEFAULT_PATCH = 16  # agents.vlm.config.TinyVLMConfig.patch_size
#: settings key -> argparse attribute; an option left out (None, or False for a flag) keeps the mode's value
OPTION_KEYS = (("ft_steps", "ft_steps"), ("ft_lr", "ft_lr"), ("ft_schedule", "ft_schedule"),
               ("grounding", "grounding"), ("spatial", "spatial_prior"), ("spatial_view", "spatial_view"),
               ("pre_steps", "pre_steps"),
               ("demos", "demos"), ("camera", "camera"), ("noise", "demo_noise"), ("lora_targets", "lora_targets"),
               ("replan", "replan"), ("replan_samples", "replan_samples"), ("verifier", "verifier"),
               ("disjoint_episodes", "disjoint_episodes"))


def add_pretraining_args(p: argparse.ArgumentParser) -> None:
    """The VQA pre-training options (settings keys ``spatial``, ``spatial_view``, ``pre_steps``,
    ``model["patch_size"]``)."""
    p.add_argument("--spatial-prior", nargs="?", const="language", choices=("language", "action_tokens"),
                   default=None,
                   help="pre-train on the spatial questions too (answers in the action language's numbers and "
                        "direction words: training.vla.vqa_scenes.SPATIAL_KINDS); 'action_tokens' writes the "
                        "offsets' digits as VLM2VLA-AT's rare tokens instead (the crossover control); when reusing "
                        "a pre-trained model, give what it was pre-trained with")
    p.add_argument("--pre-steps", type=int, default=None, help="VQA pre-training steps (default: the mode's)")
    p.add_argument("--spatial-view", choices=("agentview", "policy"), default=None,
                   help="the camera the spatial-prior questions are asked through: agentview, like the other "
                        "questions (default), or the policy's --camera (the wrist camera at the gripper's reset pose "
                        "sees the cube's offset as the policy's first frame does)")
    p.add_argument("--patch-size", type=int, default=None,
                   help="the tiny model's vision patch size in pixels (default 16: 16 image tokens at 64 px; 8 gives "
                        "64 tokens, a 4.2 cm cube about one patch wide)")


def add_finetune_args(p: argparse.ArgumentParser) -> None:
    """The fine-tuning and demonstration options (settings keys ``ft_*``, ``demos``, ``camera``, ``noise``,
    ``lora_targets``)."""
    p.add_argument("--ft-steps", type=int, default=None, help="LoRA fine-tuning steps (default: the mode's)")
    p.add_argument("--ft-lr", type=float, default=None, help="LoRA fine-tuning learning rate (default: the mode's)")
    p.add_argument("--ft-schedule", choices=("linear", "cosine", "constant"), default=None,
                   help="LoRA learning-rate schedule (default: the mode's)")
    p.add_argument("--lora-targets", choices=tuple(LORA_TARGETS), default=None,
                   help="modules LoRA adapts in the fine-tune: the language model's linear layers (lm, the paper's "
                        "default) or every linear layer, vision tower and projector included (all-linear, "
                        "OpenVLA's choice)")
    p.add_argument("--demos", type=int, default=None, help="Lift demonstrations to fine-tune on (default: the mode's)")
    p.add_argument("--camera", choices=CAMERAS, default=None,
                   help="the policy's camera for the demonstrations and the rollouts (the VQA questions stay on "
                        "agentview scenes, except the spatial ones with --spatial-view policy; default: agentview)")
    p.add_argument("--demo-noise", type=float, default=None, metavar="M",
                   help="DART: sd (m) of Gaussian noise on the expert's executed steps while recording the "
                        "demonstrations (the labels stay the expert's; default 0)")


def settings(p: argparse.ArgumentParser, args: argparse.Namespace, mode: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``mode`` with the options ``args`` gives on top; bad values are usage errors (``p.error``)."""
    checks = (("demos", lambda v: v >= 1, "--demos must be >= 1"),
              ("ft_steps", lambda v: v >= 1, "--ft-steps must be >= 1"),
              ("ft_lr", lambda v: v > 0, "--ft-lr must be > 0"),
              ("pre_steps", lambda v: v >= 1, "--pre-steps must be >= 1"),
              ("demo_noise", lambda v: 0.0 <= v <= 0.05, "--demo-noise must be in [0, 0.05] m"),
              ("replan", lambda v: v >= 0, "--replan must be >= 0"),
              ("patch_size", lambda v: v >= 2 and mode["image"] % v == 0,
               f"--patch-size must divide the {mode['image']} px image"))
    for attr, ok, msg in checks:
        val = getattr(args, attr, None)
        if val is not None and not ok(val):
            p.error(f"{msg}, got {val}")
    if getattr(args, "spatial_view", None) == "policy":
        if not (args.spatial_prior or mode.get("spatial")):
            p.error("--spatial-view policy needs --spatial-prior")
        if (getattr(args, "camera", None) or mode["camera"]) == "agentview":
            p.error("--spatial-view policy needs a --camera other than agentview (the spatial questions already "
                    "are agentview's)")
    out = dict(mode)
    for key, attr in OPTION_KEYS:
        val = getattr(args, attr, None)
        if val is not None and val is not False:
            out[key] = val
    patch = getattr(args, "patch_size", None)
    if patch is not None and patch != mode["model"].get("patch_size", DEFAULT_PATCH):  # the default keeps the key
        out["model"] = {**mode["model"], "patch_size": patch}
    return out


def recorded(m: dict[str, Any]) -> dict[str, Any]:
    """The settings a results file records: all but the model's sizes, plus a patch size other than the default."""
    out = {k: v for k, v in m.items() if k != "model"}
    if m["model"].get("patch_size", DEFAULT_PATCH) != DEFAULT_PATCH:
        out["patch_size"] = m["model"]["patch_size"]
    return out
