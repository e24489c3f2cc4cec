"""The shared VLM backbone layer: tiny offline models, loading real checkpoints, inputs, generation.

Used by the VLA policy (:mod:`agents.vla`) and the VLN navigator (:mod:`agents.vln`). Families (PaliGemma by
default, Qwen2.5-VL) are a registry (:mod:`agents.vlm.families`). Importing this package does not import torch or
transformers; they are imported inside the functions that need them.
"""

from agents.vlm.bundle import (
    AdapterMismatchError,
    VLMBundle,
    apply_adapter,
    base_fingerprint,
    build_tiny_vlm,
    load_vlm,
    write_adapter_meta,
)
from agents.vlm.config import MICRO_SIZES, TinyVLMConfig
from agents.vlm.families import FAMILIES, FamilySpec, get_family, lora_target_regex, projector_target_regex
from agents.vlm.generate import Generation, GenerationSettings, generate, generate_text, sequence_logprob
from agents.vlm.inputs import IGNORE_INDEX, check_image, collate, prefix_inputs, target_ids, training_example

__all__ = [
    "FAMILIES",
    "IGNORE_INDEX",
    "AdapterMismatchError",
    "FamilySpec",
    "Generation",
    "GenerationSettings",
    "MICRO_SIZES",
    "TinyVLMConfig",
    "VLMBundle",
    "apply_adapter",
    "base_fingerprint",
    "build_tiny_vlm",
    "check_image",
    "collate",
    "generate",
    "generate_text",
    "get_family",
    "load_vlm",
    "lora_target_regex",
    "projector_target_regex",
    "prefix_inputs",
    "sequence_logprob",
    "target_ids",
    "training_example",
    "write_adapter_meta",
]
