"""The PaliGemma family (default): SigLIP tower + Gemma LM, prefix-LM ``suffix=`` training path."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.vlm.families import FamilySpec, register_family

if TYPE_CHECKING:
    from agents.vlm.config import TinyVLMConfig

log = logging.getLogger(__name__)

IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>", IMAGE_TOKEN)
LM_LINEAR = "q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj"


def _check(cfg: "TinyVLMConfig") -> None:
    if cfg.image_size % cfg.patch_size:
        raise ValueError(f"image_size {cfg.image_size} must be a multiple of patch_size {cfg.patch_size} (PaliGemma)")


def make_processor(tokenizer: Any, image_size: int, patch_size: int) -> Any:
    """A PaliGemmaProcessor over the PIL SigLIP image processor (no torchvision needed)."""
    from transformers import PaliGemmaProcessor
    from transformers.models.siglip import SiglipImageProcessorPil

    improc = SiglipImageProcessorPil(size={"height": image_size, "width": image_size},
                                     image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    improc.image_seq_length = (image_size // patch_size) ** 2
    return PaliGemmaProcessor(image_processor=improc, tokenizer=tokenizer)


def build_tiny(cfg: "TinyVLMConfig", out_dir: Path) -> None:
    """Write a random-weight PaliGemma (SigLIP + Gemma), its BPE tokenizer and processor to ``out_dir``."""
    import torch
    from transformers import PaliGemmaConfig, PaliGemmaForConditionalGeneration

    from agents.vlm.tokenizer import build_bpe_tokenizer

    tok = build_bpe_tokenizer(cfg.corpus, cfg.bpe_vocab_size, SPECIAL_TOKENS, bos="<bos>", eos="<eos>",
                              pad="<pad>", unk="<unk>")
    proc = make_processor(tok, cfg.image_size, cfg.patch_size)  # adds PaliGemma's <loc>/<seg> tokens
    tok = proc.tokenizer
    vocab = len(tok)
    ids = {k: tok.convert_tokens_to_ids(k) for k in SPECIAL_TOKENS}
    config = PaliGemmaConfig(
        vision_config={
            "model_type": "siglip_vision_model", "hidden_size": cfg.vision_hidden_size,
            "intermediate_size": cfg.vision_intermediate_size, "num_hidden_layers": cfg.vision_layers,
            "num_attention_heads": cfg.vision_heads, "image_size": cfg.image_size, "patch_size": cfg.patch_size,
            "projection_dim": cfg.hidden_size, "vision_use_head": False,
        },
        text_config={
            "model_type": "gemma", "vocab_size": vocab, "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
            "head_dim": cfg.head_dim, "max_position_embeddings": 2048, "pad_token_id": ids["<pad>"],
            "bos_token_id": ids["<bos>"], "eos_token_id": ids["<eos>"],
        },
        image_token_index=ids[IMAGE_TOKEN], vocab_size=vocab, projection_dim=cfg.hidden_size,
        hidden_size=cfg.hidden_size,
    )
    config.pad_token_id, config.bos_token_id, config.eos_token_id = ids["<pad>"], ids["<bos>"], ids["<eos>"]
    torch.manual_seed(cfg.seed)
    model = PaliGemmaForConditionalGeneration(config).eval()
    gc = model.generation_config
    gc.pad_token_id, gc.bos_token_id, gc.eos_token_id = ids["<pad>"], ids["<bos>"], ids["<eos>"]
    model.save_pretrained(out_dir)
    proc.save_pretrained(out_dir)
    log.info("tiny PaliGemma: %.2f M parameters, vocab %d -> %s", model.num_parameters() / 1e6, vocab, out_dir)


def load_processor(path: Path) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(path))


def prefix_text(prompt: str, n_images: int) -> str:
    # the processor inserts <bos> after the image tokens and "\n" at the end (big_vision's prefix layout)
    return IMAGE_TOKEN * n_images + prompt


SPEC = register_family(FamilySpec(
    name="paligemma", model_types=("paligemma",), build_tiny=build_tiny, load_processor=load_processor,
    prefix_text=prefix_text, lora_regex=rf".*language_model.*\.({LM_LINEAR})$", check_config=_check,
    projector_module="multi_modal_projector", projector_regex=r".*multi_modal_projector\.linear$",
    uses_suffix=True, notes="SigLIP + Gemma; real checkpoints: google/paligemma*-3b-*",
))
