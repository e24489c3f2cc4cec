"""``VLATrainConfig``: one VLA fine-tuning run, loaded from YAML (``configs/vla/*.yaml``) and validated.

Defaults follow the VLM2VLA paper (``/work/shared/methods/vlm2vla.md``): LoRA r 16, alpha 32 on all linear
layers of the language model; AdamW (0.9, 0.999, eps 1e-8), lr 5e-5 with linear decay, one epoch, global batch
8 (per-device batch 1 x grad-accum 2 x 4 GPUs), max sequence 1024.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

MIXED_PRECISION = ("no", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class VLATrainConfig:
    """A VLA training run. ``model``: a VLM checkpoint directory, or ``"tiny"`` to build a tiny random-weight
    model of ``tiny_family`` into ``<out_dir>/base`` (tests, CPU demos). ``data``: data-source specs
    (:data:`training.vla.data.SOURCES`). ``codec``: the action codec (:data:`agents.vla.codecs.CODECS`:
    ``language`` = VLM2VLA, ``action_tokens`` = VLM2VLA-AT, ``binned`` = OpenVLA-style bins).
    ``max_steps`` > 0 caps optimizer steps (otherwise ``epochs`` decide)."""

    out_dir: str = "runs/vla/default"
    model: str = "tiny"
    tiny_family: str = "paligemma"
    tiny_image_size: int = 64
    codec: str = "language"
    data: list[dict[str, Any]] = field(default_factory=lambda: [
        {"source": "robosuite", "tasks": ["lift"], "episodes": 4, "image_size": 64}])
    relabeller: str = "scripted"
    aux_samples: bool = True
    # LoRA (peft); lora_targets "" = the family's language-model-only regex (all linear layers)
    lora_r: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    lora_targets: str = ""
    # optimisation
    lr: float = 5e-5
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    schedule: str = "linear"
    warmup_steps: int = 0
    batch_size: int = 1
    grad_accum: int = 2
    epochs: float = 1.0
    max_steps: int = 0
    max_length: int = 1024
    max_grad_norm: float = 1.0
    # bookkeeping
    seed: int = 0
    log_every: int = 10
    save_every: int = 100
    keep_checkpoints: int = 2
    device: str = "auto"
    mixed_precision: str = "no"
    #: torch CPU threads (0: torch's default); 1 is much faster on a small, shared CPU
    num_threads: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.out_dir, str) or not self.out_dir:
            raise ValueError(f"out_dir must be a non-empty path string, got {self.out_dir!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be a checkpoint directory or 'tiny', got {self.model!r}")
        if self.codec not in _codec_names():
            raise ValueError(f"codec must be one of {_codec_names()}, got {self.codec!r}")
        from training.vla.relabel import RELABELLERS

        if self.relabeller not in RELABELLERS:
            raise ValueError(f"relabeller must be one of {RELABELLERS.names()}, got {self.relabeller!r}")
        if not isinstance(self.data, list) or not self.data or not all(
                isinstance(d, dict) and "source" in d for d in self.data):
            raise ValueError(f"data must be a non-empty list of mappings with a 'source' key, got {self.data!r}")
        ints = {"lora_r": (1, 1024), "warmup_steps": (0, 10**9), "batch_size": (1, 4096), "grad_accum": (1, 4096),
                "max_steps": (0, 10**9), "max_length": (16, 1 << 20), "seed": (0, 2**31 - 1),
                "log_every": (1, 10**9), "save_every": (1, 10**9), "keep_checkpoints": (1, 1000),
                "tiny_image_size": (16, 1024), "num_threads": (0, 1024)}
        for name, (lo, hi) in ints.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an int in [{lo}, {hi}], got {v!r}")
        floats = {"lora_alpha": (1e-6, 1e6), "lora_dropout": (0.0, 0.9), "lr": (1e-9, 1.0),
                  "weight_decay": (0.0, 10.0), "adam_eps": (1e-12, 1e-2), "epochs": (1e-6, 1e6),
                  "max_grad_norm": (0.0, 1e6)}
        for name, (lo, hi) in floats.items():
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
                raise ValueError(f"{name} must be a number in [{lo}, {hi}], got {v!r}")
        b = tuple(self.adam_betas)
        if len(b) != 2 or not all(isinstance(x, (int, float)) and 0.0 <= x < 1.0 for x in b):
            raise ValueError(f"adam_betas must be two numbers in [0, 1), got {self.adam_betas!r}")
        self.adam_betas = (float(b[0]), float(b[1]))
        if self.schedule not in ("linear", "constant", "cosine"):
            raise ValueError(f"schedule must be linear, constant or cosine, got {self.schedule!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.mixed_precision not in MIXED_PRECISION:
            raise ValueError(f"mixed_precision must be one of {MIXED_PRECISION}, got {self.mixed_precision!r}")

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VLATrainConfig":
        if not isinstance(d, dict):
            raise ValueError(f"a VLA config must be a mapping, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown VLATrainConfig keys {unknown}; known: {sorted(known)}")
        return cls(**d)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> "VLATrainConfig":
        """Load ``path`` and apply ``overrides`` (``["key=value", ...]``, values parsed as YAML)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no VLA config at {path}")
        try:
            d = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML ({exc})") from exc
        if not isinstance(d, dict):
            raise ValueError(f"{path}: a VLA config must be a YAML mapping")
        return cls.from_dict(apply_overrides(d, overrides or []))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["adam_betas"] = list(self.adam_betas)
        return d


def apply_overrides(d: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``["lr=1e-4", "data=[...]"]`` applied to a config dict (values parsed as YAML)."""
    out = dict(d)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"override must look like KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ValueError(f"override {item!r}: value is not valid YAML ({exc})") from exc
    return out


def _codec_names() -> list[str]:
    from agents.vla.codecs import CODECS

    return CODECS.names()
