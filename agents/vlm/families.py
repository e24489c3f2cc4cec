"""Model families: how to build a tiny one, how to lay out a prompt, which modules LoRA adapts (a registry).

A :class:`FamilySpec` bundles everything that differs between VLM families. Adding a family is a new module with
a spec plus one ``FAMILIES.register(...)`` line (see :mod:`agents.vlm.paligemma`, :mod:`agents.vlm.qwen`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.core.registry import Registry

if TYPE_CHECKING:
    from agents.vlm.config import TinyVLMConfig


@dataclass(frozen=True)
class FamilySpec:
    """What one VLM family needs.

    - ``model_types``: transformers ``config.model_type`` values of this family (to recognise a checkpoint);
    - ``build_tiny(cfg, out_dir)``: write a random-weight model + tokenizer + processor to ``out_dir``;
    - ``load_processor(path)``: the processor of a checkpoint directory (``AutoProcessor`` where it works);
    - ``prefix_text(prompt, n_images)``: the text fed to the processor for one prompt (image placeholders
      included), whose tokens end where generation starts;
    - ``lora_regex``: a ``target_modules`` regex limited to the language model;
    - ``extra_inputs(batch, bundle)``: adds inputs the model needs besides the processor output (may be None);
    - ``uses_suffix``: the processor takes ``suffix=`` and returns prefix-LM ``labels``/``token_type_ids``;
    - ``projector_module``: dotted name suffix of the module that maps vision-tower features into the language
      model (its input is the vision tower's output); ``projector_regex``: ``target_modules`` regex of its linears.
    """

    name: str
    model_types: tuple[str, ...]
    build_tiny: Callable[["TinyVLMConfig", Path], None]
    load_processor: Callable[[Path], Any]
    prefix_text: Callable[[str, int], str]
    lora_regex: str
    check_config: Callable[["TinyVLMConfig"], None] = lambda cfg: None
    extra_inputs: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None
    uses_suffix: bool = False
    projector_module: str = ""
    projector_regex: str = ""
    notes: str = field(default="", compare=False)


FAMILIES: Registry[FamilySpec] = Registry("VLM family")


def register_family(spec: FamilySpec) -> FamilySpec:
    """Register ``spec`` under its name (one line per family module)."""
    return FAMILIES.register(spec.name)(spec)


def family_for_model_type(model_type: str) -> FamilySpec:
    """The family whose ``model_types`` contain ``model_type`` (ValueError listing the supported ones)."""
    _ensure_builtin()
    for name in FAMILIES:
        spec = FAMILIES.get(name)
        if model_type in spec.model_types:
            return spec
    known = sorted(t for n in FAMILIES for t in FAMILIES.get(n).model_types)
    raise ValueError(f"unsupported VLM model_type {model_type!r}; supported: {known}")


def get_family(name: str) -> FamilySpec:
    """The :class:`FamilySpec` registered as ``name`` (ValueError listing the known names)."""
    _ensure_builtin()
    if name not in FAMILIES:
        raise ValueError(f"unknown VLM family {name!r}; known: {FAMILIES.names()}")
    return FAMILIES.get(name)


def lora_target_regex(family: str) -> str:
    """``target_modules`` regex for peft's LoraConfig: all linear layers of the language model only
    (q/k/v/o and the MLP's gate/up/down), never the vision tower, which uses the same projection names."""
    return get_family(family).lora_regex


def projector_target_regex(family: str) -> str:
    """``target_modules`` regex of the family's multimodal projector linears (ValueError if it has none)."""
    spec = get_family(family)
    if not spec.projector_regex:
        raise ValueError(f"VLM family {family!r} names no projector to adapt")
    return spec.projector_regex


def _ensure_builtin() -> None:
    import agents.vlm.paligemma  # noqa: F401 - registers "paligemma"
    import agents.vlm.qwen  # noqa: F401 - registers "qwen2_5_vl"
