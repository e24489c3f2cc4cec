"""The Qwen2.5-VL family, through an image-only processor (the video processor needs torchvision).

``ImageOnlyQwenProcessor`` is ENVIRONMENT.md §2's workaround: Qwen2.5-VL's processor without its video processor,
so it builds and loads on machines without torchvision; the same class loads real checkpoints' processors.
Qwen-VL models need ``mm_token_type_ids`` (1 on image-pad tokens) with ``pixel_values`` (:func:`extra_inputs`).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.vlm.families import FamilySpec, register_family

if TYPE_CHECKING:
    from agents.vlm.config import TinyVLMConfig

log = logging.getLogger(__name__)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>")
IMAGE_PAD = "<|image_pad|>"
MERGE = 2
LM_LINEAR = "q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj"


@functools.cache
def _processor_class() -> type:
    from transformers import Qwen2_5_VLProcessor

    class ImageOnlyQwenProcessor(Qwen2_5_VLProcessor):
        """Qwen2.5-VL processor with images and text only (no video processor, hence no torchvision)."""

        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

        def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None,
                     **kw: Any) -> None:
            super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kw)

    return ImageOnlyQwenProcessor


def _check(cfg: "TinyVLMConfig") -> None:
    if cfg.image_size % (MERGE * cfg.patch_size):
        raise ValueError(f"image_size {cfg.image_size} must be a multiple of 2 * patch_size = {2 * cfg.patch_size} "
                         "(Qwen2.5-VL merges 2x2 patches)")
    if cfg.head_dim % 4:
        raise ValueError(f"head_dim {cfg.head_dim} must be divisible by 4 (multimodal RoPE sections)")


def make_image_processor(image_size: int, patch_size: int) -> Any:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    px = image_size * image_size
    return Qwen2VLImageProcessorPil(size={"shortest_edge": px, "longest_edge": px}, patch_size=patch_size,
                                    merge_size=MERGE, temporal_patch_size=2)


def build_tiny(cfg: "TinyVLMConfig", out_dir: Path) -> None:
    """Write a random-weight Qwen2.5-VL, its BPE tokenizer and image-only processor to ``out_dir``."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from agents.vlm.tokenizer import build_bpe_tokenizer

    tok = build_bpe_tokenizer(cfg.corpus, cfg.bpe_vocab_size, SPECIAL_TOKENS, bos=None, eos="<|im_end|>",
                              pad="<|endoftext|>")
    proc = _processor_class()(image_processor=make_image_processor(cfg.image_size, cfg.patch_size), tokenizer=tok)
    vocab = len(tok)
    ids = {k: tok.convert_tokens_to_ids(k) for k in SPECIAL_TOKENS}
    half = cfg.head_dim // 2
    hw = half * 3 // 8  # as Qwen2.5-VL's [16, 24, 24] for head_dim 128: temporal, height, width
    sections = [half - 2 * hw, hw, hw]
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": vocab, "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
            "num_key_value_heads": cfg.num_kv_heads, "max_position_embeddings": 2048,
            "rope_parameters": {"rope_type": "default", "mrope_section": sections, "rope_theta": 10000.0},
            "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
            "bos_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": cfg.vision_layers, "hidden_size": cfg.vision_hidden_size,
            "intermediate_size": cfg.vision_intermediate_size, "num_heads": cfg.vision_heads,
            "patch_size": cfg.patch_size, "spatial_merge_size": MERGE, "temporal_patch_size": 2,
            "out_hidden_size": cfg.hidden_size, "window_size": cfg.patch_size * MERGE * 2,
            "fullatt_block_indexes": [cfg.vision_layers - 1],
        },
        image_token_id=ids[IMAGE_PAD], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(cfg.seed)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    gc = model.generation_config
    gc.pad_token_id, gc.eos_token_id, gc.bos_token_id = ids["<|endoftext|>"], ids["<|im_end|>"], None
    model.save_pretrained(out_dir)
    proc.save_pretrained(out_dir)
    log.info("tiny Qwen2.5-VL: %.2f M parameters, vocab %d -> %s", model.num_parameters() / 1e6, vocab, out_dir)


def load_processor(path: Path) -> Any:
    return _processor_class().from_pretrained(str(path))


def prefix_text(prompt: str, n_images: int) -> str:
    image = f"<|vision_start|>{IMAGE_PAD}<|vision_end|>" * n_images
    return f"<|im_start|>user\n{image}{prompt}<|im_end|>\n<|im_start|>assistant\n"


def extra_inputs(batch: dict[str, Any], bundle: Any) -> dict[str, Any]:
    """``mm_token_type_ids``: 1 on image-pad tokens (Qwen-VL requires it whenever pixel_values are passed)."""
    if "mm_token_type_ids" in batch or "pixel_values" not in batch:
        return {}
    image_id = bundle.processor.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    return {"mm_token_type_ids": (batch["input_ids"] == image_id).long()}


SPEC = register_family(FamilySpec(
    name="qwen2_5_vl", model_types=("qwen2_5_vl",), build_tiny=build_tiny, load_processor=load_processor,
    prefix_text=prefix_text, lora_regex=rf".*language_model.*\.({LM_LINEAR})$", check_config=_check,
    projector_module="visual.merger", projector_regex=r".*visual\.merger\.mlp\.\d+$",
    extra_inputs=extra_inputs, uses_suffix=False, notes="Qwen2.5-VL via an image-only processor",
))
