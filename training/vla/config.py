"""``VLATrainConfig``: one VLA fine-tuning run, loaded from YAML (``configs/vla/*.yaml``) and validated.

Defaults follow the VLM2VLA paper (``/work/shared/methods/vlm2vla.md``): LoRA r 16, alpha 32 on all linear
layers of the language model; AdamW (0.9, 0.999, eps 1e-8), lr 5e-5 with linear decay, one epoch, global batch
8 (per-device batch 1 x grad-accum 2 x 4 GPUs), max sequence 1024.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from agents.core.config import check_ints, check_numbers, config_from_dict
from training.config_io import apply_overrides, read_yaml_mapping

MIXED_PRECISION = ("no", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class LoopSettings:
    """What the training loop needs (:func:`training.vla.trainer.train_loop`; also VQA pre-training), validated
    at construction. :class:`VLATrainConfig` extends it with the model, data and LoRA fields."""

    out_dir: str
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
        check_ints(self, {"warmup_steps": (0, 10**9), "batch_size": (1, 4096), "grad_accum": (1, 4096),
                           "max_steps": (0, 10**9), "max_length": (16, 1 << 20), "seed": (0, 2**31 - 1),
                           "log_every": (1, 10**9), "save_every": (1, 10**9), "keep_checkpoints": (1, 1000),
                           "num_threads": (0, 1024)})
        check_numbers(self, {"lr": (1e-9, 1.0), "weight_decay": (0.0, 10.0), "adam_eps": (1e-12, 1e-2),
                             "epochs": (1e-6, 1e6), "max_grad_norm": (0.0, 1e6)})
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

    @classmethod
    def from_config(cls, cfg: Any, out_dir: str | None = None) -> "LoopSettings":
        """The loop part of ``cfg`` (any object with these fields), optionally writing elsewhere."""
        kw = {f.name: getattr(cfg, f.name) for f in fields(cls) if f.name != "out_dir"}
        return cls(out_dir=out_dir or cfg.out_dir, **kw)


@dataclass
class VLATrainConfig(LoopSettings):
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
    #: also train on rest-of-step targets from every frame (for policies served with ``replan_steps`` > 0)
    replan_samples: bool = False
    # LoRA (peft); lora_targets "" = the family's language-model-only regex (all linear layers)
    lora_r: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    lora_targets: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
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
        for name in ("aux_samples", "replan_samples"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        check_ints(self, {"lora_r": (1, 1024), "tiny_image_size": (16, 1024)})
        check_numbers(self, {"lora_alpha": (1e-6, 1e6), "lora_dropout": (0.0, 0.9)})

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VLATrainConfig":
        return config_from_dict(cls, d)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> "VLATrainConfig":
        """Load ``path`` and apply ``overrides`` (``["key=value", ...]``, values parsed as YAML)."""
        return cls.from_dict(apply_overrides(read_yaml_mapping(path, "VLA config"), overrides or []))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["adam_betas"] = list(self.adam_betas)
        return d


def _codec_names() -> list[str]:
    from agents.vla.codecs import CODECS

    return CODECS.names()
