"""``allday train vla --config configs/vla/<name>.yaml``: fine-tune a VLM into a VLA policy.

Pipeline: data sources -> episodes -> relabeller -> language episodes -> codec samples -> LoRA (peft) training
-> ``<out>/policy`` (a VLA policy directory: peft adapter + base fingerprint + codec token map) that
:func:`agents.vla.load_policy` and the ROS ``vla_node`` load. Checkpoints go to ``<out>/checkpoints``,
TensorBoard logs to ``<out>/tb``; ``--resume`` continues from the newest checkpoint at the exact step.

Multi-GPU / multi-process: ``accelerate launch --multi_gpu --num_processes N -m training.vla.train --config ...``
(or ``torchrun --nproc_per_node N -m training.vla.train ...``); on CPU the trainer builds ``Accelerator(cpu=True)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from agents.core.io import atomic_dir, read_json_object, write_text
from training.config_io import add_override_argument
from training.vla.config import VLATrainConfig
from training.vla.trainer import LoopSettings, train_loop

log = logging.getLogger(__name__)


BASE_KEY = "allday_base_key.json"


def build_base(cfg: VLATrainConfig, out: Path, corpus: list[str], resume: bool = False) -> Path:
    """The base checkpoint directory: ``cfg.model``, or a tiny model built into ``out/base`` (once per family,
    image size, seed and tokenizer corpus; written atomically). A base built with other settings is rebuilt, or,
    when resuming, refused: the checkpoint's adapter was trained on the old one."""
    if cfg.model != "tiny":
        return Path(cfg.model)
    from agents.vlm import build_tiny_vlm

    base = out / "base"
    vocab = sorted(set(corpus))
    key = {"family": cfg.tiny_family, "image_size": cfg.tiny_image_size, "seed": cfg.seed,
           "corpus": hashlib.sha256("\n".join(vocab).encode()).hexdigest()[:16]}
    if base.is_dir():
        try:
            old = read_json_object(base / BASE_KEY)
        except (OSError, ValueError):
            old = None
        if old == key:
            return base
        if resume and old is None and (base / "config.json").is_file():
            log.warning("%s predates base keys; resuming on it unchecked", base)
            return base
        if resume:
            raise ValueError(f"{base} was built with other settings ({old}) than this config's ({key}); resuming "
                             "would continue an adapter on another base: give another out_dir or drop --resume")
        log.info("rebuilding %s (built with %s, this config needs %s)", base, old, key)
    with atomic_dir(base) as tmp:
        build_tiny_vlm(tmp, family=cfg.tiny_family, image_size=cfg.tiny_image_size, corpus=vocab, seed=cfg.seed,
                       overwrite=True)
        write_text(tmp / BASE_KEY, json.dumps(key))
    return base


def add_lora(bundle: Any, r: int = 16, alpha: float = 32.0, dropout: float = 0.0, targets: str = "") -> Any:
    """Wrap ``bundle.model`` in a peft LoRA model; ``targets`` "" = all linear layers of the language model only
    (:func:`agents.vlm.lora_target_regex`)."""
    from peft import LoraConfig, get_peft_model

    from agents.vlm import lora_target_regex

    target = targets or lora_target_regex(bundle.family)
    lcfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target, bias="none")
    model = get_peft_model(bundle.model, lcfg)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if n_train == 0:
        raise ValueError(f"lora_targets {target!r} matched no module of the model")
    bad = [n for n, p in model.named_parameters() if p.requires_grad and "language_model" not in n]
    if bad and not targets:
        raise RuntimeError(f"LoRA adapted modules outside the language model: {bad[:3]}")
    log.info("LoRA r=%d alpha=%g on %s: %d trainable parameters", r, alpha, target, n_train)
    bundle.model = model
    return bundle


def fit(bundle: Any, samples: list[Any], settings: LoopSettings, resume: bool = False, progress: bool = True,
        save_final: Any = None, max_length: int | None = None, callback: Any = None) -> dict[str, Any]:
    """Train ``bundle.model``'s trainable parameters on ``samples`` (:class:`~training.vla.samples.Sample`);
    the examples are tokenised once. ``bundle.model`` is the trained (unwrapped) model afterwards."""
    from agents.vlm import collate, training_example

    examples = [training_example(bundle, s.image, s.prompt, s.target) for s in samples]
    longest = max(int(e["input_ids"].shape[0]) for e in examples)
    if max_length is not None and longest > max_length:
        raise ValueError(f"a sample has {longest} tokens > max_length {max_length}; raise max_length")
    res = train_loop(bundle.model, list(range(len(samples))), lambda idx: collate(bundle, [examples[i] for i in idx]),
                     settings, resume=resume, progress=progress, save_final=save_final, callback=callback)
    bundle.model = res.pop("model")
    bundle.model.eval()
    return res


