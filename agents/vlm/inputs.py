"""Model inputs: images checked and converted, prompt prefixes for generation, (prompt, image, target) training
examples with prefix-masked labels, and a padding collator. Families differ only through :class:`FamilySpec`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from agents.vlm.bundle import VLMBundle

IGNORE_INDEX = -100


def check_image(image: Any, expected_size: int | None = None, name: str = "image") -> np.ndarray:
    """Return ``image`` as an HxWx3 uint8 array (PIL images are converted); ValueError/TypeError naming ``name``
    for anything else, and for a size other than ``expected_size`` x ``expected_size`` when one is given."""
    if hasattr(image, "convert") and hasattr(image, "size"):  # PIL
        image = np.asarray(image.convert("RGB"))
    if not isinstance(image, np.ndarray):
        raise TypeError(f"{name} must be an HxWx3 uint8 numpy array or a PIL image, got {type(image).__name__}")
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"{name} must be HxWx3 (RGB), got shape {image.shape}")
    if image.dtype != np.uint8:
        raise ValueError(f"{name} must be uint8 (0..255), got dtype {image.dtype}")
    if expected_size is not None and image.shape[:2] != (expected_size, expected_size):
        raise ValueError(f"{name} must be {expected_size}x{expected_size} for this model, got "
                         f"{image.shape[0]}x{image.shape[1]}")
    if image.shape[0] < 8 or image.shape[1] < 8:
        raise ValueError(f"{name} is too small ({image.shape[0]}x{image.shape[1]})")
    return image


def _to_device(batch: dict[str, Any], bundle: "VLMBundle") -> dict[str, Any]:
    import torch

    out = {}
    for k, v in batch.items():
        if isinstance(v, np.ndarray):
            v = torch.from_numpy(v)
        if isinstance(v, torch.Tensor):
            v = v.to(bundle.device)
            if v.is_floating_point():
                v = v.to(bundle.dtype)
        out[k] = v
    spec = bundle.spec
    if spec.extra_inputs is not None:
        out.update(spec.extra_inputs(out, bundle))
    return out


def prefix_inputs(bundle: "VLMBundle", images: Sequence[Any], prompts: Sequence[str]) -> dict[str, Any]:
    """Batched, left-padded generation inputs (tensors on the model's device) for one image per prompt."""
    if len(images) != len(prompts):
        raise ValueError(f"got {len(images)} images for {len(prompts)} prompts")
    imgs = [check_image(im, name=f"images[{i}]") for i, im in enumerate(images)]
    texts = [bundle.spec.prefix_text(p, 1) for p in prompts]
    tok = bundle.tokenizer
    side, tok.padding_side = tok.padding_side, "left"
    try:
        batch = bundle.processor(images=imgs, text=texts, padding=True, return_tensors="pt")
    finally:
        tok.padding_side = side
    batch = dict(batch)
    batch.pop("labels", None)
    return _to_device(batch, bundle)


def target_ids(bundle: "VLMBundle", target: str | Sequence[int]) -> list[int]:
    """Token ids of a generation target (text, or ids as given) followed by the end-of-sequence token."""
    tok = bundle.tokenizer
    if isinstance(target, str):
        ids = tok(target, add_special_tokens=False)["input_ids"]
    else:
        ids = [int(i) for i in target]
        if any(not 0 <= i < len(tok) for i in ids):
            raise ValueError(f"target token ids must be in [0, {len(tok)}), got {ids}")
        special = set(tok.all_special_ids) & set(ids)
        if special:
            raise ValueError(f"target token ids must not be special tokens (image/pad/eos...), got {sorted(special)}")
    return [*ids, int(tok.eos_token_id)]


def training_example(bundle: "VLMBundle", image: Any, prompt: str, target: str | Sequence[int]) -> dict[str, Any]:
    """One training example as 1-D tensors (batch dimension removed): ``input_ids``, ``attention_mask``,
    ``labels`` (IGNORE_INDEX on the prompt), the image inputs and the family's extra inputs
    (PaliGemma: ``token_type_ids``, 1 on the target; Qwen: ``mm_token_type_ids``, ``image_grid_thw``).

    The prompt part is exactly what :func:`prefix_inputs` gives at generation time. For PaliGemma with a
    text target this is the processor's ``suffix=`` path; token-id targets (action-token baselines) are appended.
    """
    import torch

    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt must be a non-empty string")
    img = check_image(image)
    spec = bundle.spec
    text = spec.prefix_text(prompt, 1)
    if spec.uses_suffix and isinstance(target, str):
        enc = dict(bundle.processor(images=[img], text=[text], suffix=[target], return_tensors="pt"))
        enc = {k: v[0] if k != "pixel_values" else v for k, v in enc.items()}
        enc["labels"] = torch.as_tensor(enc["labels"]).long()
        return enc
    enc = dict(bundle.processor(images=[img], text=[text], return_tensors="pt"))
    enc.pop("labels", None)
    prefix = enc["input_ids"][0]
    tgt = torch.tensor(target_ids(bundle, target), dtype=prefix.dtype)
    out = {k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask", "token_type_ids",
                                                     "mm_token_type_ids")}
    out["input_ids"] = torch.cat([prefix, tgt])
    out["attention_mask"] = torch.ones_like(out["input_ids"])
    out["labels"] = torch.cat([torch.full_like(prefix, IGNORE_INDEX), tgt])
    for key in ("token_type_ids", "mm_token_type_ids"):
        if key in enc:
            fill = 1 if key == "token_type_ids" else 0
            out[key] = torch.cat([enc[key][0], torch.full_like(tgt, fill)])
    return out


def collate(bundle: "VLMBundle", examples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Right-pad a list of :func:`training_example` outputs into one batch on the model's device."""
    import torch

    if not examples:
        raise ValueError("collate needs at least one example")
    pad = bundle.tokenizer.pad_token_id
    n = max(int(e["input_ids"].shape[0]) for e in examples)
    fills = {"input_ids": pad, "attention_mask": 0, "labels": IGNORE_INDEX, "token_type_ids": 0,
             "mm_token_type_ids": 0}
    batch: dict[str, Any] = {}
    for key, fill in fills.items():
        if key in examples[0]:
            rows = [torch.nn.functional.pad(torch.as_tensor(e[key]), (0, n - int(e[key].shape[0])), value=fill)
                    for e in examples]
            batch[key] = torch.stack(rows)
    for key in ("pixel_values", "image_grid_thw"):
        if key in examples[0]:
            batch[key] = torch.cat([torch.as_tensor(e[key]) for e in examples])
    return _to_device(batch, bundle)
