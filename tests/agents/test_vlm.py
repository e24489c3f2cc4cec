"""agents.vlm: tiny offline VLMs (PaliGemma default, Qwen2.5-VL), loading, inputs, generation, adapters."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from agents.vlm import (
    MICRO_SIZES,
    AdapterMismatchError,
    GenerationSettings,
    TinyVLMConfig,
    apply_adapter,
    build_tiny_vlm,
    check_image,
    collate,
    generate,
    load_vlm,
    lora_target_regex,
    sequence_logprob,
    training_example,
    write_adapter_meta,
)

#: a very small model so the tests stay fast on 2 shared cores
MICRO = dict(MICRO_SIZES)


def image(seed: int = 0, size: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)


@pytest.fixture(scope="module", params=["paligemma", "qwen2_5_vl"])
def tiny(request, tmp_path_factory):
    d = build_tiny_vlm(tmp_path_factory.mktemp(request.param), config=TinyVLMConfig(family=request.param, **MICRO))
    return d, load_vlm(d)


def test_config_validation():
    with pytest.raises(ValueError, match="family"):
        TinyVLMConfig(family="llava_next_video")
    with pytest.raises(ValueError, match="patch_size"):
        TinyVLMConfig(image_size=60, patch_size=16)
    with pytest.raises(ValueError, match="2 \\* patch_size"):
        TinyVLMConfig(family="qwen2_5_vl", image_size=48, patch_size=16)
    with pytest.raises(ValueError, match="hidden_size"):
        TinyVLMConfig(hidden_size=100, num_heads=3)


def test_build_refuses_a_non_empty_dir(tmp_path):
    (tmp_path / "x").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        build_tiny_vlm(tmp_path, config=TinyVLMConfig(**MICRO))
    assert (tmp_path / "x").read_text() == "keep me"
    with pytest.raises(FileNotFoundError):
        load_vlm(tmp_path / "nowhere")


def test_load_describes_the_model(tiny):
    path, b = tiny
    assert b.image_size == 32 and b.path == path
    assert type(b.model).__name__ in ("PaliGemmaForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration")
    assert not b.model.training


def test_lora_regex_matches_language_model_linears_only(tiny):
    _, b = tiny
    rx = re.compile(lora_target_regex(b.family))
    hits = [n for n, m in b.model.named_modules() if isinstance(m, torch.nn.Linear) and rx.fullmatch(n)]
    assert len(hits) == 7 * MICRO["num_layers"]  # q, k, v, o, gate, up, down per layer
    assert all("language_model" in n for n in hits)
    vision = [n for n, m in b.model.named_modules() if ("vision" in n or "visual" in n)
              and isinstance(m, torch.nn.Linear)]
    assert vision and not any(rx.fullmatch(n) for n in vision)


def test_generate_greedy_is_deterministic_and_batch_consistent(tiny):
    _, b = tiny
    s = GenerationSettings(max_new_tokens=6)
    one = generate(b, [image(0)], ["pick up the cube"], s)[0]
    batch = generate(b, [image(0), image(1)], ["pick up the cube", "a longer prompt about the red block"], s)
    assert len(one.token_ids) == 6 and batch[0] == one
    sampled = [generate(b, [image(0)], ["pick up"], GenerationSettings(6, temperature=1.0, seed=k))[0]
               for k in (1, 1, 2)]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]


def test_training_example_masks_the_prompt_and_matches_generation_prefix(tiny):
    _, b = tiny
    target = "[[1.0, 0.0, -2.5, 1]]"
    ex = training_example(b, image(0), "move the arm", target)
    ids = b.tokenizer(target, add_special_tokens=False)["input_ids"] + [b.tokenizer.eos_token_id]
    n = len(ids)
    assert ex["input_ids"][-n:].tolist() == ids and ex["labels"][-n:].tolist() == ids
    assert (ex["labels"][:-n] == -100).all()
    by_ids = training_example(b, image(0), "move the arm", ids[:-1])
    assert torch.equal(by_ids["input_ids"], ex["input_ids"]) and torch.equal(by_ids["labels"], ex["labels"])
    batch = collate(b, [ex, training_example(b, image(1), "a much longer prompt for the arm", "no")])
    assert batch["input_ids"].shape == batch["labels"].shape
    assert torch.isfinite(b.model(**batch).loss)
    with pytest.raises(ValueError, match="special"):
        training_example(b, image(0), "x", [b.tokenizer.eos_token_id])


def test_save_load_identical_outputs(tiny, tmp_path):
    path, b = tiny
    b2 = load_vlm(path)
    p = ["pick up the cube"]
    lp1 = sequence_logprob(b, [image(3)], p, ["lift"])
    lp2 = sequence_logprob(b2, [image(3)], p, ["lift"])
    assert lp1 == lp2
    assert generate(b, [image(3)], p, GenerationSettings(8)) == generate(b2, [image(3)], p, GenerationSettings(8))


def test_lora_adapter_round_trip_and_mismatch(tiny, tmp_path, tmp_path_factory):
    from peft import LoraConfig, get_peft_model

    path, _ = tiny
    b = load_vlm(path)
    peft = get_peft_model(b.model, LoraConfig(r=4, lora_alpha=8, target_modules=lora_target_regex(b.family),
                                              init_lora_weights=False))
    b.model = peft.eval()
    want = sequence_logprob(b, [image(4)], ["lift it"], ["yes"])
    peft.save_pretrained(tmp_path / "adapter")
    write_adapter_meta(tmp_path / "adapter", b)
    again = load_vlm(path, adapter=tmp_path / "adapter")
    assert sequence_logprob(again, [image(4)], ["lift it"], ["yes"]) == pytest.approx(want, abs=1e-5)
    base = sequence_logprob(load_vlm(path), [image(4)], ["lift it"], ["yes"])
    assert abs(base[0] - want[0]) > 1e-3  # the adapter changes the model
    # same architecture, other weights: caught by the recorded fingerprint
    other = build_tiny_vlm(tmp_path_factory.mktemp("other"), config=TinyVLMConfig(family=b.family, seed=7, **MICRO))
    with pytest.raises(AdapterMismatchError, match="fingerprint"):
        load_vlm(other, adapter=tmp_path / "adapter")
    # other sizes and no fingerprint file: caught by peft's shape check
    (tmp_path / "adapter" / "allday_adapter.json").unlink()
    bigger = build_tiny_vlm(tmp_path_factory.mktemp("bigger"),
                            config=TinyVLMConfig(family=b.family, **{**MICRO, "hidden_size": 128}))
    with pytest.raises(AdapterMismatchError, match="does not fit"):
        load_vlm(bigger, adapter=tmp_path / "adapter")
    with pytest.raises(AdapterMismatchError, match="adapter_config"):
        apply_adapter(load_vlm(path), tmp_path)


def test_check_image_errors():
    assert check_image(image(0)).shape == (32, 32, 3)
    with pytest.raises(ValueError, match="uint8"):
        check_image(image(0).astype(np.float32))
    with pytest.raises(ValueError, match="HxWx3"):
        check_image(np.zeros((32, 32), np.uint8))
    with pytest.raises(ValueError, match="64x64"):
        check_image(image(0), expected_size=64)
    with pytest.raises(TypeError, match="numpy"):
        check_image([[1, 2, 3]])