def load_episodes_for(cfg: VLATrainConfig) -> list[Any]:
    from training.vla.data import load_source

    episodes = [ep for spec in cfg.data for ep in load_source(spec)]
    if not episodes:
        raise ValueError("the data sources produced no episodes")
    return episodes


def training_camera(episodes: list[Any]) -> str:
    """The one camera the episodes were recorded through (their ``meta["camera"]``), "" when unknown or mixed."""
    cams = {str(ep.meta.get("camera", "")) for ep in episodes}
    if len(cams) > 1:
        log.warning("the episodes come from several cameras %s: the policy records none", sorted(cams))
    return cams.pop() if len(cams) == 1 else ""


def run_training(cfg: VLATrainConfig, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run one training job (see the module docstring); returns a summary dict (also ``<out>/summary.json``)."""
    from agents.vla.codecs import make_codec
    from agents.vlm import load_vlm
    from training.vla.relabel import make_relabeller
    from training.vla.samples import build_samples, sample_corpus

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    from accelerate import PartialState

    state = PartialState(cpu=_use_cpu(cfg.device))
    with state.main_process_first():  # the main process records/caches demos and builds a tiny base first
        episodes = load_episodes_for(cfg)
        lang = make_relabeller(cfg.relabeller).relabel_all(episodes)
        base = build_base(cfg, out, sample_corpus(lang), resume=resume)
    bundle = load_vlm(base)
    codec = make_codec(cfg.codec, bundle.tokenizer)
    samples = build_samples(lang, codec, cfg.aux_samples, cfg.replan_samples)
    add_lora(bundle, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_targets)

    camera = training_camera(episodes)

    def save_final(model: Any, out_dir: Path, step: int) -> None:
        from agents.vla import VLAPolicy, VLAPolicyConfig, save_policy

        bundle.model = model
        save_policy(VLAPolicy(bundle, VLAPolicyConfig(codec=cfg.codec, camera=camera), codec=codec),
                    out_dir / "policy")

    res = fit(bundle, samples, LoopSettings.from_config(cfg), resume=resume, progress=progress,
              save_final=save_final, max_length=cfg.max_length)
    summary = {"out_dir": str(out), "policy": str(out / "policy"), "base": str(base), "codec": cfg.codec,
               "episodes": len(episodes), "samples": len(samples), "steps": res["steps"],
               "first_loss": res["first_loss"],
               "last_loss": res["last_loss"], "seconds": round(res["seconds"], 2), "processes": res["processes"],
               "resumed_from": res["resumed_from"]}
    if state.is_main_process:
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _use_cpu(device: str) -> bool:
    import torch

    return device == "cpu" or (device == "auto" and not torch.cuda.is_available())


def run_from_args(args: argparse.Namespace) -> int:
    """Entry point of ``allday train vla`` (``args.config``, ``args.out``, ``args.resume``, ``args.overrides``,
    ``args.quiet``)."""
    overrides = list(getattr(args, "overrides", None) or [])
    if getattr(args, "out", None):
        overrides.append(f"out_dir={args.out}")
    cfg = VLATrainConfig.from_yaml(args.config, overrides)
    summary = run_training(cfg, resume=bool(getattr(args, "resume", False)), progress=not getattr(args, "quiet", False))
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(summary, sort_keys=True), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m training.vla.train --config ...`` (for ``accelerate launch`` / ``torchrun``)."""
    p = argparse.ArgumentParser(prog="python -m training.vla.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="YAML config (configs/vla/*.yaml)")
    p.add_argument("--out", default=None, help="output directory (overrides the config's out_dir)")
    p.add_argument("--resume", action="store_true", help="resume from the newest checkpoint in the output directory")
    add_override_argument(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_from_args(args)


if __name__ == "__main__":
    sys.exit(main())
