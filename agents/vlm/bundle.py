"""Build, load and describe VLM backbones: ``build_tiny_vlm``, ``load_vlm`` -> :class:`VLMBundle`.

Any checkpoint directory that ``AutoModelForImageTextToText`` loads and whose ``model_type`` belongs to a
registered family (:mod:`agents.vlm.families`) works: the tiny random-weight models written here for tests and
CPU demos, and real checkpoints (PaliGemma, Qwen2.5-VL) on GPU machines, through the same code.
A LoRA adapter directory (peft) can be applied on load; an adapter that does not fit the base is a clear error.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.core.io import read_json_object
from agents.vlm.config import TinyVLMConfig
from agents.vlm.families import FamilySpec, family_for_model_type, get_family

log = logging.getLogger(__name__)

#: written next to a tiny model (its TinyVLMConfig) and into adapter directories (the base fingerprint)
TINY_META = "allday_tiny_vlm.json"
ADAPTER_META = "allday_adapter.json"


class AdapterMismatchError(ValueError):
    """A LoRA adapter directory that does not belong to the base model it is applied to."""


@dataclass
class VLMBundle:
    """A loaded VLM: ``model`` (eval mode; a ``PeftModel`` when an adapter was applied), its ``processor``,
    the ``family`` name, the square ``image_size`` its processor produces (None: dynamic resolution), the
    checkpoint ``path`` and the ``adapter`` directory (or None)."""

    model: Any
    processor: Any
    family: str
    image_size: int | None
    path: Path
    adapter: Path | None = None

    @property
    def spec(self) -> FamilySpec:
        return get_family(self.family)

    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> Any:
        return next(self.model.parameters()).dtype

    def base_fingerprint(self) -> str:
        """A short hash of the base model's config and embedding weights (identifies the base of an adapter)."""
        return base_fingerprint(self.model)


def build_tiny_vlm(out_dir: str | Path, family: str = "paligemma", image_size: int = 64,
                   config: TinyVLMConfig | None = None, overwrite: bool = False, **overrides: Any) -> Path:
    """Write a tiny random-weight VLM (model + byte-level BPE tokenizer + processor) to ``out_dir``; offline.

    ``config`` gives all sizes; otherwise ``TinyVLMConfig(family=family, image_size=image_size, **overrides)``.
    An existing non-empty ``out_dir`` is an error unless ``overwrite``. Returns the directory.
    """
    cfg = config or TinyVLMConfig(family=family, image_size=image_size, **overrides)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ValueError(f"out_dir {out} is not empty (pass overwrite=True to replace the model in it)")
    out.mkdir(parents=True, exist_ok=True)
    get_family(cfg.family).build_tiny(cfg, out)
    (out / TINY_META).write_text(json.dumps(cfg.to_dict(), indent=1))
    return out


def _resolve_dtype(dtype: Any) -> Any:
    import torch

    if isinstance(dtype, str):
        try:
            dtype = getattr(torch, dtype)
        except AttributeError:
            raise ValueError(f"dtype must be a torch dtype name (float32, bfloat16, float16), got {dtype!r}") from None
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be torch.float32, bfloat16 or float16, got {dtype!r}")
    return dtype


def _image_size(processor: Any) -> int | None:
    ip = getattr(processor, "image_processor", None)
    size = getattr(ip, "size", None) or {}
    if "height" in size and size.get("height") == size.get("width"):
        return int(size["height"])
    if "shortest_edge" in size and size.get("shortest_edge") == size.get("longest_edge"):
        side = int(round(size["shortest_edge"] ** 0.5))
        return side if side * side == size["shortest_edge"] else None
    return None


def load_vlm(path: str | Path, dtype: Any = "float32", device: str = "cpu", adapter: str | Path | None = None,
             merge_adapter: bool = False) -> VLMBundle:
    """Load a VLM checkpoint directory (``AutoModelForImageTextToText`` + the family's processor), in eval mode.

    ``adapter``: a peft LoRA directory applied on top (``merge_adapter`` folds it into the weights).
    Raises FileNotFoundError for a missing directory, ValueError for an unsupported model type and
    :class:`AdapterMismatchError` for an adapter that does not fit the base.
    """
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    p = Path(path)
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"no VLM checkpoint at {p} (config.json missing)")
    dt = _resolve_dtype(dtype)
    spec = family_for_model_type(AutoConfig.from_pretrained(str(p)).model_type)
    processor = spec.load_processor(p)
    model = AutoModelForImageTextToText.from_pretrained(str(p), dtype=dt).to(torch.device(device)).eval()
    bundle = VLMBundle(model=model, processor=processor, family=spec.name, image_size=_image_size(processor), path=p)
    if adapter is not None:
        apply_adapter(bundle, adapter, merge=merge_adapter)
    log.info("loaded %s VLM from %s (%.1f M parameters, %s on %s)%s", spec.name, p,
             sum(x.numel() for x in model.parameters()) / 1e6, dt, device, f" + adapter {adapter}" if adapter else "")
    return bundle


def base_fingerprint(model: Any) -> str:
    """Hash of the model config (architecture sizes) and its input-embedding weights."""
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = base.config.to_dict()
    keep = {k: v for k, v in cfg.items() if k not in ("_name_or_path", "transformers_version", "dtype", "torch_dtype")}
    h = hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode())
    emb = base.get_input_embeddings().weight.detach().to(torch.float32).cpu()
    h.update(emb[:: max(1, emb.shape[0] // 64)].numpy().tobytes())
    return h.hexdigest()[:16]


def write_adapter_meta(adapter_dir: str | Path, bundle: VLMBundle, **extra: Any) -> None:
    """Record which base an adapter was trained on (checked by :func:`apply_adapter`); call after saving it."""
    meta = {"family": bundle.family, "base_fingerprint": base_fingerprint(bundle.model),
            "base_path": str(bundle.path), **extra}
    (Path(adapter_dir) / ADAPTER_META).write_text(json.dumps(meta, indent=1, default=str))


def apply_adapter(bundle: VLMBundle, adapter: str | Path, merge: bool = False) -> VLMBundle:
    """Apply a peft LoRA adapter directory to ``bundle.model`` in place (eval mode).

    Checks, each an :class:`AdapterMismatchError` naming what is wrong: the directory holds a peft adapter; its
    recorded base fingerprint (``allday_adapter.json``, when present) equals this base's; its target modules
    exist in this model; its tensor shapes fit.
    """
    from peft import PeftConfig, PeftModel

    a = Path(adapter)
    if not (a / "adapter_config.json").is_file():
        raise AdapterMismatchError(f"adapter directory {a} has no adapter_config.json (not a peft adapter)")
    meta_file = a / ADAPTER_META
    if meta_file.is_file():
        try:
            meta = read_json_object(meta_file)
        except ValueError as exc:
            raise AdapterMismatchError(f"adapter {a}: {exc}") from exc
        want, have = meta.get("base_fingerprint"), base_fingerprint(bundle.model)
        if want and want != have:
            raise AdapterMismatchError(
                f"adapter {a} was trained on base {meta.get('base_path')!r} (fingerprint {want}), "
                f"not on {bundle.path} (fingerprint {have})")
    try:
        PeftConfig.from_pretrained(str(a))
        model = PeftModel.from_pretrained(bundle.model, str(a), is_trainable=False)
    except (ValueError, RuntimeError, KeyError) as exc:
        raise AdapterMismatchError(f"adapter {a} does not fit base {bundle.path}: {exc}") from exc
    model.eval()
    bundle.model = model.merge_and_unload() if merge else model
    bundle.adapter = a
    return bundle
